"""Prompts through the processor's own conventions (models/prompts.py): which prompts a model
can take, the prefix format's image tokens, and the sample picture drawn offline."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hyport_lib.models.families import CAUSAL_LM, IMAGE_TEXT_TO_TEXT, ModelTraits
from hyport_lib.models.loading import LoadedProcessor
from hyport_lib.models.prompts import (Prompt, PromptNotApplicable, chat_text, check_applicable, needs_image,
                                       prefix_text, sample_image)

TEXT_ONLY = ModelTraits("qwen3", False, CAUSAL_LM)
VLM = ModelTraits("paligemma", True, IMAGE_TEXT_TO_TEXT)


def test_a_prompt_the_model_cannot_take_is_refused_naming_it():
    chat = LoadedProcessor(SimpleNamespace(), TEXT_ONLY)
    prefix = LoadedProcessor(SimpleNamespace(image_token="<image>"), VLM, prompt_format="prefix")
    assert not needs_image(chat) and needs_image(prefix)
    check_applicable(chat, Prompt("hi"), "the prompt")
    check_applicable(prefix, Prompt("hi", ["an image"]), "the prompt")
    with pytest.raises(PromptNotApplicable, match=r"^batch_prompts\[1\]: has an image, but qwen3 is a text-only model$"):
        check_applicable(chat, Prompt("hi", ["an image"]), "batch_prompts[1]")
    with pytest.raises(PromptNotApplicable, match=r"^the prompt: has no image, but paligemma's processor needs an image"):
        check_applicable(prefix, Prompt("hi"), "the prompt")


def test_a_prefix_prompt_puts_one_image_token_per_image_in_front():
    loaded = LoadedProcessor(SimpleNamespace(image_token="<image>"), VLM, prompt_format="prefix")
    assert prefix_text(loaded, "caption", 2) == "<image><image>caption"
    assert prefix_text(loaded, "caption", 0) == "caption"
    assert chat_text(loaded, Prompt("caption", ["an image"])) == "<image>caption"
    nameless = LoadedProcessor(SimpleNamespace(), VLM, prompt_format="prefix")
    assert prefix_text(nameless, "caption", 1) == "caption"  # the processor places it itself


def test_sample_image_is_deterministic_and_colourful():
    a, b = sample_image(), sample_image()
    assert a.size == (64, 64) and a.mode == "RGB"
    assert a.tobytes() == b.tobytes()
    assert len(a.getcolors(maxcolors=64 * 64)) >= 8, "shapes and a gradient, not a flat picture"
    assert sample_image((96, 48)).size == (96, 48)
    with pytest.raises(ValueError, match="size"):
        sample_image((8, 8))


