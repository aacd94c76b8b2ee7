"""How the proof compares the port's outputs with the reference's: the tolerance of each
dtype and the metrics it is judged on."""

from __future__ import annotations

import torch

#: max|port - reference| <= TOLERANCE[dtype] * max(1, max|reference|), and cosine above.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}
COSINE_MIN = {torch.float32: 0.99999, torch.bfloat16: 0.999, torch.float16: 0.9999}


def compare_outputs(ref: torch.Tensor, out: torch.Tensor, dtype, valid=None) -> tuple[float, float, float, bool]:
    """``(max_abs, bound, cosine, finite)`` of ``out`` against ``ref`` (at ``valid``
    positions when given), in float64; ``finite`` covers both sides."""
    ref64, out64 = ref.double(), out.double()
    if valid is not None:
        ref64, out64 = ref64[valid.to(ref.device)], out64[valid.to(ref.device)]
    # both sides: a NaN in the reference would make every comparison below false
    finite = bool(torch.isfinite(out64).all()) and bool(torch.isfinite(ref64).all())
    max_abs = float((out64 - ref64).abs().max()) if finite else float("inf")
    bound = TOLERANCE[dtype] * max(1.0, float(ref64.abs().max()))
    cosine = float(torch.nn.functional.cosine_similarity(ref64.flatten(), out64.flatten(), dim=0)) \
        if finite else float("nan")
    return max_abs, bound, cosine, finite
