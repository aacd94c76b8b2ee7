# Written by `hyport port`; kept as is when the tree is ported again.
# hyport-scan: ignore-file (this module is the device seam of the ported code)
"""flash-attn's API on Ascend NPUs, and on SDPA everywhere else.

A ported model imports its flash-attn names from here instead of ``flash_attn``:

* on an NPU tensor the attention runs on ``torch_npu.npu_fusion_attention`` (NFA),
  with the documented argument mapping: BSND for dense batches, TND with
  ``actual_seq_qlen`` / ``actual_seq_kvlen`` for varlen ones (cumulative lengths
  *without* the leading 0, as host ints), ``scale`` always passed (NFA's default is
  1.0, flash-attn's is 1/sqrt(head_dim)), ``keep_prob = 1 - dropout_p``, causal as
  ``sparse_mode=3`` with the compressed 2048x2048 ``triu(1)`` mask (flash-attn >= 2.1
  aligns the causal mask bottom-right, as mode 3 does), a finite ``window_size`` as
  ``sparse_mode=4`` with ``pre_tockens`` / ``next_tockens``, fewer key/value heads
  (GQA) passed as they are;
* on any other device on ``torch.nn.functional.scaled_dot_product_attention``, with
  flash-attn's semantics (bottom-right causal, windows, rows that see no key are 0).

``BACKEND`` (``auto`` | ``npu`` | ``sdpa``, from ``FLASH_ATTN_ASCEND_BACKEND``) forces
one path; ``npu_fusion_attention`` may be set to an NFA-compatible callable (a CPU
emulation, say) instead of torch_npu's. ``CALLS`` counts the attention calls per path:
a forward that adds none never reached this module.

The device helpers (``accelerator_type`` ...) replace ``.cuda()``, ``torch.cuda.*``,
``"nccl"`` and ``is_cuda`` tests. They ask ``torch.accelerator`` where torch has it
(2.6+; with torch_npu loaded it answers ``npu``) and ``torch.npu`` / ``torch.cuda``
otherwise. This module imports torch only, and torch_npu only when an NPU path runs.
"""

from __future__ import annotations

import collections
import math
import os

import torch
import torch.nn.functional as F

#: The flash-attn release whose API this module serves.
__version__ = "2.7.4"
#: What ``unpad_input`` returns: 4 values before flash-attn 2.7, 5 from 2.7 on.
UNPAD_INPUT_RETURNS = 5
BACKEND = os.environ.get("FLASH_ATTN_ASCEND_BACKEND", "auto")
CALLS: collections.Counter = collections.Counter()
#: None: ``torch_npu.npu_fusion_attention``. Else a callable with its signature.
npu_fusion_attention = None

NFA_MAX_TOKENS = 2147483647
NFA_MASK_SIZE = 2048
_compressed_masks: dict = {}


