"""Packing judged apart from the swap: does a packed row keep its samples apart?
(docs/attention_swap.md, "Packing proven by isolation").

Two changes of a packed row, each run against the row itself on the same model:

- **content**: the first segment's ordinary tokens are replaced; every later sample's
  logits must not move (a short convolution or a state-space layer carries the previous
  sample's last tokens forward), and the last segment's, for the earlier samples (a layer
  that looks both ways);
- **position**: each row's segments rotated by one (the padding, or the last sample, goes
  first), so every sample sits elsewhere in the row; its logits must not move (attention
  temperature or chunk edges computed from the position in the row, not in the sample).

A model that keeps samples apart moves them by float noise at most: the masked keys add
exact zeros, each sample's own sums are the same. A leak moves them by what the other sample
*is*, so the bound is a few float32 rounding steps of the logits' own size and no tolerance
is guessed: a leak that is small at initialisation is still far above it.

Forward hooks fingerprint every module's token-aligned inputs and output (a seeded random
projection of each token's features: a move in any feature moves it), and the first
module whose output moves while its inputs do not is named: the layer that mixes samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import torch

#: How far a sample's logits may move, as a share of the logits' largest magnitude, when
#: another sample's tokens change: an isolating model adds exact zeros for the other
#: samples, so nothing moves (measured 0 with eager, sdpa and hyport's attention, CPU), but
#: an MoE's per-expert matrix sizes follow the routing, and so its rounding (measured up to
#: 3.9e-7 of the peak at hidden 2048): ten times that.
CONTENT_BOUND = 2.0 ** -18
#: ... and when the sample moves within its row: the same sums in another place of the row,
#: which eager and sdpa add in another order (measured up to 8.3e-7, hyport's attention 0).
POSITION_BOUND = 2.0 ** -17
#: What changed when a sample's logits moved (``Isolation.how``).
CHANGED_BEFORE = "the sample before it in the row had other tokens"
CHANGED_AFTER = "the sample after it in the row had other tokens"
MOVED = "it sat elsewhere in its row"
#: Features each token's fingerprint keeps.
_FINGERPRINT = 8
#: Tokens changed in the content check are mapped to another ordinary id of this many
#: steps along the batch's own ordinary ids.
_ID_STEP = 1
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.|$)")


@dataclass
class Isolation:
    """The isolation check on one attention: ``leak`` is the largest |Δ logits| of a sample
    when another one changed or it moved, ``bound`` what float noise allows, ``module`` and
    ``module_class`` the first module whose output moved while its inputs did not."""

    attention: str
    leak: float = 0.0
    bound: float = 0.0
    finite: bool = True
    how: str = ""  # what moved it: CHANGED_BEFORE, CHANGED_AFTER or MOVED
    module: str = ""
    module_class: str = ""
    checked: str = ""  # what was changed, in words
    unchecked: str = ""  # why nothing could be changed (no row of two segments)

    @property
    def passed(self) -> bool:
        return not self.unchecked and self.finite and self.leak <= self.bound

    def figure(self) -> str:
        if self.unchecked:
            return f"{self.attention}: not checked ({self.unchecked})"
        if not self.finite:
            return f"{self.attention}: non-finite logits"
        return f"{self.attention} {self.leak:.1e}"

    def cause(self) -> str:
        """The refusal's words: which layer mixes samples, by how much."""
        if self.unchecked:
            return f"packed rows could not be checked for isolation: {self.unchecked}"
        if not self.finite:
            return f"the isolation check on packed rows gave non-finite logits ({self.attention} attention)"
        layer = _LAYER.search(self.module or "")
        where = (f"layer {layer.group(1)} ({self.module}, class {self.module_class})" if layer else
                 f"{self.module} (class {self.module_class})" if self.module else "the model")
        what = ("reads the position in the packed row, not in the sample" if self.how == MOVED
                else "mixes tokens across samples in a packed row")
        return (f"{where} {what}: a sample's logits moved by {self.leak:.2g} when {self.how} "
                f"(float noise allows {self.bound:.1g}; {self.attention} attention, CPU, float32)")


    def swap_fault(self, eager: "Isolation") -> str:
        """This (the swap's) check failing where ``eager`` kept the samples apart: the
        attention's own fault, in words."""
        if not self.finite:
            return f"non-finite logits with {self.attention} attention on the packed rows, where eager's are finite"
        where = f" from {self.module} (class {self.module_class})" if self.module else ""
        return (f"hyport's attention lets packed samples reach one another: a sample's logits moved by "
                f"{self.leak:.2g}{where} when {self.how}, where eager moved them by {eager.leak:.1e} "
                f"(float noise allows {self.bound:.1g}; {self.attention} attention, CPU, float32)")


