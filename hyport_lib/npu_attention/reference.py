"""Float64 reference attention, mask builders and the conventions between them.

Every mask built here is a **keep mask: ``True`` = attend**, the convention of
``torch.nn.functional.scaled_dot_product_attention``. ``torch_npu.npu_fusion_attention``
uses the opposite one (``True`` = masked out); convert with :func:`to_npu_mask` and
nowhere else, so that the classic porting bug (passing a keep mask to the NPU) has one
place to be right. Causal alignments (``top_left`` / ``bottom_right``, the NPU's sparse
modes 2 / 3) and the two forms of cumulative lengths: docs/npu_fusion_attention.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import torch

from hyport_lib.port.generated.flash_attn_ascend import NFA_MAX_TOKENS

ALIGNS = ("top_left", "bottom_right")
LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
UNBOUNDED = NFA_MAX_TOKENS  # NPU's "no limit" for pre_tockens / next_tockens


# --- conventions -------------------------------------------------------------------------
def to_npu_mask(keep: torch.Tensor) -> torch.Tensor:
    return ~keep.bool()


def cumulative_lengths(lengths: Sequence[int], leading_zero: bool = False) -> list[int]:
    """``leading_zero=True`` gives flash-attn's form."""
    out, total = ([0] if leading_zero else []), 0
    for n in lengths:
        if int(n) < 0:
            raise ValueError(f"lengths: negative length {n}")
        total += int(n)
        out.append(total)
    return out


def lengths_from_cumulative(cumulative: Sequence[int]) -> list[int]:
    values = [int(x) for x in cumulative]
    lengths, previous = [], 0
    for end in values:
        if end < previous:
            raise ValueError(f"cumulative={values}: must be non-decreasing")
        lengths.append(end - previous)
        previous = end
    return lengths


# --- mask builders (all: True = attend) ----------------------------------------------------
def band_mask(sq: int, skv: int, pre_tokens: int = UNBOUNDED, next_tokens: int = UNBOUNDED,
              align: str = "top_left", device=None) -> torch.Tensor:
    """``[sq, skv]``: query ``i`` attends key ``j`` when ``-pre <= j - i - off <= next``, ``off``
    0 for ``top_left`` (NPU ``sparse_mode=0``) and ``skv - sq`` for ``bottom_right`` (NPU
    ``sparse_mode=4``, flash-attn ``window_size``). ``next_tokens=-2`` excludes the diagonal
    and one more."""
    if align not in ALIGNS:
        raise ValueError(f"align={align!r}: expected one of {', '.join(ALIGNS)}")
    off = skv - sq if align == "bottom_right" else 0
    i = torch.arange(sq, device=device).view(-1, 1)
    j = torch.arange(skv, device=device).view(1, -1)
    rel = j - i - off
    return (rel >= -int(pre_tokens)) & (rel <= int(next_tokens))


def causal_mask(sq: int, skv: int, align: str = "top_left", device=None) -> torch.Tensor:
    return band_mask(sq, skv, UNBOUNDED, 0, align=align, device=device)


def window_mask(sq: int, skv: int, window_size=(-1, -1), causal: bool = False,
                device=None) -> torch.Tensor:
    """flash-attn's ``causal`` + ``window_size=(left, right)`` (-1 = unbounded), bottom-right."""
    left, right = (int(w) for w in window_size)
    pre = UNBOUNDED if left < 0 else left
    nxt = 0 if causal else (UNBOUNDED if right < 0 else right)
    return band_mask(sq, skv, pre, nxt, align="bottom_right", device=device)


def padding_mask(lengths: Sequence[int], max_len: Optional[int] = None, device=None) -> torch.Tensor:
    """``[B, max_len]`` of a right-padded batch: True where a token is real."""
    lengths = [int(n) for n in lengths]
    max_len = max(lengths, default=0) if max_len is None else int(max_len)
    if any(n > max_len or n < 0 for n in lengths):
        raise ValueError(f"lengths={lengths}: each must be within 0..max_len={max_len}")
    pos = torch.arange(max_len, device=device).view(1, -1)
    return pos < torch.tensor(lengths, device=device).view(-1, 1)


