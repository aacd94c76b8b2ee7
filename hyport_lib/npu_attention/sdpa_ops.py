"""flash-attn semantics on top of ``torch.nn.functional.scaled_dot_product_attention``.

Used by the drop-in on CUDA and CPU. Three flash-attn rules that SDPA does not share:

* ``causal`` with ``seqlen_q != seqlen_k`` is aligned bottom-right (flash-attn >= 2.1);
  SDPA's ``is_causal`` is top-left. ``is_causal=True`` is used only when the two agree
  (equal lengths); otherwise a small ``Sq x Sk`` band mask is built.
* ``window_size=(left, right)`` (-1 = unbounded) is a band around that same diagonal.
* Rows that see no key at all (``causal`` with ``Sq > Sk``) are 0, as in flash-attn.

Variable-length batches are computed without a ``T x T`` mask: each run of consecutive
sequences with equal ``(len_q, len_k)`` is one batched SDPA call on a view of the
packed tensors (one call for a batch of equal lengths, one per sequence at worst).
Measured on CPU (torch 2.13, ``bench/bench_varlen.py`` and side experiments): within
~5-10% of per-sequence SDPA calls on inputs already laid out (1, N, L, D), the gap being
the strided (T, N, D) layout; copying q/k/v into that layout first, or stacking
non-adjacent equal-length sequences into one call, cost more than it saved; nested
(jagged) tensors reject ``is_causal`` and, without it, fall back to a kernel ~15x slower.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from hyport_lib.npu_attention import varlen_dispatch as vd

Window = tuple[Optional[int], Optional[int]]


def resolve_window(causal: bool, window_size, name: str = "window_size") -> Window:
    """flash-attn ``(causal, window_size)`` -> ``(left, right)`` with ``None`` = unbounded."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of ints like (-1, -1), got {window_size!r}") from None
    left_b = None if left < 0 else left
    right_b = None if right < 0 else right
    if causal:
        right_b = 0
    return left_b, right_b


def band_attend_mask(sq: int, sk: int, window: Window, device=None) -> torch.Tensor:
    """``(sq, sk)`` bool mask, True = attend, band around the bottom-right diagonal."""
    left, right = window
    rows = torch.arange(sq, device=device).unsqueeze(1) + (sk - sq)
    cols = torch.arange(sk, device=device).unsqueeze(0)
    offset = cols - rows
    mask = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if right is not None:
        mask &= offset <= right
    if left is not None:
        mask &= offset >= -left
    return mask


def leading_empty_rows(sq: int, sk: int, window: Window) -> int:
    """How many first query rows see no key (only ``right`` can empty rows, from the top)."""
    right = window[1]
    if right is None:
        return 0 if sk > 0 else sq
    return max(0, min(sq, -((sk - sq) + right))) if sk > 0 else sq


def repeat_kv(x: torch.Tensor, groups: int, head_dim_index: int) -> torch.Tensor:
    """GQA by repeating key/value heads: query head ``h`` uses kv head ``h // groups``
    (flash-attn's and NFA's rule). Works on every torch; SDPA's ``enable_gqa`` needs
    torch >= 2.5."""
    return x if groups <= 1 else x.repeat_interleave(groups, dim=head_dim_index)


def sdpa_bsnd(q, k, v, scale: float, dropout_p: float, window: Window) -> torch.Tensor:
    """flash_attn_func semantics. q: (B, Sq, N, D); k, v: (B, Sk, Nkv, D) -> (B, Sq, N, D)."""
    sq, sk = q.shape[1], k.shape[1]
    groups = q.shape[2] // k.shape[2]
    qt = q.transpose(1, 2)
    kt = repeat_kv(k, groups, 2).transpose(1, 2)
    vt = repeat_kv(v, groups, 2).transpose(1, 2)
    left, right = window
    mask, is_causal = None, False
    if left is None and right is None:
        pass
    elif left is None and right == 0 and sq == sk:
        is_causal = True
    else:
        mask = band_attend_mask(sq, sk, window, device=q.device)
    out = F.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    ).transpose(1, 2)
    empty = leading_empty_rows(sq, sk, window)
    if empty:
        keep = torch.ones(sq, 1, 1, dtype=out.dtype, device=out.device)
        keep[:empty] = 0
        out = out * keep
    return out


def _runs(lens_q: Sequence[int], lens_k: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs ``[first, stop)`` of consecutive sequences with equal (len_q, len_k)."""
    runs, first = [], 0
    for i in range(1, len(lens_q) + 1):
        if i == len(lens_q) or (lens_q[i], lens_k[i]) != (lens_q[first], lens_k[first]):
            runs.append((first, i))
            first = i
    return runs


def sdpa_varlen(q, k, v, cu_q: Sequence[int], cu_k: Sequence[int], scale: float,
                dropout_p: float, window: Window) -> torch.Tensor:
    """flash_attn_varlen_func semantics on packed (T, N, D) tensors with host ``cu_*``.

    Each run of consecutive equal-length sequences is one batched SDPA call on a view of
    the packed tensors (no copies in, one copy out; none when the whole batch is one run).
    On a GPU, a batch of many different lengths goes to torch's fused varlen kernel
    instead (the rule and its measurements: :mod:`hyport_lib.npu_attention.varlen_dispatch`).
    """
    batch = len(cu_q) - 1
    if len(cu_k) - 1 != batch:
        raise ValueError(f"cu_seqlens_q has {batch} sequences but cu_seqlens_k has {len(cu_k) - 1}")
    if cu_q[-1] != q.shape[0]:
        raise ValueError(f"cu_seqlens_q ends at {cu_q[-1]} but q has {q.shape[0]} tokens")
    if cu_k[-1] != k.shape[0]:
        raise ValueError(f"cu_seqlens_k ends at {cu_k[-1]} but k has {k.shape[0]} tokens")
    lens_q = [b - a for a, b in zip(cu_q, cu_q[1:])]
    lens_k = [b - a for a, b in zip(cu_k, cu_k[1:])]
    runs = _runs(lens_q, lens_k)
    op = vd.fused_varlen_op() if q.device.type == "cuda" else None
    path = vd.choose_path(q.device.type, q.dtype, q.shape[-1], dropout_p, len(runs),
                          0 in lens_q or 0 in lens_k, op is not None)
    if path == "fused":
        return vd.fused_varlen(q, k, v, cu_q, cu_k, scale, window, op)
    out = None
    for first, stop in runs:
        lq, lk, n = lens_q[first], lens_k[first], stop - first
        q0, k0 = cu_q[first], cu_k[first]
        if lq == 0:
            continue
        if lk == 0:  # nothing to attend to: flash-attn leaves these rows at 0
            res = q.new_zeros(n, lq, q.shape[1], v.shape[-1])
        else:
            res = sdpa_bsnd(q[q0:q0 + n * lq].view(n, lq, *q.shape[1:]),
                            k[k0:k0 + n * lk].view(n, lk, *k.shape[1:]),
                            v[k0:k0 + n * lk].view(n, lk, *v.shape[1:]), scale, dropout_p, window)
        res = res.reshape(n * lq, q.shape[1], v.shape[-1])
        if len(runs) == 1:
            return res
        if out is None:
            out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
        out[q0:q0 + n * lq] = res
    return out if out is not None else q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
