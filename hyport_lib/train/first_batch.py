"""What the model received first: each rank's first batch, decoded, in ``logs/first_batch*.json``
(as LLaMA-Factory prints its first example: a system prompt that never reached the template or
labels on the question show there). The fields: docs/datasets.md ("What the model received").
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from hyport_lib.train.samples import IGNORE_INDEX, Sample
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj

FIRST_BATCH_FILE = "first_batch.json"
#: The names :func:`first_batch_path` gives (rank 0's, rank r's), and no other.
_FIRST_BATCH_NAME = re.compile(r"first_batch(\.rank[0-9]+)?\.json")
#: The longest decoded text kept per row (a packed row of a large max_seq_len is long).
MAX_TEXT_CHARS = 4000


def first_batch_path(output_dir: os.PathLike, rank: int = 0) -> Path:
    """Where ``rank``'s first batch is written (the logs folder is hyport's own)."""
    name = FIRST_BATCH_FILE if rank == 0 else FIRST_BATCH_FILE.replace(".json", f".rank{rank}.json")
    return Path(output_dir) / "logs" / name


def clear_first_batches(output_dir: os.PathLike) -> list[Path]:
    """Remove the first-batch files an earlier launch into ``output_dir`` left (a run on
    more ranks leaves files this launch's ranks would not rewrite); returns them."""
    logs = Path(output_dir) / "logs"
    if logs.is_symlink() or not logs.is_dir():  # never delete through a link out of the folder
        return []
    stale = [p for p in logs.iterdir() if _FIRST_BATCH_NAME.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
    for path in stale:
        path.unlink()
    return stale


def describe_batch(rows: Sequence[Sequence[Sample]], batch: dict, decode: Callable[[list[int]], str],
                   image_token_ids: frozenset = frozenset()) -> dict:
    """The collated ``batch`` of ``rows``, decoded row by row: the record ids, the text (padding
    left out) and the answer spans (the input tokens where labels are set). Labels sit on the
    tokens they name (the model shifts them): ``label_mismatches`` is 0 in a correct batch."""
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
        described.append({"record_ids": [s.record_id for s in samples], "tokens": real,
                          "label_tokens": sum(1 for x in labels if x != IGNORE_INDEX),
                          "label_mismatches": mismatches,
                          "text": decode(_squeezed(ids, image_token_ids))[:MAX_TEXT_CHARS],
                          "answers": answers})
    return {"rows": described}


def _squeezed(ids: list[int], image_token_ids: frozenset) -> list[int]:
    """``ids`` with each run of one image token kept once."""
    out: list[int] = []
    for token in ids:
        if token in image_token_ids and out and out[-1] == token:
            continue
        out.append(token)
    return out


class FirstBatchRecorder:
    """A collator that writes the first batch it builds to ``path`` (:func:`first_batch_path`),
    then only collates; runs of one of ``image_token_ids`` are decoded as one token."""

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
                print(f"hyport: warning: first batch: {misplaced} label(s) differ from the input token at "
                      f"their position: the collator misplaces labels ({self.path})", file=sys.stderr, flush=True)
        return batch

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)
