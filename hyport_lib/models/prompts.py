"""Prompts through the processor's own conventions, for any family.

Image tokens are never placed by hand: ``{"type": "image"}`` content parts go through the
processor's chat template and the images to the processor nested per prompt, so the
processor lines up a mixed batch. A processor without a chat template (PaliGemma) takes
the text as a prefix (``prefix`` format) and needs an image with every prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from hyport_lib.models.loading import (LoadedProcessor, ProcessorUnavailable, VideoSettingUnavailable,
                                      answering_unset_video_settings, chat_template_of, tokenizer_of)
from hyport_lib.utils.printable import first_line


@dataclass
class Prompt:
    """A prompt's text and its PIL images, in order."""

    text: str
    images: list = field(default_factory=list)


class PromptNotApplicable(ValueError):
    """The prompt cannot be given to this model (an image to a text-only model, a
    text-only prompt to a model that needs an image with each prompt)."""


def check_applicable(loaded: LoadedProcessor, prompt: Prompt, what: str) -> None:
    if prompt.images and not loaded.traits.multimodal:
        raise PromptNotApplicable(f"{what}: has an image, but {loaded.traits.model_type or 'the model'} "
                                  "is a text-only model")
    if not prompt.images and needs_image(loaded):
        raise PromptNotApplicable(f"{what}: has no image, but {loaded.traits.model_type}'s processor "
                                  "needs an image with every prompt")


def needs_image(loaded: LoadedProcessor) -> bool:
    """Prefix-format processors (PaliGemma) refuse a prompt without an image."""
    return loaded.traits.multimodal and loaded.prompt_format == "prefix"


def chat_text(loaded: LoadedProcessor, prompt: Prompt, *, enable_thinking: Optional[bool] = None) -> str:
    if loaded.prompt_format == "prefix":
        return prefix_text(loaded, prompt.text, len(prompt.images))
    content = [{"type": "image"} for _ in prompt.images] + [{"type": "text", "text": prompt.text}]
    return render_messages(loaded, [{"role": "user", "content": content}], generation_prompt=True,
                           enable_thinking=enable_thinking)


def prefix_text(loaded: LoadedProcessor, text: str, images: int) -> str:
    """One image token per image in front (where the processor names one; it expands each
    into the image's tokens), then the text."""
    token = getattr(loaded.processor, "image_token", None) if images else None
    return f"{token * images}{text}" if token else text


def render_messages(loaded: LoadedProcessor, messages: list[dict], *, generation_prompt: bool = False,
                    enable_thinking: Optional[bool] = None) -> str:
    """A text-only model's template gets string contents (many text templates do not read
    content parts). A processor may read settings its checkpoint lacks from a video
    processor that is not there (SmolVLM's ``num_frames`` and ``fps``, read for every
    conversation): see :func:`_render_without_video_settings`."""
    if not loaded.traits.multimodal:
        messages = [{"role": m["role"], "content": _text_of(m["content"])} for m in messages]
    extra: dict[str, Any] = {}
    # Only a template that reads the switch gets it: transformers hands any other keyword
    # to the processor call (with a warning).
    if enable_thinking is not None and "enable_thinking" in str(chat_template_of(loaded.processor)):
        extra["enable_thinking"] = enable_thinking

    def render() -> str:
        return loaded.processor.apply_chat_template(messages, tokenize=False,
                                                    add_generation_prompt=generation_prompt, **extra)

    try:
        return render()
    except VideoSettingUnavailable as exc:
        refusal = f"{type(loaded.processor).__name__}'s chat template: {exc}"
        if any(_is_video(part) for m in messages if isinstance(m.get("content"), list) for part in m["content"]):
            raise ProcessorUnavailable(refusal) from None
        return _render_without_video_settings(render, refusal)


#: Values a setting the checkpoint lacks is rendered with besides None (of two types: a
#: template testing for one value or one type shows it): a text that differs between them
#: depends on the setting.
_PROBE_SETTINGS = (17, 0.5)


