"""DeepSpeed ZeRO states in a Trainer checkpoint (:func:`list_zero`), read as little as possible.

``global_stepN/`` (named by ``latest``) holds model-states files (``mp_rank_00_model_states.pt``;
ZeRO-3: one per rank) and one ``[bf16_|fp16_]zero_pp_rank_{r}_mp_rank_00_optim_states.pt``
per data-parallel rank. The model-states file, read with ``torch.load(mmap=True,
weights_only=True)`` in milliseconds and without DeepSpeed, records the world size, version,
ZeRO stage and ``param_shapes``; the optimizer states are read only by :mod:`.zero_consolidate`.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.checkpoint_files.findings import Finding

_OPTIM_RE = re.compile(r"^(?:(?P<prec>bf16|fp16)_)?zero_pp_rank_(?P<rank>\d+)_mp_rank_(?P<mp>\d+)_optim_states\.pt$")
_MODEL_RE = re.compile(r"^(?:zero_pp_rank_(?P<rank>\d+)_)?mp_rank_(?P<mp>\d+)_model_states\.pt$")
_STEP_RE = re.compile(r"^global_step(\d+)$")
#: More ranks than any job has: a larger dp_world_size is a corrupt file, not a count.
_MAX_RANKS = 1 << 20


@dataclass
class ZeroFile:
    file: str
    kind: str  # model_states | optim_states
    rank: Optional[int]
    bytes: int


@dataclass
class ZeroListing:
    """The ZeRO states of one checkpoint (``dp_world_size`` and the rest as the model-states
    file records them)."""

    checkpoint: str
    tag: Optional[str] = None  # global_stepN: from ``latest``, else the highest present
    files: list[ZeroFile] = field(default_factory=list)  # model states first
    world_size: Optional[int] = None  # ranks with an optimizer-state file (highest rank + 1)
    dp_world_size: Optional[int] = None
    mp_world_size: Optional[int] = None
    zero_stage: Optional[int] = None
    ds_version: Optional[str] = None
    precision: Optional[str] = None
    parameters: Optional[int] = None  # of param_shapes: trainable, no weight read
    frozen_parameters: Optional[int] = None
    global_steps: Optional[int] = None
    error: Optional[str] = None  # why the model-states file could not be read

    @property
    def present(self) -> bool:
        return self.tag is not None


def find_tag(checkpoint: Path) -> Optional[str]:
    """``global_stepN`` from ``latest``, else the highest-numbered one present."""
    latest = checkpoint / "latest"
    if latest.is_file():
        tag = latest.read_text(encoding="utf-8", errors="replace").strip()
        if tag and (checkpoint / tag).is_dir():
            return tag
    steps = [(int(m.group(1)), p.name) for p in checkpoint.iterdir()
             if p.is_dir() and (m := _STEP_RE.match(p.name))]
    return max(steps)[1] if steps else None


def list_zero(checkpoint: os.PathLike) -> tuple[ZeroListing, list[Finding]]:
    """List a checkpoint's ZeRO states; findings for missing ranks or unreadable files."""
    folder = Path(checkpoint).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint path {str(checkpoint)!r}: not a folder")
    listing = ZeroListing(str(folder))
    tag = find_tag(folder)
    if tag is None:
        return listing, []
    listing.tag = tag
    states = folder / tag
    ranks, model_files = [], []
    for path in sorted(states.iterdir()):
        if m := _OPTIM_RE.match(path.name):
            ranks.append(int(m.group("rank")))
            listing.precision = m.group("prec") or listing.precision
            listing.files.append(ZeroFile(path.name, "optim_states", int(m.group("rank")), path.stat().st_size))
        elif m := _MODEL_RE.match(path.name):
            rank = int(m.group("rank")) if m.group("rank") else None
            model_files.append((rank or 0, path))
            listing.files.append(ZeroFile(path.name, "model_states", rank, path.stat().st_size))
    listing.files.sort(key=lambda f: (f.kind != "model_states", f.rank or 0))
    listing.world_size = max(ranks) + 1 if ranks else None
    findings: list[Finding] = []
    if model_files:
        _read_model_states(min(model_files)[1], listing)
    else:
        listing.error = "no *_model_states.pt file"
    if listing.error:
        findings.append(Finding("zero_unreadable", f"{tag}/", f"the model states could not be read: "
                                                             f"{listing.error}"))
    expected = listing.dp_world_size or listing.world_size
    present = set(ranks)
    missing = [r for r in range(min(expected or 0, _MAX_RANKS)) if r not in present]
    if missing or (expected and listing.world_size and listing.world_size > expected):
        findings.append(Finding(
            "zero_incomplete", f"{tag}/",
            f"written for {expected} rank(s) but optimizer states exist for rank(s) {sorted(ranks)}"
            + (f": missing {missing[:8]}{' and more' if len(missing) > 8 else ''}" if missing else "") + " (a rank did not finish saving?)"))
    return listing, findings


def _read_model_states(path: Path, listing: ZeroListing) -> None:
    try:
        import torch

        states = torch.load(str(path), map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:  # a pickle torch refuses, a truncated zip: reported, not raised
        listing.error = f"{path.name}: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        return
    if not isinstance(states, dict):
        listing.error = f"{path.name}: holds a {type(states).__name__}, not DeepSpeed's dict of model states"
        return
    listing.dp_world_size = _int(states.get("dp_world_size"))
    if listing.dp_world_size is not None and not 0 < listing.dp_world_size <= _MAX_RANKS:
        listing.error = f"{path.name}: dp_world_size {listing.dp_world_size} is not a rank count"
        listing.dp_world_size = None
        return
    listing.mp_world_size = _int(states.get("mp_world_size"))
    listing.ds_version = states.get("ds_version") if isinstance(states.get("ds_version"), str) else None
    listing.global_steps = _int(states.get("global_steps"))
    config = states.get("ds_config")
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    listing.zero_stage = _int(zero.get("stage")) if isinstance(zero, dict) else None
    listing.parameters = _numel(states.get("param_shapes"))
    listing.frozen_parameters = _numel(states.get("frozen_param_shapes"))


def _int(value) -> Optional[int]:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _numel(groups) -> Optional[int]:
    """Elements of ``param_shapes``: a list of name -> shape dicts (one per group), or one dict."""
    if groups is None:
        return None
    if isinstance(groups, dict):
        groups = [groups]
    total = 0
    try:
        for group in groups:
            for shape in dict(group).values():
                total += math.prod(int(d) for d in shape)
    except (TypeError, ValueError, OverflowError):  # not DeepSpeed's layout: no count, not a crash
        return None
    return total
