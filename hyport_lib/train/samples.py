"""Records -> token sequences with their labels, through the model's own chat template: labels
are the token ids of the assistant answers (their text and end-of-turn marker), ``-100`` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from jinja2.exceptions import TemplateError

from hyport_lib.models.loading import LoadedProcessor
from hyport_lib.models.prompts import needs_image, prefix_text, render_messages
from hyport_lib.models.training_inputs import PositionsFunction, image_processor_keys, split_processor_output
from hyport_lib.train.dataset import OnProgress, Problem, ProgressTicker, Record
from hyport_lib.train.dataset_formats import IMAGE_PLACEHOLDER
from hyport_lib.train.dataset_images import DecodedImages, UnreadableImage
from hyport_lib.utils.wording import counted, plural

IGNORE_INDEX = -100


@dataclass
class Sample:
    """One encoded record: ``input_ids`` (images expanded), ``labels`` (``-100`` off the
    answers), ``pixel_values`` (None for a text-only record) and the processor's other image
    tensors (``image_extras``: ``image_grid_thw``, ``image_sizes`` ...) and per-token keys
    (``token_extras``: ``mm_token_type_ids``, ``token_type_ids``; mllama's ``cross_attention_mask``
    as nested lists), one value per token (:mod:`hyport_lib.models.training_inputs`).
    ``rope_positions``: ``(axes, length)`` multimodal positions the model computes for this
    sample alone (M-RoPE models, when packing)."""

    record_id: str
    input_ids: list[int]
    labels: list[int]
    pixel_values: Any = None
    truncated: bool = False
    image_extras: dict = field(default_factory=dict)
    token_extras: dict = field(default_factory=dict)
    rope_positions: Any = None

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def label_tokens(self) -> int:
        return sum(1 for x in self.labels if x != IGNORE_INDEX)

    def image_tensors(self) -> dict:
        if self.pixel_values is None:
            return {}
        return {"pixel_values": self.pixel_values, **self.image_extras}


def messages_of(record: Record, fold_system: bool = False) -> list[dict]:
    """The record's chat messages; ``fold_system`` opens the first user turn with the system
    prompt (a template that takes no system message)."""
    messages = []
    if record.system and not fold_system:
        messages.append({"role": "system", "content": [{"type": "text", "text": record.system}]})
    for k, (role, text) in enumerate(record.turns):
        if fold_system and record.system and k == 0:
            text = f"{record.system}\n\n{text}"
        pieces = text.split(IMAGE_PLACEHOLDER)
        content: list[dict] = []
        for i, piece in enumerate(pieces):
            if i:
                content.append({"type": "image"})
            if piece.strip():
                content.append({"type": "text", "text": piece.strip("\n")})
        messages.append({"role": role, "content": content})
    return messages


def not_applicable(loaded: LoadedProcessor, record: Record) -> Optional[Problem]:
    if record.images and not loaded.traits.multimodal:
        return Problem(record.index, record.record_id, record.image_field, "not_applicable",
                       f"{counted(len(record.images), 'image')}, but {loaded.traits.model_type or 'the model'} "
                       "is a text-only model")
    if not record.images and needs_image(loaded):
        return Problem(record.index, record.record_id, record.image_field, "not_applicable",
                       f"no image, but {loaded.traits.model_type}'s processor needs an image "
                       "with every prompt")
    return None


class Encoder:
    """Encodes records for one processor (``positions``:
    :func:`hyport_lib.models.training_inputs.rope_positions_function`, or None)."""

    def __init__(self, loaded: LoadedProcessor, max_seq_len: int, overflow: str = "truncate",
                 positions: Optional[PositionsFunction] = None):
        self.loaded = loaded
        self.processor = loaded.processor
        self.max_seq_len = int(max_seq_len)
        self.overflow = overflow
        self.positions = positions
        tokenizer = loaded.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.image_token_ids = _image_token_ids(self.processor)
        self.image_keys = image_processor_keys(self.processor)
        #: Text longer than this is more than max_seq_len tokens whatever it says: no
        #: token of this tokenizer spells more characters than its longest vocabulary entry.
        self.max_chars = self.max_seq_len * _longest_token_chars(tokenizer) + 256
        #: Why the chat template takes no system message (then the system prompt opens
        #: the first user turn), or None.
        self.system_refused = system_role_refused(loaded)
        self.images = DecodedImages()  # each image file decoded once while records share it

    def _image_positions(self, sample: Sample) -> list[int]:
        """Where the sample holds image tokens: the processor's image token ids, and any
        token a per-token type key marks as not text (Gemma3's soft tokens sit between
        ``<start_of_image>`` and ``<end_of_image>``; the Qwen-VL family's between vision
        markers). PaliGemma's ``token_type_ids`` mark its answer, not images: a prefix-format
        processor's are left out."""
        keys = ["mm_token_type_ids"] + (["token_type_ids"] if self.loaded.prompt_format == "chat" else [])
        marked = {i for key in keys for i, v in enumerate(sample.token_extras.get(key, ())) if v}
        return sorted(marked | {i for i, t in enumerate(sample.input_ids) if t in self.image_token_ids})

    def _call(self, text: str, images: list, **extra):
        call: dict[str, Any] = {"text": [text], "return_tensors": "pt", **extra}
        if self.loaded.prompt_format == "chat":
            call["add_special_tokens"] = False  # the template wrote them (see models.prompts)
        if images:
            call["images"] = [images]
        return self.processor(**call)

    def _ids(self, text: str, images: list) -> list[int]:
        return self._call(text, images)["input_ids"][0].tolist()

    def encode(self, record: Record) -> tuple[Optional[Sample], Optional[Problem]]:
        """A :class:`Sample`, or None and the problem (not applicable, too long)."""
        problem = not_applicable(self.loaded, record)
        if problem is not None:
            return None, problem
        if len(record.system or "") > self.max_chars:
            # The system prompt is kept whole (it comes before everything): alone longer than
            # max_seq_len, it leaves no room for an answer, and is never tokenised whole.
            return None, Problem(record.index, record.record_id, record.system_field, "too_long",
                                 f"{len(record.system):,} characters: the system prompt alone is more than "
                                 f"max_seq_len={self.max_seq_len} tokens of this tokenizer (at most "
                                 f"{self.max_chars:,} characters); no answer would fit")
        size = sum(len(text) for _, text in record.turns) + len(record.system or "")
        if size > self.max_chars:
            # Never tokenise a huge record whole: its memory would grow with its size.
            clipped = _clipped(record, self.max_chars)
            why = (" (overflow='drop')" if self.overflow == "drop" else
                   ": truncating would cut an image's tokens; raise max_seq_len"
                   if len(clipped.images) < len(record.images) else
                   ": truncated, no answer would be left" if self.loaded.prompt_format == "prefix"
                   and (not clipped.turns or clipped.turns[-1][0] != "assistant"
                        or len(clipped.turns) < len(record.turns)) else None)
            if why:
                return None, Problem(record.index, record.record_id, record.text_field, "too_long",
                                     f"{size:,} characters > max_seq_len={self.max_seq_len} tokens of "
                                     f"this tokenizer (at most {self.max_chars:,} characters){why}")
            record = clipped
        images = [self.images.rgb(path, record.index, _image_field(record, i))
                  for i, path in enumerate(record.images)]
        if self.loaded.prompt_format == "prefix":
            sample = self._encode_prefix(record, images)
        else:
            sample = self._encode_chat(record, images)
        sample, problem = self._fit(record, sample)
        if sample is not None and self.positions is not None:
            sample.rope_positions = self.positions(sample.input_ids, sample.token_extras,
                                                   sample.image_tensors())
        return sample, problem

    def _encode_chat(self, record: Record, images: list) -> Sample:
        """Each answer's span is found from prefixes rendered by the same template ("up to this
        answer's header", "up to and including it"); a template that does not render a prefix of
        the messages as a prefix of the text is reported rather than mislabelled."""
        messages = messages_of(record, fold_system=self.system_refused is not None)
        rendered = self._call(render_messages(self.loaded, messages), images)
        ids, per_token, image = split_processor_output(rendered, self.image_keys)
        if not self.loaded.traits.multimodal:
            per_token = {}  # a text tokenizer's token_type_ids are no model input of a causal LM
        labels = [IGNORE_INDEX] * len(ids)
        seen_images = 0
        for k, message in enumerate(messages):
            seen_images += sum(1 for c in message["content"] if c["type"] == "image")
            if message["role"] != "assistant":
                continue
            header = self._ids(render_messages(self.loaded, messages[:k], generation_prompt=True),
                               images[:seen_images])
            # the last answer ends the conversation: "up to it" is the whole of it, tokenised above
            last = k == len(messages) - 1
            upto = ids if last else self._ids(render_messages(self.loaded, messages[:k + 1]),
                                              images[:seen_images])
            if ids[:len(header)] != header or ids[:len(upto)] != upto:
                raise ValueError(
                    f"record {record.index} (id {record.record_id!r}): this model's chat template "
                    "does not render a prefix of the conversation as a prefix of the text, so "
                    "the answer tokens cannot be located for the labels")
            labels[len(header):len(upto)] = ids[len(header):len(upto)]
        return _sample(record, ids, labels, per_token, image)

    def _encode_prefix(self, record: Record, images: list) -> Sample:
        """Prefix format (PaliGemma): the system prompt and everything before the last answer
        are the prefix, the last answer the suffix (the processor labels the suffix)."""
        *before, (_, answer) = record.turns
        texts = ([record.system] if record.system else []) + [text for _, text in before]
        prefix = "\n".join(text.replace(IMAGE_PLACEHOLDER, "").strip() for text in texts)
        out = self._call(prefix_text(self.loaded, prefix, len(images)), images, suffix=[answer])
        labels = out["labels"][0].tolist()
        ids, per_token, image = split_processor_output(out, self.image_keys)
        return _sample(record, ids, labels, per_token, image)

    def _fit(self, record: Record, sample: Sample) -> tuple[Optional[Sample], Optional[Problem]]:
        limit = self.max_seq_len
        if len(sample) <= limit:
            return sample, None

        def too_long(why: str) -> tuple[None, Problem]:
            return None, Problem(record.index, record.record_id, record.text_field, "too_long",
                                 f"{len(sample)} tokens after tokenisation > max_seq_len={limit}{why}")

        if self.overflow == "drop":
            return too_long(" (overflow='drop')")
        if self._image_positions(sample) and max(self._image_positions(sample)) >= limit:
            return too_long(": truncating would cut an image's tokens; raise max_seq_len")
        labels = sample.labels[:limit]
        if all(x == IGNORE_INDEX for x in labels):
            return too_long(": truncated, no answer token would be left")
        return Sample(sample.record_id, sample.input_ids[:limit], labels, sample.pixel_values,
                      truncated=True, image_extras=sample.image_extras,
                      token_extras={k: v[:limit] for k, v in sample.token_extras.items()}), None