def padded_mask(lengths_q: Sequence[int], lengths_kv: Optional[Sequence[int]] = None,
                sq: Optional[int] = None, skv: Optional[int] = None, causal: bool = False,
                window_size=(-1, -1)) -> torch.Tensor:
    """``[B, 1, sq, skv]`` for a right-padded batch: each sample a block, causal / windowed on
    its own lengths as flash-attn's unpad -> varlen path does; padded query rows are fully
    masked."""
    lengths_kv = lengths_q if lengths_kv is None else lengths_kv
    if len(lengths_kv) != len(lengths_q):
        raise ValueError(f"lengths_kv has {len(lengths_kv)} samples, lengths_q {len(lengths_q)}")
    sq = max(lengths_q, default=0) if sq is None else sq
    skv = max(lengths_kv, default=0) if skv is None else skv
    out = torch.zeros(len(lengths_q), 1, sq, skv, dtype=torch.bool)
    for b, (lq, lk) in enumerate(zip(lengths_q, lengths_kv)):
        if lq > sq or lk > skv:
            raise ValueError(f"sample {b}: lengths ({lq}, {lk}) exceed the padded ({sq}, {skv})")
        out[b, 0, :lq, :lk] = _sample_mask(lq, lk, causal, window_size)
    return out


def _sample_mask(sq, skv, causal, window_size):
    """Aligned bottom-right, as flash-attn's varlen path aligns it."""
    if tuple(window_size) != (-1, -1):
        return window_mask(sq, skv, window_size, causal=causal)
    if causal:
        return causal_mask(sq, skv, align="bottom_right")
    return torch.ones(sq, skv, dtype=torch.bool)


def block_diagonal_mask(seqlens_q: Sequence[int], seqlens_kv: Optional[Sequence[int]] = None,
                        causal: bool = False, window_size=(-1, -1)) -> torch.Tensor:
    """``[Tq, Tkv]`` for packed samples of per-sample (not cumulative, possibly 0) lengths,
    each attending within itself (flash-attn's varlen semantics)."""
    seqlens_kv = seqlens_q if seqlens_kv is None else seqlens_kv
    if len(seqlens_kv) != len(seqlens_q):
        raise ValueError(f"seqlens_kv has {len(seqlens_kv)} samples, seqlens_q {len(seqlens_q)}")
    tq, tk = sum(int(n) for n in seqlens_q), sum(int(n) for n in seqlens_kv)
    out = torch.zeros(tq, tk, dtype=torch.bool)
    q0 = k0 = 0
    for lq, lk in zip(seqlens_q, seqlens_kv):
        lq, lk = int(lq), int(lk)
        out[q0:q0 + lq, k0:k0 + lk] = _sample_mask(lq, lk, causal, window_size)
        q0, k0 = q0 + lq, k0 + lk
    return out


def bidirectional_span_mask(seq_len: int, spans: Sequence[tuple[int, int]], causal: bool = True,
                            base: Optional[torch.Tensor] = None, device=None) -> torch.Tensor:
    """Causal (or full, or ``base``) attention plus full attention inside each half-open,
    non-overlapping ``(start, end)`` span, as vision-language models let one image's tokens
    attend each other both ways. ``base``: an existing keep mask ``[..., S, S]`` (e.g. a
    block-diagonal one of packed samples) instead of a ``seq_len`` square.
    """
    if base is None:
        base = causal_mask(seq_len, seq_len, device=device) if causal else \
            torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    out = base.clone()
    size = out.shape[-1]
    previous_end = 0
    for start, end in sorted((int(s), int(e)) for s, e in spans):
        if not 0 <= start <= end <= size:
            raise ValueError(f"spans: ({start}, {end}) is outside 0..{size}")
        if start < previous_end:
            raise ValueError(f"spans: ({start}, {end}) overlaps the previous span")
        out[..., start:end, start:end] = True
        previous_end = end
    return out


