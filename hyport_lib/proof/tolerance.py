"""The one tolerance table of hyport's proofs, and the one comparison of two runs' tensors.

Every proof that runs a model two ways (eager and a swap, the original code and its port)
judges what it compares here, by the dtype it ran in. A NaN or an Inf on either side fails,
whatever the figures: ``max_abs`` is then infinite, never a NaN that every ``>`` lets pass.
Stage 02's kernel grid keeps its own rule (flash-attn's, against float64:
docs/npu_fusion_attention.md), which is not a comparison of two runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

LOGITS, DECODING, LOSS, GRADIENTS, OUTPUTS = "logits", "decoding", "loss", "gradients", "outputs"


@dataclass(frozen=True)
class Tolerance:
    """What one dtype allows. The bounds are on max |Δ|, in units of :func:`scale_of` the
    reference; ``None``: no proof compares that quantity in that dtype."""

    logits: float  # the forward's logits
    decoding: float  # the logits of each cached decoding step (the tokens decoded one at a time)
    loss: Optional[float]
    gradients: Optional[float]
    outputs: float  # a ported model's outputs (the port's proof)
    cosine: float  # the least cosine of a port's outputs with the reference's
    top1: float  # the least share of positions whose top-1 token agrees


#: float32: the same math, only the order of the sums differs (a dropped bias or a wrong
#: mask moves logits by 1e-2 and more). Half precision: two kernels round differently and a
#: near-tie flips a token (eager in bf16 flips against eager in fp32 too). The swap's proof
#: of loss and gradients runs in float32 only.
TOLERANCE = {
    "float32": Tolerance(logits=1e-3, decoding=1e-3, loss=1e-4, gradients=1e-3, outputs=1e-4,
                         cosine=0.99999, top1=1.0),
    "bfloat16": Tolerance(logits=0.25, decoding=0.25, loss=None, gradients=None, outputs=3e-2,
                          cosine=0.999, top1=0.98),
    "float16": Tolerance(logits=0.05, decoding=0.05, loss=None, gradients=None, outputs=5e-3,
                         cosine=0.9999, top1=0.98),
}


def scale_of(quantity: str, peak: float) -> float:
    """What a bound of ``quantity`` is relative to, given the reference's ``peak`` max |value|:
    logits are compared absolutely, gradients against the largest one, a loss and outputs
    against their magnitude when it is above 1."""
    if quantity in (LOGITS, DECODING):
        return 1.0
    if quantity == GRADIENTS:
        return peak or 1.0
    return max(1.0, peak)


@dataclass(frozen=True)
class Compared:
    """One quantity of two runs: the figures and whether they pass. ``top1`` and ``kl``
    (mean KL(reference || candidate)) are for logits, None when not finite."""

    quantity: str
    dtype: str
    max_abs: float
    scale: float
    finite: bool
    cosine: float
    top1: Optional[float] = None
    kl: Optional[float] = None

    @property
    def bound(self) -> float:
        return getattr(TOLERANCE[self.dtype], self.quantity) * self.scale

    @property
    def relative(self) -> float:
        return self.max_abs / self.scale

    @property
    def passed(self) -> bool:
        within = self.finite and self.max_abs <= self.bound
        return within and (self.quantity != OUTPUTS or self.cosine >= TOLERANCE[self.dtype].cosine)


def compare(quantity: str, reference, candidate, dtype: str = "float32", valid=None) -> Compared:
    """``candidate`` against ``reference``, in float64 on the CPU: two tensors of one shape
    (at the ``valid`` positions when given), or two sequences of them compared part by part
    (a model's gradients, never copied all at once)."""
    import torch

    if getattr(TOLERANCE[dtype], quantity) is None:
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
    scale = scale_of(quantity, peak)
    if not finite:
        return Compared(quantity, dtype, math.inf, scale, False, math.nan)
    cosine = dot / max(math.sqrt(ref_sq * out_sq), 1e-8) if ref_sq or out_sq else math.nan
    top1, mean_kl = (agree / positions, kl / positions) if positions else (None, None)
    return Compared(quantity, dtype, worst, scale, True, cosine, top1, mean_kl)


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the table's key of a torch dtype."""
    return str(dtype).replace("torch.", "")