def _sample(record: Record, ids: list[int], labels: list[int], per_token: dict, image: dict) -> Sample:
    pixels = image.pop("pixel_values", None)
    return Sample(record.record_id, ids, labels, pixels,
                  image_extras=image if pixels is not None else {}, token_extras=per_token)


def _longest_token_chars(tokenizer) -> int:
    """Byte-level and sentencepiece entries spell at least as many characters as the text they
    stand for."""
    try:
        return max(1, max((len(token) for token in tokenizer.get_vocab()), default=1))
    except (AttributeError, NotImplementedError, TypeError):
        return 64


def _clipped(record: Record, budget: int) -> Record:
    """The record's first ``budget`` characters of text (the system prompt kept whole and counted),
    without the images whose placeholders are cut; truncation then fits the rest."""
    turns: list[tuple[str, str]] = []
    budget -= len(record.system or "")
    for role, text in record.turns:
        if budget <= 0:
            break
        kept = text[:budget]
        cut = kept.rfind("<", max(0, len(kept) - len(IMAGE_PLACEHOLDER) + 1))
        if len(kept) < len(text) and cut >= 0 and IMAGE_PLACEHOLDER.startswith(kept[cut:]):
            kept = kept[:cut]  # never half a placeholder
        turns.append((role, kept))
        budget -= len(text)
    kept = sum(text.count(IMAGE_PLACEHOLDER) for _, text in turns)
    return Record(record.index, record.record_id, turns, list(record.images[:kept]), record.system,
                  record.text_field, record.system_field, record.image_field)