# --------------------------------------------------------------------------- devices
def accelerator_type() -> str:
    """``"npu"``, ``"cuda"`` (or another accelerator's type), else ``"cpu"``."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "current_accelerator"):
        try:
            device = accelerator.current_accelerator()
        except RuntimeError:  # torch 2.6 raises where no accelerator is available
            device = None
        if device is not None and accelerator.is_available():
            return device.type
        return "cpu"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def accelerator_device(index=None) -> torch.device:
    """The accelerator (card ``index`` of it), or the CPU where there is none."""
    kind = accelerator_type()
    if kind == "cpu" or index is None:
        return torch.device(kind)
    if isinstance(index, torch.device):
        index = index.index
    return torch.device(kind, int(index))


def accelerator_module():
    """``torch.npu`` or ``torch.cuda`` (``torch.cuda`` also on a CPU host, where its
    answers are the CPU's: not available, no devices)."""
    kind = accelerator_type()
    return getattr(torch, kind) if kind in ("npu", "cuda") else torch.cuda


def distributed_backend() -> str:
    """The collective backend of the accelerator: ``hccl``, ``nccl``, else ``gloo``."""
    return {"npu": "hccl", "cuda": "nccl"}.get(accelerator_type(), "gloo")


def on_accelerator(tensor) -> bool:
    """What ``tensor.is_cuda`` meant in CUDA-only code: the tensor is on a card."""
    return tensor.device.type in ("cuda", "npu")


def flash_supported(tensor) -> bool:
    """What ``tensor.is_cuda`` meant in front of flash attention: the attention below
    can run on this tensor's device (this module serves npu, cuda and cpu)."""
    return tensor.device.type in ("npu", "cuda", "cpu")


def hf_attn_implementation() -> str:
    """The transformers attention for ``attn_implementation=``: ``flash_attention_2`` on
    cards (transformers serves it on Ascend through its own NPU integration), ``sdpa``
    on a CPU host."""
    return "flash_attention_2" if accelerator_type() in ("npu", "cuda") else "sdpa"


# --------------------------------------------------------------------------- NFA
def _nfa():
    if npu_fusion_attention is not None:
        return npu_fusion_attention
    import torch_npu  # only here: a ported model imports on hosts without it

    return torch_npu.npu_fusion_attention


def _path(tensor) -> str:
    if BACKEND not in ("auto", "npu", "sdpa"):
        raise ValueError(f"FLASH_ATTN_ASCEND_BACKEND={BACKEND!r}: expected auto, npu or sdpa")
    if BACKEND != "auto":
        return BACKEND
    return "npu" if tensor.device.type == "npu" else "sdpa"


def _window(causal, window_size):
    """``(left, right)`` keys visible around the diagonal, None = unbounded."""
    left, right = (int(w) for w in (window_size if window_size is not None else (-1, -1)))
    left = None if left < 0 else left
    right = None if right < 0 else right
    if causal:
        right = 0
    return left, right


def _compressed_mask(device):
    key = str(device)
    if key not in _compressed_masks:
        ones = torch.ones(NFA_MASK_SIZE, NFA_MASK_SIZE, dtype=torch.bool, device=device)
        _compressed_masks[key] = torch.triu(ones, diagonal=1)
    return _compressed_masks[key]


def _sparse_arguments(window, device) -> dict:
    left, right = window
    if left is None and right is None:
        return {"sparse_mode": 0}
    if left is None and right == 0:
        return {"atten_mask": _compressed_mask(device), "sparse_mode": 3}
    return {"atten_mask": _compressed_mask(device), "sparse_mode": 4,
            "pre_tockens": NFA_MAX_TOKENS if left is None else left,
            "next_tockens": NFA_MAX_TOKENS if right is None else right}


def _visible(seqlen_q, seqlen_k, window, device, top_left=False):
    """(Sq, Sk) bool, True where a query sees a key; the diagonal is bottom-right
    (flash-attn 2.1+), or top-left (flash-attn 1.x causal)."""
    left, right = window
    rows = torch.arange(seqlen_q, device=device).unsqueeze(1) + (0 if top_left else seqlen_k - seqlen_q)
    cols = torch.arange(seqlen_k, device=device).unsqueeze(0)
    seen = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right is not None:
        seen &= cols <= rows + right
    if left is not None:
        seen &= cols >= rows - left
    return seen


def _scale(softmax_scale, q) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)


def _refuse(softcap, alibi_slopes, return_attn_probs):
    if softcap:
        raise NotImplementedError("flash_attn_ascend: softcap has no NFA/SDPA counterpart")
    if alibi_slopes is not None:
        raise NotImplementedError("flash_attn_ascend: alibi_slopes: add the bias to a mask instead")
    if return_attn_probs:
        raise NotImplementedError("flash_attn_ascend: the fused kernels return no softmax")


def _sdpa(q, k, v, scale, dropout_p, window, top_left=False):
    """q: (B, Sq, N, D), k/v: (B, Sk, Nkv, D) -> (B, Sq, N, D)."""
    if k.shape[2] != q.shape[2]:
        repeat = q.shape[2] // k.shape[2]
        k = k.repeat_interleave(repeat, dim=2)
        v = v.repeat_interleave(repeat, dim=2)
    seen = None
    if window != (None, None):
        seen = _visible(q.shape[1], k.shape[1], window, q.device, top_left)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=seen,
        dropout_p=dropout_p, scale=scale).transpose(1, 2)
    if seen is not None:  # a row that sees no key is 0 (SDPA leaves NaN there)
        out = torch.where(seen.any(-1).view(1, -1, 1, 1), out, out.new_zeros(()))
    return out