# --- layouts -------------------------------------------------------------------------------
def to_bnsd(x: torch.Tensor, layout: str, num_heads: Optional[int] = None) -> torch.Tensor:
    """``x`` viewed as ``[B, N, S, D]`` (TND: ``[1, N, T, D]``); the fused-head layouts BSH /
    SBH need ``num_heads``."""
    layout = layout.upper()
    if layout in ("BSH", "SBH"):
        if not num_heads:
            raise ValueError(f"layout={layout}: num_heads is needed to split H")
        if layout == "BSH":
            b, s, h = x.shape
            return x.view(b, s, num_heads, h // num_heads).permute(0, 2, 1, 3)
        s, b, h = x.shape
        return x.view(s, b, num_heads, h // num_heads).permute(1, 2, 0, 3)
    if layout == "BSND":
        return x.permute(0, 2, 1, 3)
    if layout == "BNSD":
        return x
    if layout == "TND":
        return x.permute(1, 0, 2).unsqueeze(0)
    raise ValueError(f"layout={layout!r}: expected one of {', '.join(LAYOUTS)}")


def from_bnsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Inverse of :func:`to_bnsd`, contiguous."""
    layout = layout.upper()
    b, n, s, d = x.shape
    if layout == "BSH":
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d)
    if layout == "SBH":
        return x.permute(2, 0, 1, 3).reshape(s, b, n * d)
    if layout == "BSND":
        return x.permute(0, 2, 1, 3).contiguous()
    if layout == "BNSD":
        return x.contiguous()
    if layout == "TND":
        if b != 1:
            raise ValueError(f"layout=TND needs B == 1 in BNSD form, got B={b}")
        return x[0].permute(1, 0, 2).contiguous()
    raise ValueError(f"layout={layout!r}: expected one of {', '.join(LAYOUTS)}")


# --- reference attention -------------------------------------------------------------------
class ReferenceResult(NamedTuple):
    out: torch.Tensor  # [B, Nq, Sq, D] float64
    row_max: torch.Tensor  # [B, Nq, Sq] max of the scaled, masked scores; -inf if empty
    row_sum: torch.Tensor  # [B, Nq, Sq] sum of exp(score - row_max); 0 if empty
    empty_rows: torch.Tensor  # [B, Nq, Sq] bool: the query attends no key


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: Optional[torch.Tensor] = None, scale: Optional[float] = None,
                        bias: Optional[torch.Tensor] = None,
                        dropout_keep: Optional[torch.Tensor] = None, keep_prob: float = 1.0,
                        return_stats: bool = False):
    """Attention in float64 on the inputs' device: ``softmax(scale * q kᵀ + bias) v`` on
    ``[B, N, S, D]`` tensors (GQA: query head ``h`` uses kv head ``h // (Nq // Nkv)``).
    ``scale`` None means ``1 / sqrt(D)`` (flash-attn's default, not NPU's 1.0); ``bias`` is
    added after scaling (NPU's ``pse`` is added before: pass ``scale * pse``); kept dropout
    probabilities are divided by ``keep_prob``. Fully masked rows come out 0.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, N, S, D]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    nq, nkv = q.shape[1], k.shape[1]
    if nkv == 0 or nq % nkv:
        raise ValueError(f"k has {nkv} heads; q's {nq} heads must be a multiple of it")
    q64, k64, v64 = q.double(), k.double(), v.double()
    if nq != nkv:
        k64 = k64.repeat_interleave(nq // nkv, dim=1)
        v64 = v64.repeat_interleave(nq // nkv, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias.double()
    if mask is not None:
        keep = mask.bool().expand_as(scores)
    else:
        keep = torch.ones_like(scores, dtype=torch.bool)
    scores = scores.masked_fill(~keep, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    empty = ~keep.any(dim=-1, keepdim=True)
    shift = torch.where(empty, torch.zeros_like(row_max), row_max)
    expd = torch.exp(scores - shift)  # masked entries: exp(-inf) = 0
    row_sum = expd.sum(dim=-1, keepdim=True)
    probs = expd / torch.where(empty, torch.ones_like(row_sum), row_sum)
    if dropout_keep is not None:
        probs = probs * dropout_keep.to(probs.dtype) / float(keep_prob)
    out = torch.matmul(probs, v64)
    if not return_stats:
        return out
    return ReferenceResult(out, row_max.squeeze(-1), row_sum.squeeze(-1), empty.squeeze(-1))