def _image_token_ids(processor) -> set[int]:
    """The processor's ``image_token_id`` (Gemma3's soft token) and its ``image_token`` (the
    token each image expands into elsewhere)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    ids = set()
    if isinstance(getattr(processor, "image_token_id", None), int):
        ids.add(processor.image_token_id)
    token = getattr(processor, "image_token", None)
    if token is not None:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            ids.add(token_id)
    return ids


def _image_field(record: Record, i: int) -> str:
    """``image``, ``images[1]``."""
    return record.image_field if len(record.images) == 1 else f"{record.image_field}[{i}]"


def encode_records(records: list[Record], loaded: LoadedProcessor, max_seq_len: int,
                   overflow: str = "truncate", on_progress: Optional[OnProgress] = None,
                   path: str = "") -> tuple[list[Sample], list[Problem]]:
    """Encode every record; the ones the model cannot take or that are too long come back as
    problems (``path``: the data file the progress names)."""
    encoder = Encoder(loaded, max_seq_len, overflow)
    samples, problems = [], []
    ticker = ProgressTicker(on_progress, "tokenising dataset", path, len(records))
    for done, record in enumerate(records):
        ticker.tick(done)
        try:
            sample, problem = encoder.encode(record)
        except UnreadableImage as exc:  # changed or unreadable since the check: the image field and file named
            sample, problem = None, Problem(record.index, record.record_id, exc.field, exc.kind, str(exc))
        except (ValueError, OSError, RuntimeError, TemplateError) as exc:  # the processor or template refused it
            sample, problem = None, Problem(record.index, record.record_id, record.text_field,
                                            "encode_failed", f"{type(exc).__name__}: {exc}")
        if problem is not None:
            problems.append(problem)
        else:
            samples.append(sample)
    ticker.finish(len(records))
    return samples, problems


def system_role_refused(loaded: LoadedProcessor) -> Optional[str]:
    """Why the chat template cannot take a ``system`` message, or None when it can (or there is
    no chat template: a prefix-format prompt opens with the system prompt anyway)."""
    if loaded.prompt_format != "chat":
        return None
    probe = "hyport system probe"
    user = {"role": "user", "content": [{"type": "text", "text": "Hi."}]}
    try:
        text = render_messages(loaded, [{"role": "system", "content": [{"type": "text", "text": probe}]}, user])
    except (TemplateError, ValueError) as exc:
        try:
            render_messages(loaded, [user])
        except (TemplateError, ValueError):
            return None  # it refuses every conversation: each record says so (encode_failed)
        return f"refuses a system message ({type(exc).__name__}: {str(exc)[:100]})"
    return None if probe in text else "leaves a system message out"


def system_prompt_note(loaded: LoadedProcessor, records: list[Record]) -> Optional[str]:
    """The plan's note when records carry a system prompt the chat template cannot take (Gemma-2
    raises "System role not supported"): it is folded into the first user turn, never silently."""
    why = system_role_refused(loaded)
    carrying = [r for r in records if r.system]
    if why is None or not carrying:
        return None
    fields = ", ".join(sorted({r.system_field for r in carrying}))
    return (f"{counted(len(carrying), 'record')} {plural('carries', len(carrying), 'carry')} a system prompt "
            f"({fields}), but "
            f"{loaded.traits.model_type or 'the model'}'s chat template {why}: each is put at the start of "
            "the record's first user turn, followed by a blank line (as LLaMA-Factory's templates do for "
            "such models)")


def prefix_format_note(loaded: LoadedProcessor, records: list[Record]) -> Optional[str]:
    """The plan's note when a prefix-format model (PaliGemma's prefix and suffix) gets records with
    more than one answer: only the last is labelled, where LLaMA-Factory (with a chat template)
    would learn every answer."""
    if loaded.prompt_format != "prefix":
        return None
    several = [r for r in records if sum(role == "assistant" for role, _ in r.turns) > 1]
    if not several:
        return None
    return (f"{counted(len(several), 'record')} {plural('holds', len(several), 'hold')} more than one answer "
            "(history or several turns), but "
            f"{loaded.traits.model_type or 'this model'} takes a prefix and one suffix (no chat template): "
            "each trains on its last answer only, the earlier turns being part of the unlabelled prefix")
