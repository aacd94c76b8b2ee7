"""Batches for training: packed (several whole samples per row) or padded (one per row, with an
``attention_mask``). Per-token keys travel with the ids (0 on padding), image tensors are joined
as the model reads them (:mod:`hyport_lib.models.training_inputs`); every batch counts its real
and total tokens (:data:`COUNT_KEYS`) for tokens/s/p.

What the model received first: each rank's first batch, decoded, in ``logs/first_batch*.json``
(as LLaMA-Factory prints its first example: a system prompt that never reached the template or
labels on the question show there). The fields: docs/datasets.md ("What the model received").
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from hyport_lib.models.loading import LoadedProcessor, build_empty_model
from hyport_lib.models.training_inputs import (indexes_images, join_image_tensors, packed_positions,
                                               rope_positions_function, token_tensor)
from hyport_lib.train.params import Params
from hyport_lib.train.samples import IGNORE_INDEX, Encoder, Sample
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj
from hyport_lib.utils.wording import counted, plural

#: Keys of a batch that are hyport's bookkeeping, not model inputs.
COUNT_KEYS = ("hyport_real_tokens", "hyport_tokens")
FIRST_BATCH_FILE = "first_batch.json"
#: The names :func:`first_batch_path` gives (rank 0's, rank r's), and no other.
_FIRST_BATCH_NAME = re.compile(r"first_batch(\.rank[0-9]+)?\.json")
#: The longest decoded text kept per row (a packed row of a large max_seq_len is long).
MAX_TEXT_CHARS = 4000


def pack_samples(samples: Sequence[Sample], max_seq_len: int) -> list[list[Sample]]:
    """Greedy packing in order: a new row starts when the next sample does not fit."""
    rows: list[list[Sample]] = []
    used = 0
    for sample in samples:
        if len(sample) > max_seq_len:
            raise ValueError(f"sample {sample.record_id!r}: {len(sample)} tokens > "
                             f"max_seq_len={max_seq_len} (encode with the same max_seq_len)")
        if not rows or used + len(sample) > max_seq_len:
            rows.append([])
            used = 0
        rows[-1].append(sample)
        used += len(sample)
    return rows


class PackedCollator:
    """Rows of packed samples -> a batch, each row padded to exactly ``max_seq_len`` (fixed shapes:
    an NPU compiles its operators once). Positions restart at 0 per sample, the padding is one more
    segment, and ``cu_seq_lens_q/k`` (flash-attn style) let hyport's attention attend within each
    sample (no ``attention_mask``); M-RoPE rows carry each sample's own positions."""

    def __init__(self, pad_id: int, max_seq_len: int, mrope_text_row: bool = True):
        self.pad_id = int(pad_id)
        self.max_seq_len = int(max_seq_len)
        #: see :attr:`hyport_lib.models.families.ModelTraits.mrope_text_row`
        self.mrope_text_row = mrope_text_row

    def __call__(self, rows: Sequence[Sequence[Sample]]) -> dict:
        import torch

        samples = [sample for row in rows for sample in row]
        keys = _token_keys(samples)
        per_row = _images_per_row(samples, keys)
        if per_row and any(len(row) > 1 for row in rows):
            raise ValueError(_PER_ROW_REFUSAL.format(key=per_row))
        ids, labels, positions, lengths = [], [], [], []
        rope = [] if any(s.rope_positions is not None for s in samples) else None
        real = 0
        for row in rows:
            row_ids, row_labels, row_pos = [], [], []
            for sample in row:
                row_ids += sample.input_ids
                row_labels += sample.labels
                row_pos += list(range(len(sample)))
                lengths.append(len(sample))
            real += len(row_ids)
            pad = self.max_seq_len - len(row_ids)
            if pad < 0:
                raise ValueError(f"a packed row holds {len(row_ids)} tokens > max_seq_len="
                                 f"{self.max_seq_len}")
            if pad:
                row_ids += [self.pad_id] * pad
                row_labels += [IGNORE_INDEX] * pad
                row_pos += list(range(pad))
                lengths.append(pad)
            ids.append(row_ids)
            labels.append(row_labels)
            positions.append(row_pos)
            if rope is not None:
                rope.append(packed_positions(row, self.max_seq_len, self.mrope_text_row))
        cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
        batch: dict[str, Any] = {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            # M-RoPE: (axes [+ 1], rows, length), text positions first; else (rows, length).
            "position_ids": (torch.stack(rope, dim=1) if rope is not None
                             else torch.tensor(positions, dtype=torch.long)),
            "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": max(lengths), "max_length_k": max(lengths),
            "hyport_real_tokens": real, "hyport_tokens": len(rows) * self.max_seq_len,
        }
        batch.update({key: token_tensor(key, [[(len(s), s.token_extras.get(key)) for s in row] for row in rows],
                                        self.max_seq_len) for key in keys})
        batch.update(image_batch(samples, per_row=bool(per_row)))
        return batch


