"""On-disk tensor names against the model's own (:mod:`hyport_lib.weights.names`)."""

from __future__ import annotations

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.names import model_names

from .test_compare import _key


def test_names_map_every_key_to_the_model():
    tiny = ensure_tiny_model()
    names = model_names(tiny)
    keys = inspect_checkpoint(tiny, with_model=False).tensors
    assert names.class_name == "LlavaForConditionalGeneration" and not names.error
    assert {names.to_model(k) for k in keys} == set(names.expected)
    assert names.to_model(_key(tiny, "embed_tokens.weight")) == "model.language_model.embed_tokens.weight"