@dataclass(frozen=True)
class Fault:
    """Why packed samples do not stay apart under the swap: the model's own (its layers, or
    its numerics with eager too), else the attention's; ``text`` says it."""

    models: bool
    text: str


def packing_fault(eager: Isolation, swapped: Isolation) -> Optional[Fault]:
    """Who is at fault when the swap's check fails (None when it passes): eager on the same
    rows tells the model's layers from hyport's attention."""
    if swapped.passed:
        return None
    if swapped.unchecked:  # the rows, not either attention: both ran on the same
        return Fault(True, swapped.cause())
    if not eager.finite:
        return Fault(True, f"the model's own logits are non-finite on the packed rows with eager attention "
                           f"({'and' if not swapped.finite else 'not'} with {swapped.attention}): its layers "
                           f"on these rows, not the attention")
    if eager.passed:
        return Fault(False, swapped.swap_fault(eager))
    if not swapped.finite:
        return Fault(False, f"non-finite logits with {swapped.attention} attention on the packed rows, "
                            f"where eager's are finite")
    return Fault(True, swapped.cause())


@dataclass(frozen=True)
class _Segment:
    row: int
    start: int
    length: int
    sample: bool  # False for the row's padding


def check_isolation(model, inputs: dict, attention: str, samples_per_row: Optional[Sequence[int]] = None,
                    special_ids: Iterable[int] = ()) -> Isolation:
    """``model`` (eval, float32) on the packed batch ``inputs`` (``input_ids``,
    ``position_ids``, ``cu_seq_lens_q``...) and on its changes. ``samples_per_row``: how
    many of each row's segments are samples (the rest is padding); ``special_ids``: ids never
    changed (image placeholders and the like, whose count the model checks)."""
    result = Isolation(attention)
    changes = _changes(inputs, _segments(inputs, samples_per_row), set(special_ids))
    if not changes and _splittable(inputs):
        # Every row is one sample filling it (long documents): the first row's halves are
        # made two samples, positions restarting, as the collator would pack them.
        inputs = _first_row_split(inputs)
        changes = _changes(inputs, _segments(inputs, None), set(special_ids))
    if not changes:
        result.unchecked = "no packed row holds two segments, and an image row is not split"
        return result
    result.checked = "; ".join(change.how for change in changes)
    shape = tuple(inputs["input_ids"].shape)
    references: dict = {}  # one run per distinct reference batch (the row, or the row rotated)
    worst = -1.0
    for change in changes:
        key = tuple(change.reference_shifts)
        if key not in references:
            recorder = _Recorder(model, shape)
            with recorder:
                logits = _realigned(_logits(model, change.reference), change.reference_shifts)
            references[key] = (recorder, logits)
        reference, base = references[key]
        scale = float(base.abs().nan_to_num(0.0, 0.0, 0.0).max()) or 1.0
        share = POSITION_BOUND if change.how == MOVED else CONTENT_BOUND
        recorder = _Recorder(model, shape, reference, change, share)
        with recorder:
            out = _realigned(_logits(model, change.changed), change.shifts)
        result.finite = bool(torch.isfinite(base).all()) and bool(torch.isfinite(out).all())
        if not result.finite:
            return result
        leak = float((out - base).abs()[change.watched].max())
        if leak / (share * scale) > worst:
            worst = leak / (share * scale)
            result.leak, result.bound, result.how = leak, share * scale, change.how
            result.module, result.module_class = recorder.origin or ("", "")
    if result.passed:
        result.module = result.module_class = ""
    return result


@dataclass(frozen=True)
class _Change:
    """Two runs whose ``watched`` logits (at the row's own positions) must agree: the
    reference batch, rotated by ``reference_shifts`` per row, and the changed one, by ``shifts``."""

    how: str
    reference: dict
    reference_shifts: tuple
    changed: dict
    shifts: tuple
    watched: torch.Tensor