def _zero_blind_rows(out, seqlen_q, seqlen_k, window, row_axis):
    """Rows that see no key are 0, whatever the kernel left there. With the diagonal at
    the bottom right only leading rows can be blind: worked out on the host, no sync."""
    right = window[1]
    blind = 0 if right is None else max(0, seqlen_q - seqlen_k - right)
    if not blind:
        return out
    keep = torch.ones(seqlen_q, dtype=torch.bool, device=out.device)
    keep[:min(blind, seqlen_q)] = False
    shape = [1] * out.dim()
    shape[row_axis] = seqlen_q
    # where, not a product: NaN * 0 is NaN
    return torch.where(keep.view(shape), out, out.new_zeros(()))


def _dense(q, k, v, dropout_p, softmax_scale, causal, window_size):
    window = _window(causal, window_size)
    scale = _scale(softmax_scale, q)
    path = _path(q)
    CALLS[path] += 1
    if path == "sdpa":
        return _sdpa(q, k, v, scale, dropout_p, window)
    out = _nfa()(q, k, v, head_num=q.shape[2], input_layout="BSND", scale=scale,
                 keep_prob=1.0 - float(dropout_p), **_sparse_arguments(window, q.device))[0]
    return _zero_blind_rows(out, q.shape[1], k.shape[1], window, row_axis=1)


def _host_cumulative(cu_seqlens) -> list:
    return [int(x) for x in cu_seqlens.tolist()]


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal, window_size,
            top_left=False):
    window = _window(causal, window_size)
    scale = _scale(softmax_scale, q)
    cu_q = _host_cumulative(cu_seqlens_q)
    cu_k = cu_q if cu_seqlens_k is cu_seqlens_q else _host_cumulative(cu_seqlens_k)
    path = _path(q)
    CALLS[path] += 1
    if path == "sdpa":
        pieces = [
            _sdpa(q[q0:q1].unsqueeze(0), k[k0:k1].unsqueeze(0), v[k0:k1].unsqueeze(0),
                  scale, dropout_p, window, top_left)[0]
            for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:])]
        return torch.cat(pieces, dim=0)
    sparse = ({"atten_mask": _compressed_mask(q.device), "sparse_mode": 2} if top_left
              else _sparse_arguments(window, q.device))
    out = _nfa()(q, k, v, head_num=q.shape[1], input_layout="TND", scale=scale,
                 keep_prob=1.0 - float(dropout_p), actual_seq_qlen=cu_q[1:],
                 actual_seq_kvlen=cu_k[1:], **sparse)[0]
    if top_left:  # no row is blind: each sees at least its first key
        return out
    pieces = [_zero_blind_rows(out[q0:q1], q1 - q0, k1 - k0, window, row_axis=0)
              for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:])]
    return torch.cat(pieces, dim=0) if len(pieces) > 1 else pieces[0]


# --------------------------------------------------------------------------- flash-attn API
def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False):
    """q: (B, Sq, N, D); k, v: (B, Sk, Nkv, D) -> (B, Sq, N, D)."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    return _dense(q, k, v, dropout_p, softmax_scale, causal, window_size)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False):
    """qkv: (B, S, 3, N, D) -> (B, S, N, D)."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    return _dense(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal,
                  window_size)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q: (B, Sq, N, D); kv: (B, Sk, 2, Nkv, D) -> (B, Sq, N, D)."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    return _dense(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """q: (Tq, N, D); k, v: (Tk, Nkv, D); cu_seqlens_*: (B + 1,) with a leading 0."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    if block_table is not None:
        raise NotImplementedError("flash_attn_ascend: a paged KV cache (block_table) is not served")
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                   window_size)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv: (T, 3, N, D) -> (T, N, D)."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    return _varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, dropout_p,
                   softmax_scale, causal, window_size)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """q: (Tq, N, D); kv: (Tk, 2, Nkv, D) -> (Tq, N, D)."""
    _refuse(softcap, alibi_slopes, return_attn_probs)
    return _varlen(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale,
                   causal, window_size)


