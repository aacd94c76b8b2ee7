"""The one tolerance table of hyport's proofs, and the one comparison of two runs' tensors
(eager and a swap, the original code and its port), judged by the dtype they ran in.

A NaN or an Inf on either side fails, whatever the figures: ``max_abs`` is then infinite,
never a NaN that every ``>`` lets pass.
Stage 02's kernel grid keeps its own rule (flash-attn's, against float64:
docs/npu_fusion_attention.md), which is not a comparison of two runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

#: What is compared: the forward's logits, those of each cached decoding step (the tokens
#: decoded one at a time), the loss, the gradients, a ported model's outputs.
LOGITS, DECODING, LOSS, GRADIENTS, OUTPUTS = "logits", "decoding", "loss", "gradients", "outputs"
#: Floors, not bounds: a port's outputs' cosine with the reference's, the share of
#: positions whose top-1 token agrees.
COSINE, TOP1 = "cosine", "top-1"
#: Stage 05's parity: the logits of two saved copies of one model, loaded alike in one
#: process, in float32 on the CPU: identical weights give identical bits.
SAME_WEIGHTS = "same weights"
#: A floor beside flash-attn's rule in stage 02's kernel grid: an implementation's output
#: against float64 (msprobe's cosine similarity, docs/npu_fusion_attention.md).
KERNEL_COSINE = "kernel cosine"

#: Max |Δ| by dtype and quantity, in units of the reference: logits absolutely, gradients
#: relative to the largest one, a loss and outputs to their magnitude when above 1. float32:
#: the same math, only the order of the sums differs (a dropped bias or a wrong mask moves
#: logits by 1e-2 and more). Half precision: two kernels round differently and a near-tie
#: flips a token (eager in bf16 flips against eager in fp32 too); the swap's proof of loss
#: and gradients runs in float32 only.
TOLERANCE = {
    "float32": {LOGITS: 1e-3, DECODING: 1e-3, LOSS: 1e-4, GRADIENTS: 1e-3, OUTPUTS: 1e-4,
                COSINE: 0.99999, TOP1: 1.0, SAME_WEIGHTS: 1e-5, KERNEL_COSINE: 0.99},
    "bfloat16": {LOGITS: 0.25, DECODING: 0.25, OUTPUTS: 3e-2, COSINE: 0.999, TOP1: 0.98, KERNEL_COSINE: 0.99},
    "float16": {LOGITS: 0.05, DECODING: 0.05, OUTPUTS: 5e-3, COSINE: 0.9999, TOP1: 0.98, KERNEL_COSINE: 0.99},
}


@dataclass(frozen=True)
class Compared:
    """One quantity of two runs, judged; ``top1`` and ``kl`` (mean KL(reference ||
    candidate)) for logits only, and only when finite."""

    quantity: str
    dtype: str
    max_abs: float
    scale: float
    finite: bool
    cosine: float
    top1: Optional[float] = None
    kl: Optional[float] = None
    #: a bound measured for this run (float32's own error here), in place of the table's
    measured_bound: Optional[float] = None

    @property
    def bound(self) -> float:
        if self.measured_bound is not None:
            return self.measured_bound
        return TOLERANCE[self.dtype][self.quantity] * self.scale

    @property
    def relative(self) -> float:
        return self.max_abs / self.scale

    @property
    def passed(self) -> bool:
        within = self.finite and self.max_abs <= self.bound
        return within and (self.quantity != OUTPUTS or self.cosine >= TOLERANCE[self.dtype][COSINE])

    def differs(self, what: str, note: str = "") -> str:
        """Why ``what`` (``"logits"``) fails, as every proof says it; ``note`` follows the bound."""
        if not self.finite:
            return f"non-finite {what} (eager or swapped)"
        return f"{what} differ from eager by {self.max_abs:.3g} (> {self.bound:g}{note})"


def compare(quantity: str, reference, candidate, dtype: str = "float32", valid=None,
            measured_bound: Optional[float] = None) -> Compared:
    """``candidate`` against ``reference``, in float64 on the CPU: two tensors of one shape
    (at the ``valid`` positions when given), or two sequences of them compared part by part
    (a model's gradients, never copied all at once). ``measured_bound``: the bound of this
    run, never looser than the table's (:func:`noise_bound`)."""
    import torch

    if quantity not in TOLERANCE[dtype]:
        raise ValueError(f"no tolerance for {quantity} in {dtype}: the proofs compare it in float32")
    pairs = [(reference, candidate)] if isinstance(reference, torch.Tensor) else \
        list(zip(reference, candidate, strict=True))
    finite, peak, worst = True, 0.0, 0.0
    dot = ref_sq = out_sq = kl = 0.0  # sums over every part: the cosine and the mean KL
    agree = positions = 0  # top-1 tokens that agree, of positions compared
    for ref, out in pairs:
        ref, out = ref.detach().cpu().double(), out.detach().cpu().double()
        if valid is not None:
            ref, out = ref[valid.cpu()], out[valid.cpu()]
        if ref.numel() == 0:
            continue
        peak = max(peak, float(ref.nan_to_num(0.0, 0.0, 0.0).abs().max()))
        finite = finite and bool(torch.isfinite(ref).all()) and bool(torch.isfinite(out).all())
        if not finite:
            continue
        worst = max(worst, float((out - ref).abs().max()))
        dot += float((ref * out).sum())
        ref_sq += float((ref * ref).sum())
        out_sq += float((out * out).sum())
        if quantity in (LOGITS, DECODING):
            agree += int((ref.argmax(-1) == out.argmax(-1)).sum())
            positions += ref[..., 0].numel()
            log_ref, log_out = torch.log_softmax(ref, -1), torch.log_softmax(out, -1)
            kl += float((log_ref.exp() * (log_ref - log_out)).sum())
    scale = 1.0 if quantity in (LOGITS, DECODING) else (peak or 1.0) if quantity == GRADIENTS else max(1.0, peak)
    if not finite:
        return Compared(quantity, dtype, math.inf, scale, False, math.nan)
    cosine = dot / max(math.sqrt(ref_sq * out_sq), 1e-8) if ref_sq or out_sq else math.nan
    top1, mean_kl = (agree / positions, kl / positions) if positions else (None, None)
    if measured_bound is not None:
        measured_bound = min(measured_bound, TOLERANCE[dtype][quantity] * scale)
    return Compared(quantity, dtype, worst, scale, True, cosine, top1, mean_kl, measured_bound)


#: A swap's float32 logits may differ from eager's by this many times the error float32
#: itself makes on the model and batch (eager in float32 against float64): two kernels that
#: sum in another order err about as much as one does (measured: at most 1x, CPU).
NOISE_MARGIN = 8
#: ... and at least by this share of the logits' largest magnitude, when float32 happens to
#: be exact on the batch.
NOISE_FLOOR = 2.0 ** -20


def noise_bound(noise: float, logits_peak: float) -> float:
    """The logits bound of one proof from float32's measured error ``noise``."""
    return max(NOISE_MARGIN * noise, NOISE_FLOOR * logits_peak)
