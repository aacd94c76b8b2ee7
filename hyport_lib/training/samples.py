"""Records -> token sequences with their labels, through the model's own chat template.

A record's turns become chat messages (``human`` -> ``user``, ``gpt`` -> ``assistant``;
each ``<image>`` becomes an image item) and the whole conversation is rendered with the
processor's chat template and tokenised with the processor (which expands each image
placeholder into the model's image tokens). Labels are the token ids of the
assistant answers (their text and end-of-turn marker) and ``-100`` everywhere else:
the user turns, the template's role headers, and padding.

Where each answer starts and ends is found from prefixes of the conversation rendered
by the same template: the tokens of "everything up to this answer's header" and of
"everything up to and including this answer". This works for any template that
renders a prefix of the messages as a prefix of the text (the usual case); a template
that does not is reported, rather than producing wrong labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hyport_lib.training.dataset import IMAGE_PLACEHOLDER, Problem, Record

IGNORE_INDEX = -100
OVERFLOW_MODES = ("truncate", "drop")


@dataclass
class Sample:
    """One encoded record.

    Attributes:
        record_id: the record's id.
        input_ids: token ids (images expanded).
        labels: ``input_ids`` on answer tokens, ``-100`` elsewhere.
        pixel_values: the processor's pixel tensor of the record's images (one row per
            image, in order), or None for a text-only record.
        truncated: the sample was cut to ``max_seq_len``.
        image_extras: the processor's other per-image tensors (``image_grid_thw``,
            ``image_sizes``, ...), one row per image, batched like ``pixel_values``.
    """

    record_id: str
    input_ids: list[int]
    labels: list[int]
    pixel_values: Any = None
    truncated: bool = False
    image_extras: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def label_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE_INDEX)


def messages_of(record: Record) -> list[dict]:
    """The record's turns as chat messages with ``{"type": "image"}`` items."""
    messages = []
    for role, text in record.turns:
        pieces = text.split(IMAGE_PLACEHOLDER)
        content: list[dict] = []
        for i, piece in enumerate(pieces):
            if i:
                content.append({"type": "image"})
            if piece.strip():
                content.append({"type": "text", "text": piece.strip("\n")})
        messages.append({"role": role, "content": content})
    return messages


def _tokenizer(processor):
    return getattr(processor, "tokenizer", processor)


class Encoder:
    """Encodes records for one processor; caches opened images.

    Args:
        processor: the model's processor (tokenizer + image processor + chat template).
        max_seq_len: the longest sample allowed.
        overflow: ``truncate`` (cut the sample, keeping every image token) or ``drop``.
    """

    def __init__(self, processor, max_seq_len: int, overflow: str = "truncate"):
        if overflow not in OVERFLOW_MODES:
            raise ValueError(f"overflow={overflow!r}: expected one of {', '.join(OVERFLOW_MODES)}")
        if int(max_seq_len) < 8:
            raise ValueError(f"max_seq_len={max_seq_len!r}: expected at least 8 tokens")
        self.processor = processor
        self.max_seq_len = int(max_seq_len)
        self.overflow = overflow
        tokenizer = _tokenizer(processor)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.image_token_id = _image_token_id(processor)

    def _render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        return self.processor.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def _ids(self, text: str, images: list) -> tuple[list[int], dict]:
        """Token ids, and the image tensors (``pixel_values`` and whatever else the
        processor returns per image: Qwen2-VL-style models need ``image_grid_thw``)."""
        import torch

        call: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
        if images:
            call["images"] = images
        out = self.processor(**call)
        image = {k: v for k, v in out.items() if k not in _TEXT_KEYS and isinstance(v, torch.Tensor)}
        return out["input_ids"][0].tolist(), image

    def encode(self, record: Record) -> tuple[Optional[Sample], Optional[Problem]]:
        """One record -> a :class:`Sample`, or None and the problem (too long)."""
        messages = messages_of(record)
        images = [_open_image(p) for p in record.images]
        ids, image = self._ids(self._render(messages), images)
        pixels = image.pop("pixel_values", None)
        labels = [IGNORE_INDEX] * len(ids)
        seen_images = 0
        for k, message in enumerate(messages):
            seen_images += sum(1 for c in message["content"] if c["type"] == "image")
            if message["role"] != "assistant":
                continue
            header, _ = self._ids(self._render(messages[:k], True), images[:seen_images])
            upto, _ = self._ids(self._render(messages[:k + 1]), images[:seen_images])
            if ids[:len(header)] != header or ids[:len(upto)] != upto:
                raise ValueError(
                    f"record {record.index} (id {record.record_id!r}): this model's chat template "
                    "does not render a prefix of the conversation as a prefix of the text, so "
                    "the answer tokens cannot be located for the labels")
            labels[len(header):len(upto)] = ids[len(header):len(upto)]
        sample = Sample(record.record_id, ids, labels, pixels, image_extras=image if pixels is not None else {})
        return self._fit(record, sample)

    def _fit(self, record: Record, sample: Sample) -> tuple[Optional[Sample], Optional[Problem]]:
        limit = self.max_seq_len
        if len(sample) <= limit:
            return sample, None

        def too_long(why: str) -> tuple[None, Problem]:
            return None, Problem(record.index, record.record_id, "conversations", "too_long",
                                 f"{len(sample)} tokens after tokenisation > max_seq_len={limit}{why}")

        if self.overflow == "drop":
            return too_long(" (overflow='drop')")
        if self.image_token_id is not None and self.image_token_id in sample.input_ids[limit:]:
            return too_long(": truncating would cut an image's tokens; raise max_seq_len")
        labels = sample.labels[:limit]
        if all(x == IGNORE_INDEX for x in labels):
            return too_long(": truncated, no answer token would be left")
        return Sample(sample.record_id, sample.input_ids[:limit], labels, sample.pixel_values,
                      truncated=True, image_extras=sample.image_extras), None


#: Processor outputs that belong to the text (rebuilt by the collators), not to the images.
_TEXT_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids",
                        "position_ids"})


def _image_token_id(processor) -> Optional[int]:
    token = getattr(processor, "image_token", None)
    tokenizer = _tokenizer(processor)
    if token is None:
        return getattr(processor, "image_token_id", None)
    token_id = tokenizer.convert_tokens_to_ids(token)
    return token_id if isinstance(token_id, int) and token_id != tokenizer.unk_token_id else None


def _open_image(path: str):
    from PIL import Image

    with Image.open(path) as img:
        return img.convert("RGB")


def encode_records(records: list[Record], processor, max_seq_len: int,
                   overflow: str = "truncate") -> tuple[list[Sample], list[Problem]]:
    """Encode every record; the too-long ones come back as problems."""
    encoder = Encoder(processor, max_seq_len, overflow)
    samples, problems = [], []
    for record in records:
        try:
            sample, problem = encoder.encode(record)
        except (ValueError, OSError, RuntimeError) as exc:  # the processor refused the record
            sample, problem = None, Problem(record.index, record.record_id, "conversations",
                                            "encode_failed", f"{type(exc).__name__}: {exc}"[:300])
        if problem is not None:
            problems.append(problem)
        else:
            samples.append(sample)
    return samples, problems