# --------------------------------------------------------------------------- flash-attn 1.x
def flash_attn_unpadded_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             dropout_p, softmax_scale=None, causal=False, return_attn_probs=False,
                             deterministic=False):
    """flash-attn 1.x varlen: its causal mask is aligned top-left (NFA ``sparse_mode=2``)."""
    _refuse(0.0, None, return_attn_probs)
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                   (-1, -1), top_left=bool(causal))


def flash_attn_unpadded_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p, softmax_scale=None,
                                       causal=False, return_attn_probs=False, deterministic=False):
    """flash-attn 1.x packed varlen: qkv (T, 3, N, D)."""
    return flash_attn_unpadded_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                    max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                                    return_attn_probs)


def flash_attn_unpadded_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                      max_seqlen_k, dropout_p, softmax_scale=None, causal=False,
                                      return_attn_probs=False, deterministic=False):
    """flash-attn 1.x: q (Tq, N, D), kv (Tk, 2, Nkv, D)."""
    return flash_attn_unpadded_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                                    return_attn_probs)


# --------------------------------------------------------------------------- bert_padding
def index_first_axis(tensor, indices):
    """Rows ``indices`` of ``tensor`` flattened over its first axis."""
    return tensor.reshape(-1, *tensor.shape[1:])[indices]


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(B, S, ...) and a (B, S) mask of 1 = token -> the tokens packed (T, ...), their
    indices, ``cu_seqlens`` (B + 1, int32), the longest length, and (from flash-attn 2.7
    on, ``UNPAD_INPUT_RETURNS == 5``) the lengths of the batch."""
    used = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens = used.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(used.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = index_first_axis(hidden_states.reshape(-1, *hidden_states.shape[2:]), indices)
    longest = int(seqlens.max().item()) if seqlens.numel() else 0
    if UNPAD_INPUT_RETURNS == 4:
        return packed, indices, cu_seqlens, longest
    return packed, indices, cu_seqlens, longest, attention_mask.sum(dim=-1, dtype=torch.int32)


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse of ``unpad_input``: (T, ...) -> (batch, seqlen, ...), zeros elsewhere."""
    out = torch.zeros(batch * seqlen, *hidden_states.shape[1:], device=hidden_states.device,
                      dtype=hidden_states.dtype)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


# --------------------------------------------------------------------------- rotary
def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    """flash-attn's rotary embedding in plain torch: x (B, S, H, D), or (T, H, D) with
    ``cu_seqlens``; cos/sin (S_rotary, rotary_dim / 2); computed in float32."""
    rotary_dim = cos.shape[-1] * 2
    if cu_seqlens is None:
        offsets = seqlen_offsets
        if isinstance(offsets, torch.Tensor):
            offsets = offsets.to(x.device, torch.long).reshape(-1, 1)
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0) + offsets
        positions = positions.expand(x.shape[0], -1)
    else:
        cu = cu_seqlens.to(x.device, torch.long)
        tokens = torch.arange(x.shape[0], device=x.device)
        sequence = torch.searchsorted(cu[1:], tokens, right=True)
        offsets = seqlen_offsets
        if isinstance(offsets, torch.Tensor):
            offsets = offsets.to(x.device, torch.long).reshape(-1)[sequence]
        positions = tokens - cu[sequence] + offsets
    inside = (positions < cos.shape[0]).unsqueeze(-1)
    positions = positions.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside, cos.float()[positions], 1.0).unsqueeze(-2)
    s = torch.where(inside, sin.float()[positions], 0.0).unsqueeze(-2)
    part = x[..., :rotary_dim].float()
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = part.chunk(2, dim=-1)
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    rotated = rotated.to(x.dtype)
    if inplace:
        x[..., :rotary_dim] = rotated
        return x
    return rotated if rotary_dim == x.shape[-1] else torch.cat((rotated, x[..., rotary_dim:]), -1)


apply_rotary_emb_func = apply_rotary_emb