def _segments(inputs: dict, samples_per_row: Optional[Sequence[int]]) -> list[_Segment]:
    rows, length = inputs["input_ids"].shape
    bounds = [int(b) for b in inputs["cu_seq_lens_q"]]
    segments, counted = [], {}
    for start, end in zip(bounds, bounds[1:]):
        row, offset = divmod(start, length)
        counted[row] = counted.get(row, 0) + 1
        sample = samples_per_row is None or counted[row] <= samples_per_row[row]
        segments.append(_Segment(row, offset, end - start, sample))
    return segments


def _changes(inputs: dict, segments: list[_Segment], special: set[int]) -> list[_Change]:
    """Another sample's tokens changed (the one before, the one after), the row rotated, and,
    for a row of one sample, its padding given tokens once it sits before the sample."""
    rows, length = inputs["input_ids"].shape
    ids = inputs["input_ids"]
    ordinary = sorted(set(int(i) for i in torch.unique(ids)) - special)
    by_row = [[s for s in segments if s.row == r] for r in range(rows)]
    in_place = (0,) * rows
    changes = []
    for pick, how in ((0, CHANGED_BEFORE), (-1, CHANGED_AFTER)):
        watched = torch.zeros(rows, length, dtype=torch.bool)
        changed = ids.clone()
        for row, parts in enumerate(by_row):
            samples = [s for s in parts if s.sample]
            if len(samples) < 2 or len(ordinary) < 2:
                continue
            target = samples[pick]
            span = slice(target.start, target.start + target.length)
            changed[row, span] = _other_ids(ids[row, span], ordinary, special)
            for other in samples:
                if other is not target:
                    watched[row, other.start:other.start + other.length] = True
        if watched.any():
            changes.append(_Change(how, inputs, in_place, {**inputs, "input_ids": changed}, in_place, watched))
    # A sample holding images stays in place: its images are read in the row's order.
    images = any(key.startswith(("pixel_values", "image_")) for key in inputs)
    shifts, watched = [], torch.zeros(rows, length, dtype=torch.bool)
    for row, parts in enumerate(by_row):
        moved = parts[-1].length if len(parts) > 1 and not (images and parts[-1].sample) else 0
        shifts.append(moved)
        for part in parts[:-1] if moved else ():
            if part.sample:
                watched[row, part.start:part.start + part.length] = True
    if not watched.any():
        return changes
    rotated = _rotated(inputs, segments, shifts)
    changes.append(_Change(MOVED, inputs, in_place, rotated, tuple(shifts), watched))
    if len(changes) == 1 and len(ordinary) >= 1:
        # No row holds two samples: the padding, now before its row's sample, gets ordinary
        # tokens, which the sample must not see.
        filled = rotated["input_ids"].clone()
        for row, parts in enumerate(by_row):
            if shifts[row] and not parts[-1].sample:
                filled[row, :parts[-1].length] = torch.tensor(ordinary).repeat(parts[-1].length)[:parts[-1].length]
        changes.append(_Change(CHANGED_BEFORE, rotated, tuple(shifts), {**rotated, "input_ids": filled},
                               tuple(shifts), watched))
    return changes


def _splittable(inputs: dict) -> bool:
    """A text row (plain positions, no images) of at least two tokens."""
    positions = inputs.get("position_ids")
    return (isinstance(positions, torch.Tensor) and positions.dim() == 2 and inputs["input_ids"].shape[1] >= 2
            and not any(key.startswith(("pixel_values", "image_")) for key in inputs))


def _first_row_split(inputs: dict) -> dict:
    rows, length = inputs["input_ids"].shape
    half = length // 2
    positions = inputs["position_ids"].clone()
    positions[0] = torch.cat([torch.arange(half), torch.arange(length - half)])
    bounds = [0, half, *range(length, (rows + 1) * length, length)]
    cu = torch.tensor(bounds, dtype=inputs["cu_seq_lens_q"].dtype)
    out = {**inputs, "position_ids": positions}
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if key in inputs:
            out[key] = cu
    for key in ("max_length_q", "max_length_k"):
        if key in inputs:
            out[key] = max(half, length - half) if rows == 1 else length
    return out


def _other_ids(span, ordinary: list[int], special: set[int]):
    position = {token: i for i, token in enumerate(ordinary)}
    return torch.tensor([t if t in special or t not in position else
                         ordinary[(position[t] + _ID_STEP) % len(ordinary)] for t in span.tolist()],
                        dtype=span.dtype)