#: Why samples whose per-token keys index images are never packed together.
_PER_ROW_REFUSAL = (
    "packing: per-token key {key!r} holds, for each token, a value per image (and tile) of its "
    "row: the model reads each row's images through cross-attention, and a token that may see "
    "no image (the prompt before an image, a text-only sample) still attends to every image of "
    "its row (transformers does not zero such rows), so samples packed into one row would read "
    "each other's images; use packing=false")


class PaddedCollator:
    """One sample per row, right-padded to the longest row, with an attention mask."""

    def __init__(self, pad_id: int):
        self.pad_id = int(pad_id)

    def __call__(self, samples: Sequence[Sample]) -> dict:
        import torch

        samples = [s[0] if isinstance(s, (list, tuple)) else s for s in samples]
        width = max(len(s) for s in samples)
        ids, labels, mask = [], [], []
        keys = _token_keys(samples)
        for sample in samples:
            pad = width - len(sample)
            ids.append(sample.input_ids + [self.pad_id] * pad)
            labels.append(sample.labels + [IGNORE_INDEX] * pad)
            mask.append([1] * len(sample) + [0] * pad)
        batch: dict[str, Any] = {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
            "hyport_real_tokens": sum(len(s) for s in samples),
            "hyport_tokens": len(samples) * width,
        }
        batch.update({key: token_tensor(key, [[(len(s), s.token_extras.get(key))] for s in samples], width)
                      for key in keys})
        batch.update(image_batch(samples, per_row=bool(_images_per_row(samples, keys))))
        return batch


def image_batch(samples: Sequence[Sample], per_row: bool = False) -> dict:
    """The image tensors of ``samples``, images in order ({} without); ``per_row``: each sample
    gets image rows of its own (:func:`hyport_lib.models.training_inputs.join_image_tensors`)."""
    return join_image_tensors([s.image_tensors() for s in samples], per_row=per_row)


def _token_keys(samples: Sequence[Sample]) -> list[str]:
    """Per-token keys of the batch's samples (whether every sample must have each is
    :func:`~hyport_lib.models.training_inputs.token_tensor`'s to say)."""
    return list(dict.fromkeys(k for s in samples for k in s.token_extras))


def _images_per_row(samples: Sequence[Sample], keys: Sequence[str]) -> Optional[str]:
    """The first per-token key that indexes images (a tensor per token: then the model
    reads each row's images from its own row of the image tensors), or None."""
    return next((key for key in keys for s in samples
                 if key in s.token_extras and indexes_images(s.token_extras[key])), None)


def training_rows(samples: Sequence[Sample], max_seq_len: int, packing: bool) -> list[list[Sample]]:
    """The dataset the Trainer iterates: packed rows, or one sample per row."""
    return pack_samples(samples, max_seq_len) if packing else [[s] for s in samples]


def make_collator(pad_id: int, max_seq_len: int, packing: bool, mrope_text_row: bool = True):
    return PackedCollator(pad_id, max_seq_len, mrope_text_row) if packing else PaddedCollator(pad_id)


#: How many records past the first rows are read to find an image row for the proof.
IMAGE_SEARCH_RECORDS = 256


def proof_batches(params: Params, model_path: str, loaded: LoadedProcessor, records: Sequence,
                  skip: Sequence[int]) -> list[tuple[str, dict, Optional[list[list[dict]]]]]:
    """What the swap's proof runs (:func:`hyport_lib.proof.choice.choose_attention`): the first
    ``per_device_train_batch_size`` rows as rank 0's collator makes them; for a VLM whose first
    rows hold no image, also the first row that holds one (the Trainer draws rows at random:
    the vision tower's attention must be proven too). Packed batches come with their samples
    collated alone (the proof's eager reference)."""
    encoder, rows, later, rest = _first_rows(params, model_path, loaded, records, skip)
    batches = [("the first rows", *_collated(params, loaded, encoder, rows))]
    if loaded.traits.multimodal and not any(s.pixel_values is not None for row in rows for s in row):
        encoded = (encoder.encode(record)[0] for record in rest[:IMAGE_SEARCH_RECORDS])
        for sample in (*later, *encoded):
            if sample is not None and sample.pixel_values is not None:
                batches.append(("an image row", *_collated(params, loaded, encoder, [[sample]])))
                break
    return batches