def _render_without_video_settings(render, refusal: str) -> str:
    """A conversation without video, whose processor reads video settings its checkpoint
    lacks: rendered with each such setting unset (None, what transformers' video processor
    holds for a setting its config and class leave out, as SmolVLM's without
    ``video_sampling``) and again with other values. The same text every time does not
    depend on them and is returned; else ProcessorUnavailable, never a guessed value."""
    texts, read = [], []
    for value in (None, *_PROBE_SETTINGS):
        with answering_unset_video_settings(value) as names:
            try:
                texts.append(render())
            except Exception as exc:  # noqa: BLE001 — it could not do without the setting: refused
                raise ProcessorUnavailable(f"{refusal} (rendered without it: {type(exc).__name__}: "
                                           f"{first_line(exc)[:200]})") from None
        read += [name for name in names if name not in read]
    if any(text != texts[0] for text in texts[1:]):
        raise ProcessorUnavailable(f"{refusal} (the text of a conversation without video depends on "
                                   f"{', '.join(read)})")
    return texts[0]


def _is_video(part) -> bool:
    return isinstance(part, dict) and part.get("type") == "video"


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def encode_prompts(loaded: LoadedProcessor, prompts: Sequence[Prompt], *,
                   enable_thinking: Optional[bool] = None) -> dict:
    """Padded on the left: generation appends on the right."""
    texts = [chat_text(loaded, p, enable_thinking=enable_thinking) for p in prompts]
    tokenizer_of(loaded.processor).padding_side = "left"
    call: dict[str, Any] = {"text": texts, "padding": True, "return_tensors": "pt"}
    if loaded.prompt_format == "chat":
        # The template wrote the special tokens (bos included) already: adding them again
        # would give Gemma3 and Llama 3 two bos tokens (transformers' own
        # apply_chat_template(tokenize=True) tokenises the same way).
        call["add_special_tokens"] = False
    if any(p.images for p in prompts):
        call["images"] = [list(p.images) for p in prompts]
    return dict(loaded.processor(**call))


def sample_image(size: tuple[int, int] = (64, 64)):
    """An RGB picture of a small scene, ``size`` ``(width, height)`` at least 16 pixels each,
    drawn offline. The same size always gives the same pixels, so the cards of a grid can
    compare outputs by hash."""
    from PIL import Image, ImageDraw

    width, height = (int(v) for v in size)
    if width < 16 or height < 16:
        raise ValueError(f"size={size!r}: width and height must be at least 16 pixels")
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    horizon = height * 3 // 5
    for y in range(height):
        if y < horizon:  # sky: light blue fading to white
            t = y / max(horizon - 1, 1)
            colour = (int(135 + 120 * t), int(190 + 65 * t), 250)
        else:  # table top: warm grey
            t = (y - horizon) / max(height - horizon - 1, 1)
            colour = (int(170 - 50 * t), int(150 - 45 * t), int(130 - 40 * t))
        draw.line([(0, y), (width - 1, y)], fill=colour)

    def box(x0, y0, x1, y1):
        return [int(x0 * width), int(y0 * height), int(x1 * width), int(y1 * height)]

    draw.ellipse(box(0.72, 0.06, 0.92, 0.26), fill=(250, 210, 40))  # sun
    draw.ellipse(box(0.08, 0.45, 0.36, 0.73), fill=(215, 40, 40), outline=(90, 10, 10))
    draw.rectangle(box(0.40, 0.50, 0.64, 0.74), fill=(40, 80, 210), outline=(10, 20, 90))
    draw.polygon(
        [
            (int(0.68 * width), int(0.76 * height)),
            (int(0.96 * width), int(0.76 * height)),
            (int(0.82 * width), int(0.46 * height)),
        ],
        fill=(40, 170, 70),
        outline=(10, 70, 20),
    )
    return image