def _rotated(inputs: dict, segments: list[_Segment], shifts: list[int]) -> dict:
    """Each row rotated right by its shift: every per-token tensor (rows, length) or
    (axes, rows, length) moves with its tokens, and the segment boundaries follow."""
    rows, length = inputs["input_ids"].shape
    out = dict(inputs)
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor) or value.dim() < 2 or tuple(value.shape[-2:]) != (rows, length):
            continue
        out[key] = torch.stack([value[..., r, :].roll(shifts[r], dims=-1) for r in range(rows)], dim=-2)
    lengths = []
    for row in range(rows):
        parts = [s.length for s in segments if s.row == row]
        lengths += parts[-1:] + parts[:-1] if shifts[row] else parts
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=inputs["cu_seq_lens_q"].dtype)
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if key in inputs:
            out[key] = cu
    return out


def _realigned(tensor, shifts: Sequence[int]):
    """A rotated run's (rows, length, ...) tensor back at the reference's positions."""
    if not any(shifts):
        return tensor
    return torch.stack([tensor[r].roll(-shifts[r], dims=0) for r in range(tensor.shape[0])])


def _logits(model, inputs: dict):
    with torch.no_grad():
        return model(**{k: v for k, v in inputs.items() if k != "labels"}).logits.double()


def _fingerprint(tensor, rows: int, length: int):
    """(rows, length, 8) in float64 for a float tensor whose first two dims are the batch's,
    else None (a tensor not laid out by token cannot be compared position by position)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or tensor.dim() < 2 \
            or tuple(tensor.shape[:2]) != (rows, length):
        return None
    flat = tensor.detach().reshape(rows, length, -1).double()
    generator = torch.Generator().manual_seed(flat.shape[-1])
    projection = torch.randn(flat.shape[-1], _FINGERPRINT, generator=generator, dtype=torch.float64)
    return flat @ projection.to(flat.device)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class _Recorder:
    """Forward hooks on every submodule. Without a reference: keeps each call's fingerprints.
    With one: finds the first call whose output moved at the watched positions while none of
    its token-aligned inputs did (``origin``: module name and class)."""

    def __init__(self, model, shape: tuple[int, int], reference: Optional["_Recorder"] = None,
                 change: Optional[_Change] = None, share: float = CONTENT_BOUND):
        self.model, self.shape, self.reference, self.change, self.share = model, shape, reference, change, share
        self.calls: dict = {}
        self.origin: Optional[tuple[str, str]] = None
        self._count: dict = {}
        self._handles: list = []

    def __enter__(self):
        for name, module in self.model.named_modules():
            if name:
                self._handles.append(module.register_forward_hook(self._hook(name), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        return False

    def _hook(self, name: str):
        def hook(module, args, kwargs, output):
            key = (name, self._count.get(name, 0))
            self._count[name] = key[1] + 1
            if self.reference is None:
                self.calls[key] = self._prints(args, kwargs, output)
            elif self.origin is None and key in self.reference.calls:
                if self._origin_here(self.reference.calls[key], self._prints(args, kwargs, output)):
                    self.origin = (name, type(module).__name__)
        return hook

    def _prints(self, args, kwargs, output):
        inputs = [_fingerprint(t, *self.shape) for t in _tensors((args, kwargs))]
        outputs = _tensors(output)
        return [p for p in inputs if p is not None], _fingerprint(outputs[0], *self.shape) if outputs else None

    def _origin_here(self, before, after) -> bool:
        (inputs_before, out_before), (inputs_after, out_after) = before, after
        if out_before is None or out_after is None or len(inputs_before) != len(inputs_after):
            return False
        if not self._moved(out_before, out_after):
            return False
        return not any(self._moved(a, b) for a, b in zip(inputs_before, inputs_after))

    def _moved(self, before, after) -> bool:
        before = _realigned(before, self.change.reference_shifts)
        after = _realigned(after, self.change.shifts)
        scale = float(before.abs().nan_to_num(0.0, 0.0, 0.0).max()) or 1.0
        delta = (after - before).abs()[self.change.watched.to(after.device)]
        return bool(delta.numel()) and not bool((delta <= self.share * scale).all())