def _first_rows(params: Params, model_path: str, loaded: LoadedProcessor, records: Sequence,
                skip: Sequence[int]):
    """``(encoder, the first rows, samples encoded past them, the records not read)``."""
    positions = None
    if params.packing:  # as the workers do; get_rope_index reads the config only, so the
        # module tree without weights serves it
        positions = rope_positions_function(build_empty_model(model_path,
                                                              trust_remote_code=params.trust_remote_code))
    encoder = Encoder(loaded, params.max_seq_len, params.overflow, positions=positions)
    wanted_rows = params.per_device_train_batch_size
    skipped = set(skip)
    samples, rows = [], []
    kept = [r for r in records if r.index not in skipped]
    read = 0
    for record in kept:
        read += 1
        sample, _ = encoder.encode(record)
        if sample is None:
            continue
        samples.append(sample)
        rows = training_rows(samples, params.max_seq_len, params.packing)
        if len(rows) > wanted_rows:  # the first rows are complete once a later one starts
            break
    if not rows:
        raise ValueError("attention proof: no record encodes into a training row")
    first = rows[:wanted_rows]
    used = sum(len(row) for row in first)
    return encoder, first, samples[used:], kept[read:]


def _collated(params: Params, loaded: LoadedProcessor, encoder, rows) -> tuple[dict, Optional[list[list[dict]]]]:
    collator = make_collator(encoder.pad_id, params.max_seq_len, params.packing,
                             mrope_text_row=loaded.traits.mrope_text_row)
    if not params.packing:
        return collator(rows), None
    alone = make_collator(encoder.pad_id, params.max_seq_len, packing=False)
    return collator(rows), [[alone([sample]) for sample in row] for row in rows]


# --------------------------------------------------------------------------- the first batch
def first_batch_path(output_dir: os.PathLike, rank: int = 0) -> Path:
    name = FIRST_BATCH_FILE if rank == 0 else FIRST_BATCH_FILE.replace(".json", f".rank{rank}.json")
    return Path(output_dir) / "logs" / name


def clear_first_batches(output_dir: os.PathLike) -> list[Path]:
    """Remove the first-batch files an earlier launch into ``output_dir`` left (a run on
    more ranks leaves files this launch's ranks would not rewrite)."""
    logs = Path(output_dir) / "logs"
    if logs.is_symlink() or not logs.is_dir():  # never delete through a link out of the folder
        return []
    stale = [p for p in logs.iterdir() if _FIRST_BATCH_NAME.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    for path in stale:
        path.unlink()
    return stale


def describe_batch(rows: Sequence[Sequence[Sample]], batch: dict, decode: Callable[[list[int]], str],
                   image_token_ids: frozenset = frozenset()) -> dict:
    """The collated ``batch`` of ``rows``, decoded row by row (the fields: docs/datasets.md,
    "What the model received")."""
    described = []
    for r, row in enumerate(rows):
        samples = list(row) if isinstance(row, (list, tuple)) else [row]
        real = sum(len(s) for s in samples)  # packed and padded rows put the samples first
        ids = batch["input_ids"][r].tolist()[:real]
        labels = batch["labels"][r].tolist()[:real]
        answers, run, mismatches = [], [], 0
        for token, label in zip(ids, labels):
            if label != IGNORE_INDEX:
                run.append(token)  # what the model reads there, not what the label says
                mismatches += label != token
            elif run:
                answers.append(decode(run))
                run = []
        if run:
            answers.append(decode(run))
        shown = [t for i, t in enumerate(ids) if not (t in image_token_ids and i and ids[i - 1] == t)]
        described.append({"record_ids": [s.record_id for s in samples], "tokens": real,
                          "label_tokens": sum(1 for x in labels if x != IGNORE_INDEX),
                          "label_mismatches": mismatches,
                          "text": decode(shown)[:MAX_TEXT_CHARS],  # a run of one image token once
                          "answers": answers})
    return {"rows": described}


class FirstBatchRecorder:
    """A collator that writes the first batch it builds to ``path``, then only collates."""

    def __init__(self, collator: Callable[[Any], dict], tokenizer, path: os.PathLike,
                 image_token_ids: frozenset = frozenset()):
        self.collator = collator
        self.tokenizer = tokenizer
        self.path = Path(path)
        self.image_token_ids = frozenset(image_token_ids)
        self.written = False

    def __call__(self, rows):
        batch = self.collator(rows)
        if not self.written:
            self.written = True
            described = describe_batch(rows, batch, self._decode, self.image_token_ids)
            atomic_write_json(self.path, scrub_obj(described))
            misplaced = sum(row["label_mismatches"] for row in described["rows"])
            if misplaced:  # in the rank log, where a failing run's reader looks
                print(f"hyport: warning: first batch: {counted(misplaced, 'label')} "
                      f"{plural('differs', misplaced, 'differ')} from the input token at their position: the "
                      f"collator misplaces labels ({self.path})", file=sys.stderr, flush=True)
        return batch

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)
