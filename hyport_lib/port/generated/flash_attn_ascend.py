# Written by `hyport port`; kept as is when the tree is ported again.
# hyport-scan: ignore-file (this module is the device seam of the ported code)
"""flash-attn's API on Ascend NPUs, and on SDPA everywhere else.

A ported model imports its flash-attn names from here instead of ``flash_attn``; hyport
itself runs the very same file (its ``flash_attn`` shim and its transformers attention).

* on the ``npu`` path the attention runs on ``torch_npu.npu_fusion_attention`` (NFA),
  with the documented argument mapping: BSND for dense batches, TND with
  ``actual_seq_qlen`` / ``actual_seq_kvlen`` for varlen ones (cumulative lengths
  *without* the leading 0, as host ints, read once per ``cu_seqlens`` tensor), ``scale``
  always passed (NFA's default is 1.0, flash-attn's is 1/sqrt(head_dim)),
  ``keep_prob = 1 - dropout_p``, causal as ``sparse_mode=3`` with the compressed
  2048x2048 ``triu(1)`` mask (flash-attn >= 2.1 aligns the causal mask bottom-right, as
  mode 3 does; flash-attn 1.x's top-left causal is mode 2), a finite ``window_size`` as
  ``sparse_mode=4`` with ``pre_tockens`` / ``next_tockens``, fewer key/value heads
  (GQA) passed as they are;
* on the ``sdpa`` path on ``torch.nn.functional.scaled_dot_product_attention``, with
  flash-attn's semantics (bottom-right causal, windows, rows that see no key are 0); a
  varlen batch is one batched call per run of equal lengths, or torch's fused varlen
  kernel on a GPU when many lengths differ (:func:`choose_varlen_path`).

``BACKEND`` (``auto`` | ``npu`` | ``sdpa``, from ``FLASH_ATTN_ASCEND_BACKEND``) forces
one path (``auto``: ``npu`` for tensors on an NPU); ``npu_fusion_attention`` may be set
to an NFA-compatible callable (a CPU emulation, say) instead of torch_npu's. ``CALLS``
counts the attention calls per path: a forward that adds none never reached this
module. :class:`FlashAttention` binds the same functions to a path and kernel of its own.

Options with no NFA/SDPA counterpart (``softcap``, ``alibi_slopes``,
``return_attn_probs``, paged caches ...) raise :class:`FlashAttnUnsupported` naming
the option; inputs flash-attn would reject but that are well defined (fp32, CPU
tensors) are accepted.

The device helpers (``accelerator_type`` ...) replace ``.cuda()``, ``torch.cuda.*``,
``"nccl"`` and ``is_cuda`` tests. They ask ``torch.accelerator`` where torch has it
(2.6+; with torch_npu loaded it answers ``npu``) and ``torch.npu`` / ``torch.cuda``
otherwise. This module imports torch only, and torch_npu only when an NPU path runs.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import weakref

import torch
import torch.nn.functional as F

#: The flash-attn release whose API this module serves.
__version__ = "2.7.4"
#: What ``unpad_input`` returns: 4 values before flash-attn 2.7, 5 from 2.7 on.
UNPAD_INPUT_RETURNS = 5
BACKEND = os.environ.get("FLASH_ATTN_ASCEND_BACKEND", "auto")
#: None: ``torch_npu.npu_fusion_attention``. Else a callable with its signature.
npu_fusion_attention = None

#: ``pre_tockens`` / ``next_tockens`` meaning "no limit" (INT32_MAX).
NFA_MAX_TOKENS = 2147483647
#: Side of the compressed ``triu(ones, 1)`` mask that NFA's sparse modes 2-4, 7, 8 take.
NFA_MASK_SIZE = 2048
#: From this many runs of equal (len_q, len_k) on, torch's fused varlen kernel serves a
#: GPU batch (measured on one H200, bf16, 32 heads, head dim 128, causal: grouped SDPA
#: over fused was 0.70 at 8 x 2048, 0.93 at 64 x 256, 8.1 at 16 distinct lengths).
FUSED_MIN_RUNS = 9
_FUSED_DTYPES = (torch.float16, torch.bfloat16)
_compressed_masks: dict = {}


class FlashAttnUnsupported(NotImplementedError):
    """A flash-attn option that this module cannot honour on NFA or SDPA."""


def _unsupported(func, option, value, hint) -> FlashAttnUnsupported:
    return FlashAttnUnsupported(f"{func}({option}={value!r}) is not supported by hyport's "
                                f"flash-attn drop-in; {hint}")


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


# --------------------------------------------------------------------------- host lengths
def _version(tensor):
    try:
        return int(tensor._version)
    except (AttributeError, RuntimeError):  # inference-mode tensors track no version
        return None


class IdentityCache:
    """Memo keyed by the identity (and in-place version) of tensors, so that 24 layers
    of one batch read its ``cu_seqlens`` from the device once, not 24 times.

    A hit requires the very same tensor objects, alive, with unchanged ``_version``;
    tensors without one (made under ``torch.inference_mode``) are never cached. Writes
    that bypass the version counter (``.data``, a NumPy view) are invisible to it. Keys
    hold weak references and an entry goes when one of its tensors is freed, so a new
    tensor at a freed address never sees a stale value. ``misses`` counts computations
    (for host copies: device syncs), ``hits`` answers from the cache.
    """

    def __init__(self, maxsize: int = 32):
        self.maxsize, self.misses, self.hits = maxsize, 0, 0
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.RLock()  # weakref callbacks may fire while it is held

    def get(self, tag, tensors, compute):
        """The value for ``(tag, tensors)``; ``compute()`` runs on a miss. None items allowed."""
        key = (tag, *(id(t) for t in tensors))
        versions = tuple(None if t is None else _version(t) for t in tensors)
        if any(v is None and t is not None for v, t in zip(versions, tensors)):
            # no version: an in-place refill of a reused buffer would look unchanged
            with self._lock:
                self.misses += 1
            return compute()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                refs, old_versions, value = entry
                alive = all((r is None and t is None) or (r is not None and r() is t)
                            for r, t in zip(refs, tensors))
                if alive and old_versions == versions:
                    self.hits += 1
                    self._entries.move_to_end(key)
                    return value
        value = compute()
        with self._lock:
            self.misses += 1
            drop = _dropper(self, key)
            refs = tuple(None if t is None else weakref.ref(t, drop) for t in tensors)
            self._entries[key] = (refs, versions, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.misses = self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)


def _dropper(cache, key):
    cache_ref = weakref.ref(cache)

    def drop(_ref):
        owner = cache_ref()
        if owner is not None:
            with owner._lock:
                owner._entries.pop(key, None)

    return drop


#: Host copies of ``cu_seqlens`` (and whatever else is derived once per batch).
HOST_CACHE = IdentityCache()


def host_cu_seqlens(cu_seqlens, name="cu_seqlens") -> tuple:
    """``cu_seqlens`` (leading 0) as a host tuple: one device sync per tensor."""
    if not hasattr(cu_seqlens, "tolist"):
        values = tuple(int(x) for x in cu_seqlens)
    else:
        if cu_seqlens.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(cu_seqlens.shape)}")
        values = HOST_CACHE.get("cu_seqlens", (cu_seqlens,),
                                lambda: tuple(int(x) for x in cu_seqlens.tolist()))
    if len(values) < 2 or values[0] != 0:
        raise ValueError(f"{name} must start with 0 and hold batch+1 entries, got {list(values)[:8]}")
    if any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be non-decreasing, got {list(values)[:8]}")
    return values


# --------------------------------------------------------------------------- windows, masks
def resolve_window(causal, window_size, name="window_size"):
    """flash-attn ``(causal, window_size)`` -> ``(left, right)`` keys visible around the
    diagonal, None = unbounded."""
    try:
        left, right = (int(w) for w in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair of ints like (-1, -1), got {window_size!r}") from None
    left = None if left < 0 else left
    right = None if right < 0 else right
    if causal:
        right = 0
    return left, right


def compressed_causal_mask(device=None):
    """NFA's 2048x2048 ``triu(ones, 1)`` bool mask (True = masked), one per device: every
    layer passes the same tensor (an emulation may recognise it by identity)."""
    key = str(torch.device(device) if device is not None else torch.device("cpu"))
    if key not in _compressed_masks:
        ones = torch.ones(NFA_MASK_SIZE, NFA_MASK_SIZE, dtype=torch.bool, device=key)
        _compressed_masks.setdefault(key, torch.triu(ones, diagonal=1))  # first one wins
    return _compressed_masks[key]


def nfa_sparse_arguments(window, device) -> dict:
    """NFA ``atten_mask`` / ``sparse_mode`` / ``pre_tockens`` / ``next_tockens`` of a window."""
    left, right = window
    if left is None and right is None:
        return {"atten_mask": None, "sparse_mode": 0}
    if left is None and right == 0:
        return {"atten_mask": compressed_causal_mask(device), "sparse_mode": 3}
    return {"atten_mask": compressed_causal_mask(device), "sparse_mode": 4,
            "pre_tockens": NFA_MAX_TOKENS if left is None else left,
            "next_tockens": NFA_MAX_TOKENS if right is None else right}


def attend_band(seqlen_q, seqlen_k, window, device=None, top_left=False):
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


def _blind_rows(seqlen_q, seqlen_k, window, top_left=False) -> int:
    """How many first query rows see no key: with the diagonal at the bottom right only
    leading rows can be blind, worked out on the host (no sync)."""
    right = window[1]
    if seqlen_k == 0:
        return seqlen_q
    if right is None:
        return 0
    return max(0, min(seqlen_q, -((0 if top_left else seqlen_k - seqlen_q) + right)))


def _zero_rows(out, spans, row_axis):
    """Rows ``[start, stop)`` of ``spans`` set to 0, flash-attn's value for a row that
    sees no key, whatever the kernel left there."""
    if not spans:
        return out
    keep = torch.ones(out.shape[row_axis], dtype=torch.bool)
    for start, stop in spans:
        keep[start:stop] = False
    shape = [1] * out.dim()
    shape[row_axis] = -1
    # where, not a product: NaN * 0 is NaN; and out of place: NFA's backward reads its output
    return torch.where(keep.to(out.device).view(shape), out, out.new_zeros(()))


def _scale(softmax_scale, q) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)


# --------------------------------------------------------------------------- SDPA
def repeat_kv(x, groups, head_axis):
    """GQA by repeating key/value heads: query head ``h`` uses kv head ``h // groups``
    (flash-attn's and NFA's rule; SDPA's ``enable_gqa`` needs torch >= 2.5)."""
    return x if groups <= 1 else x.repeat_interleave(groups, dim=head_axis)


def sdpa_dense(q, k, v, scale, dropout_p, window, top_left=False):
    """q: (B, Sq, N, D), k/v: (B, Sk, Nkv, D) -> (B, Sq, N, D). SDPA's ``is_causal`` is
    top-left: used where it agrees (equal lengths, or top-left asked), else a band mask."""
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    groups = q.shape[2] // k.shape[2]
    mask, is_causal = None, False
    if window == (None, 0) and (seqlen_q == seqlen_k or top_left):
        is_causal = True
    elif window != (None, None):
        mask = attend_band(seqlen_q, seqlen_k, window, q.device, top_left)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), repeat_kv(k, groups, 2).transpose(1, 2),
        repeat_kv(v, groups, 2).transpose(1, 2), attn_mask=mask, dropout_p=dropout_p,
        is_causal=is_causal, scale=scale).transpose(1, 2)
    blind = _blind_rows(seqlen_q, seqlen_k, window, top_left)
    return _zero_rows(out, [(0, blind)] if blind else [], row_axis=1)


def equal_length_runs(lens_q, lens_k) -> list:
    """Maximal runs ``[first, stop)`` of consecutive sequences with equal (len_q, len_k)."""
    runs, first = [], 0
    for i in range(1, len(lens_q) + 1):
        if i == len(lens_q) or (lens_q[i], lens_k[i]) != (lens_q[first], lens_k[first]):
            runs.append((first, i))
            first = i
    return runs


def fused_varlen_op():
    """torch's public fused varlen attention, where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def choose_varlen_path(device_type, dtype, head_dim, dropout_p, runs, has_empty, fused_available):
    """``"fused"`` from :data:`FUSED_MIN_RUNS` runs on where the fused kernel serves the
    call (a CUDA tensor in fp16/bf16, no dropout, a head dim it takes, no empty
    sequence); ``"grouped"`` SDPA otherwise, and always on the CPU."""
    servable = (device_type == "cuda" and dtype in _FUSED_DTYPES and dropout_p == 0.0
                and head_dim % 8 == 0 and head_dim <= 256 and not has_empty and fused_available)
    return "fused" if servable and runs >= FUSED_MIN_RUNS else "grouped"


def fused_varlen(q, k, v, cu_q, cu_k, scale, window, op=None):
    """torch's fused varlen kernel on packed (T, N, D) tensors with host ``cu_*``."""
    op = op or fused_varlen_op()
    lens_q = [b - a for a, b in zip(cu_q, cu_q[1:])]
    lens_k = [b - a for a, b in zip(cu_k, cu_k[1:])]
    cq = torch.tensor(list(cu_q), dtype=torch.int32, device=q.device)
    ck = cq if list(cu_k) == list(cu_q) else torch.tensor(list(cu_k), dtype=torch.int32, device=q.device)
    left, right = window
    return op(q, k, v, cq, ck, max(lens_q), max(lens_k), scale=scale,
              window_size=(-1 if left is None else int(left), -1 if right is None else int(right)),
              enable_gqa=q.shape[1] != k.shape[1])


def sdpa_varlen(q, k, v, cu_q, cu_k, scale, dropout_p, window, top_left=False):
    """Packed (T, N, D) with host ``cu_*``: each run of consecutive equal-length sequences
    is one batched SDPA call on a view of the packed tensors (no copies in; none out when
    the batch is one run). Copying into a padded layout, stacking non-adjacent equal
    lengths, or nested tensors (no ``is_causal``, ~15x slower) measured slower on CPU."""
    lens_q = [b - a for a, b in zip(cu_q, cu_q[1:])]
    lens_k = [b - a for a, b in zip(cu_k, cu_k[1:])]
    runs = equal_length_runs(lens_q, lens_k)
    op = fused_varlen_op() if q.device.type == "cuda" and not top_left else None
    path = choose_varlen_path(q.device.type, q.dtype, q.shape[-1], dropout_p, len(runs),
                              0 in lens_q or 0 in lens_k, op is not None)
    if path == "fused":
        return fused_varlen(q, k, v, cu_q, cu_k, scale, window, op)
    out = None
    for first, stop in runs:
        lq, lk, n = lens_q[first], lens_k[first], stop - first
        q0, k0 = cu_q[first], cu_k[first]
        if lq == 0:
            continue
        if lk == 0:  # nothing to attend to: flash-attn leaves these rows at 0
            res = q.new_zeros(n, lq, q.shape[1], v.shape[-1])
        else:
            res = sdpa_dense(q[q0:q0 + n * lq].view(n, lq, *q.shape[1:]),
                             k[k0:k0 + n * lk].view(n, lk, *k.shape[1:]),
                             v[k0:k0 + n * lk].view(n, lk, *v.shape[1:]), scale, dropout_p,
                             window, top_left)
        res = res.reshape(n * lq, q.shape[1], v.shape[-1])
        if len(runs) == 1:
            return res
        if out is None:
            out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
        out[q0:q0 + n * lq] = res
    return out if out is not None else q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])


# --------------------------------------------------------------------------- NFA
def nfa_dense(nfa, q, k, v, scale, dropout_p, window):
    """flash_attn_func through NFA in BSND: q (B, Sq, N, D) -> (B, Sq, N, D)."""
    out = nfa(q, k, v, head_num=q.shape[2], input_layout="BSND", scale=scale,
              keep_prob=1.0 - float(dropout_p), **nfa_sparse_arguments(window, q.device))[0]
    blind = _blind_rows(q.shape[1], k.shape[1], window)
    return _zero_rows(out, [(0, blind)] if blind else [], row_axis=1)


def nfa_varlen(nfa, q, k, v, cu_q, cu_k, scale, dropout_p, window, top_left=False):
    """flash_attn_varlen_func through NFA in TND; ``cu_*``: host lengths with a leading 0."""
    cu_q, cu_k = list(cu_q), list(cu_k)
    sparse = ({"atten_mask": compressed_causal_mask(q.device), "sparse_mode": 2} if top_left
              else nfa_sparse_arguments(window, q.device))
    out = nfa(q, k, v, head_num=q.shape[1], input_layout="TND", scale=scale,
              keep_prob=1.0 - float(dropout_p), actual_seq_qlen=cu_q[1:],
              actual_seq_kvlen=cu_k[1:], **sparse)[0]
    spans = [(q0, q0 + _blind_rows(q1 - q0, k1 - k0, window, top_left))
             for q0, q1, k0, k1 in zip(cu_q, cu_q[1:], cu_k, cu_k[1:])]
    return _zero_rows(out, [span for span in spans if span[1] > span[0]], row_axis=0)


# --------------------------------------------------------------------------- argument checks
def _check_options(func, softcap, alibi_slopes, return_attn_probs, dropout_p):
    if softcap:
        raise _unsupported(func, "softcap", softcap, "neither NPU fusion attention nor SDPA "
                                                     "has a logit soft-cap")
    if alibi_slopes is not None:
        raise _unsupported(func, "alibi_slopes", "<tensor>", "add the ALiBi bias to an explicit "
                                                             "attention mask instead")
    if return_attn_probs:
        raise _unsupported(func, "return_attn_probs", return_attn_probs,
                           "the fused kernels do not return the softmax; call with "
                           "return_attn_probs=False or use eager attention to inspect it")
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"{func}: dropout_p must be in [0, 1), got {dropout_p!r}")


def _check_heads(func, q, k, v, dims):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() != dims:
            shape = "(batch, seqlen, nheads, headdim)" if dims == 4 else "(total_tokens, nheads, headdim)"
            raise ValueError(f"{func}: {name} must be {shape}, got shape {tuple(tensor.shape)}")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"{func}: k {tuple(k.shape)} and v {tuple(v.shape)} disagree")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{func}: q head dim {q.shape[-1]} != k head dim {k.shape[-1]}")
    heads_q, heads_k = q.shape[-2], k.shape[-2]
    if heads_k == 0 or heads_q % heads_k:
        raise ValueError(f"{func}: number of q heads ({heads_q}) must be a multiple of "
                         f"number of k/v heads ({heads_k})")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"{func}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if dims == 4 and q.shape[0] != k.shape[0]:
        raise ValueError(f"{func}: batch of q ({q.shape[0]}) != batch of k ({k.shape[0]})")


def _check_packed(func, name, tensor, dims, index, count):
    if tensor.dim() != dims or tensor.shape[index] != count:
        raise ValueError(f"{func}: {name} must hold {count} tensors stacked on axis {index} of "
                         f"{dims}, got shape {tuple(tensor.shape)}")


# --------------------------------------------------------------------------- flash-attn API
class FlashAttention:
    """flash-attn's functions bound to one path and kernel.

    Args:
        path: ``npu``, ``sdpa``, ``auto`` (``npu`` for tensors on an NPU), or None: the
            module's ``BACKEND`` at each call.
        nfa: the NFA-compatible callable of the npu path; None: the module's
            ``npu_fusion_attention``, else torch_npu's.

    Attributes:
        calls: attention calls served, per path.
    """

    def __init__(self, path=None, nfa=None):
        self.path, self.nfa = path, nfa
        self.calls = collections.Counter()

    def fusion_attention(self):
        """The ``npu_fusion_attention`` callable of the npu path."""
        if self.nfa is not None:
            return self.nfa
        if npu_fusion_attention is not None:
            return npu_fusion_attention
        import torch_npu  # only here: a ported model imports on hosts without it

        return torch_npu.npu_fusion_attention

    def route(self, tensor) -> str:
        """``npu`` or ``sdpa`` for attention on ``tensor``."""
        path = BACKEND if self.path is None else self.path
        if path not in ("auto", "npu", "sdpa"):
            raise ValueError(f"FLASH_ATTN_ASCEND_BACKEND={path!r}: expected auto, npu or sdpa")
        if path != "auto":
            return path
        return "npu" if tensor.device.type == "npu" else "sdpa"

    def _dense(self, q, k, v, dropout_p, softmax_scale, causal, window_size):
        window = resolve_window(causal, window_size)
        scale = _scale(softmax_scale, q)
        path = self.route(q)
        self.calls[path] += 1
        if path == "sdpa":
            return sdpa_dense(q, k, v, scale, dropout_p, window)
        return nfa_dense(self.fusion_attention(), q, k, v, scale, dropout_p, window)

    def _varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                window_size, top_left=False):
        window = resolve_window(causal, window_size)
        scale = _scale(softmax_scale, q)
        cu_q = host_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        cu_k = cu_q if cu_seqlens_k is cu_seqlens_q else host_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
        if len(cu_q) != len(cu_k):
            raise ValueError(f"cu_seqlens_q has {len(cu_q) - 1} sequences, "
                             f"cu_seqlens_k has {len(cu_k) - 1}")
        if cu_q[-1] != q.shape[0] or cu_k[-1] != k.shape[0]:
            raise ValueError(f"cu_seqlens_q/k end at {cu_q[-1]}/{cu_k[-1]} but q/k hold "
                             f"{q.shape[0]}/{k.shape[0]} tokens")
        path = self.route(q)
        self.calls[path] += 1
        if path == "sdpa":
            return sdpa_varlen(q, k, v, cu_q, cu_k, scale, dropout_p, window, top_left)
        return nfa_varlen(self.fusion_attention(), q, k, v, cu_q, cu_k, scale, dropout_p, window,
                          top_left)

    def flash_attn_func(self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=False, return_attn_probs=False):
        """q: (B, Sq, N, D); k, v: (B, Sk, Nkv, D) -> (B, Sq, N, D)."""
        _check_options("flash_attn_func", softcap, alibi_slopes, return_attn_probs, dropout_p)
        _check_heads("flash_attn_func", q, k, v, 4)
        return self._dense(q, k, v, dropout_p, softmax_scale, causal, window_size)

    def flash_attn_qkvpacked_func(self, qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                                  window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                  deterministic=False, return_attn_probs=False):
        """qkv: (B, S, 3, N, D) -> (B, S, N, D)."""
        _check_packed("flash_attn_qkvpacked_func", "qkv", qkv, 5, 2, 3)
        return self.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p,
                                    softmax_scale, causal, window_size, softcap, alibi_slopes,
                                    deterministic, return_attn_probs)

    def flash_attn_kvpacked_func(self, q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                                 window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                 deterministic=False, return_attn_probs=False):
        """q: (B, Sq, N, D); kv: (B, Sk, 2, Nkv, D) -> (B, Sq, N, D)."""
        _check_packed("flash_attn_kvpacked_func", "kv", kv, 5, 2, 2)
        return self.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                                    window_size, softcap, alibi_slopes, deterministic,
                                    return_attn_probs)

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False, block_table=None):
        """q: (Tq, N, D); k, v: (Tk, Nkv, D); cu_seqlens_*: (B + 1,) with a leading 0
        (``max_seqlen_*`` are not needed: the lengths come from ``cu_seqlens``)."""
        func = "flash_attn_varlen_func"
        _check_options(func, softcap, alibi_slopes, return_attn_probs, dropout_p)
        if block_table is not None:
            raise _unsupported(func, "block_table", "<tensor>",
                               "paged KV caches are not supported; pass contiguous k/v")
        _check_heads(func, q, k, v, 3)
        return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                            window_size)

    def flash_attn_varlen_qkvpacked_func(self, qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                         softmax_scale=None, causal=False, window_size=(-1, -1),
                                         softcap=0.0, alibi_slopes=None, deterministic=False,
                                         return_attn_probs=False):
        """qkv: (T, 3, N, D) -> (T, N, D)."""
        _check_packed("flash_attn_varlen_qkvpacked_func", "qkv", qkv, 4, 1, 3)
        return self.flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens,
                                           max_seqlen, max_seqlen, dropout_p, softmax_scale,
                                           causal, window_size, softcap, alibi_slopes,
                                           deterministic, return_attn_probs)

    def flash_attn_varlen_kvpacked_func(self, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                        causal=False, window_size=(-1, -1), softcap=0.0,
                                        alibi_slopes=None, deterministic=False,
                                        return_attn_probs=False):
        """q: (Tq, N, D); kv: (Tk, 2, Nkv, D) -> (Tq, N, D)."""
        _check_packed("flash_attn_varlen_kvpacked_func", "kv", kv, 4, 1, 2)
        return self.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                           max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                                           causal, window_size, softcap, alibi_slopes,
                                           deterministic, return_attn_probs)

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                                rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                                cache_leftpad=None, block_table=None, softmax_scale=None,
                                causal=False, window_size=(-1, -1), softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                                return_softmax_lse=False):
        """Decoding over a contiguous KV cache: new ``k``/``v`` are written in place at
        ``cache_seqlens`` (per sample), then attended with ``causal`` / ``window_size``.
        Rotary, paged or indexed caches raise :class:`FlashAttnUnsupported`."""
        func = "flash_attn_with_kvcache"
        _check_options(func, softcap, alibi_slopes, False, 0.0)
        if return_softmax_lse:
            raise _unsupported(func, "return_softmax_lse", return_softmax_lse,
                               "the fused kernels here do not return the log-sum-exp")
        for option, value, hint in (
            ("rotary_cos", rotary_cos, "apply flash_attn.layers.rotary.apply_rotary_emb to q "
                                       "and k first, then call without rotary_cos/rotary_sin"),
            ("rotary_sin", rotary_sin, "apply flash_attn.layers.rotary.apply_rotary_emb first"),
            ("cache_batch_idx", cache_batch_idx, "index k_cache/v_cache yourself (k_cache[idx])"),
            ("cache_leftpad", cache_leftpad, "use right-aligned caches with cache_seqlens"),
            ("block_table", block_table, "paged caches are not supported; use a contiguous "
                                         "cache, or transformers' generate() with sdpa"),
        ):
            if value is not None:
                raise _unsupported(func, option, "<tensor>", hint)
        _check_heads(func, q, k_cache, v_cache, 4)
        batch, slots = q.shape[0], k_cache.shape[1]
        if (k is None) != (v is None):
            raise ValueError(f"{func}: pass both k and v, or neither")
        if cache_seqlens is None:
            if k is not None:
                raise ValueError(f"{func}: cache_seqlens is required when appending k/v")
            lengths = [slots] * batch
        elif isinstance(cache_seqlens, int):
            lengths = [int(cache_seqlens)] * batch
        else:
            lengths = [int(x) for x in cache_seqlens.reshape(-1).tolist()]
            if len(lengths) != batch:
                raise ValueError(f"{func}: cache_seqlens has {len(lengths)} entries for batch {batch}")
        new = 0 if k is None else k.shape[1]
        totals = [n + new for n in lengths]
        if max(totals) > slots:
            raise ValueError(f"{func}: cache of {slots} slots cannot hold "
                             f"cache_seqlens + new tokens = {max(totals)}")
        if k is not None:
            with torch.no_grad():
                for b, n in enumerate(lengths):
                    k_cache[b, n:n + new] = k[b]
                    v_cache[b, n:n + new] = v[b]
        if len(set(totals)) == 1:
            return self.flash_attn_func(q, k_cache[:, :totals[0]], v_cache[:, :totals[0]], 0.0,
                                        softmax_scale, causal, window_size)
        return torch.cat([self.flash_attn_func(q[b:b + 1], k_cache[b:b + 1, :t], v_cache[b:b + 1, :t],
                                               0.0, softmax_scale, causal, window_size)
                          for b, t in enumerate(totals)])

    # flash-attn 1.x: its causal mask is aligned top-left (NFA ``sparse_mode=2``)
    def flash_attn_unpadded_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, dropout_p, softmax_scale=None, causal=False,
                                 return_attn_probs=False, deterministic=False):
        """flash-attn 1.x varlen: q (Tq, N, D), k/v (Tk, Nkv, D), top-left causal."""
        _check_options("flash_attn_unpadded_func", 0.0, None, return_attn_probs, dropout_p)
        _check_heads("flash_attn_unpadded_func", q, k, v, 3)
        return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                            (-1, -1), top_left=bool(causal))

    def flash_attn_unpadded_qkvpacked_func(self, qkv, cu_seqlens, max_seqlen, dropout_p,
                                           softmax_scale=None, causal=False,
                                           return_attn_probs=False, deterministic=False):
        """flash-attn 1.x packed varlen: qkv (T, 3, N, D)."""
        return self.flash_attn_unpadded_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens,
                                             cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                             softmax_scale, causal, return_attn_probs)

    def flash_attn_unpadded_kvpacked_func(self, q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                          max_seqlen_k, dropout_p, softmax_scale=None,
                                          causal=False, return_attn_probs=False,
                                          deterministic=False):
        """flash-attn 1.x: q (Tq, N, D), kv (Tk, 2, Nkv, D)."""
        return self.flash_attn_unpadded_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k,
                                             max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                                             causal, return_attn_probs)


#: The functions under flash-attn's names: ``BACKEND`` and ``npu_fusion_attention`` are
#: read at each call, so setting them after the import takes effect.
_MODULE_PATH = FlashAttention()
CALLS = _MODULE_PATH.calls
flash_attn_func = _MODULE_PATH.flash_attn_func
flash_attn_qkvpacked_func = _MODULE_PATH.flash_attn_qkvpacked_func
flash_attn_kvpacked_func = _MODULE_PATH.flash_attn_kvpacked_func
flash_attn_varlen_func = _MODULE_PATH.flash_attn_varlen_func
flash_attn_varlen_qkvpacked_func = _MODULE_PATH.flash_attn_varlen_qkvpacked_func
flash_attn_varlen_kvpacked_func = _MODULE_PATH.flash_attn_varlen_kvpacked_func
flash_attn_with_kvcache = _MODULE_PATH.flash_attn_with_kvcache
flash_attn_unpadded_func = _MODULE_PATH.flash_attn_unpadded_func
flash_attn_unpadded_qkvpacked_func = _MODULE_PATH.flash_attn_unpadded_qkvpacked_func
flash_attn_unpadded_kvpacked_func = _MODULE_PATH.flash_attn_unpadded_kvpacked_func


# --------------------------------------------------------------------------- bert_padding
class IndexFirstAxis(torch.autograd.Function):
    """``input[indices]`` on the first axis, with a scatter backward."""

    @staticmethod
    def forward(ctx, input, indices):  # noqa: A002 - flash-attn's argument name
        if input.dim() < 2:
            raise ValueError(f"index_first_axis: input must have >= 2 dims, got {input.dim()}")
        ctx.save_for_backward(indices)
        ctx.first_axis_dim = input.shape[0]
        return input[indices]

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        grad_input = grad_output.new_zeros((ctx.first_axis_dim, *grad_output.shape[1:]))
        grad_input[indices] = grad_output
        return grad_input, None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    """``values`` scattered into a zero tensor of ``first_axis_dim`` rows."""

    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        if indices.dim() != 1:
            raise ValueError(f"index_put_first_axis: indices must be 1-D, got {indices.dim()}-D")
        ctx.save_for_backward(indices)
        output = values.new_zeros((first_axis_dim, *values.shape[1:]))
        output[indices] = values
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        return grad_output[indices], None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(B, S, ...) and a (B, S) mask of 1 = token (``unused_mask``: allocated, unused,
    kept) -> the tokens packed (T, ...), their indices, ``cu_seqlens`` (B + 1, int32),
    the longest length, and (from flash-attn 2.7 on, ``UNPAD_INPUT_RETURNS == 5``) the
    used lengths of the batch."""
    used = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens = used.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(used.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = index_first_axis(hidden_states.reshape(-1, *hidden_states.shape[2:]), indices)
    longest = int(seqlens.max().item()) if seqlens.numel() else 0
    if UNPAD_INPUT_RETURNS == 4:
        return packed, indices, cu_seqlens, longest
    return packed, indices, cu_seqlens, longest, attention_mask.sum(dim=-1, dtype=torch.int32)


def unpad_input_for_concatenated_sequences(hidden_states, attention_mask_in_length):
    """Unpad rows that each concatenate several samples: ``attention_mask_in_length``
    (B, S) lists each row's sample lengths, then zeros (``[[2, 3, 0, 0, 0, 0], ...]``).
    Returns the packed tokens, their indices, ``cu_seqlens`` and the longest sample."""
    length = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    positions = torch.arange(seqlen, device=length.device, dtype=length.dtype)
    attention_mask_2d = positions.expand(len(length), seqlen) < length.unsqueeze(1)
    real = torch.nonzero(attention_mask_in_length.flatten(), as_tuple=False).flatten()
    seqlens = attention_mask_in_length.flatten()[real]
    indices = torch.nonzero(attention_mask_2d.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = index_first_axis(hidden_states.reshape(-1, *hidden_states.shape[2:]), indices)
    return packed, indices, cu_seqlens, int(seqlens.max().item())


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse of ``unpad_input``: (T, ...) -> (batch, seqlen, ...), zeros elsewhere."""
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])


# --------------------------------------------------------------------------- rotary
def _rotary_positions(x, seqlen_offsets, cu_seqlens):
    """Rotary position of every token: (B, S) for (B, S, H, D) input, (T,) when packed."""
    if cu_seqlens is None:
        batch, seqlen = x.shape[0], x.shape[1]
        positions = torch.arange(seqlen, device=x.device).unsqueeze(0).expand(batch, seqlen)
        if isinstance(seqlen_offsets, torch.Tensor):
            if seqlen_offsets.numel() not in (1, batch):
                raise ValueError(f"seqlen_offsets must be an int or have {batch} entries, "
                                 f"got shape {tuple(seqlen_offsets.shape)}")
            return positions + seqlen_offsets.reshape(-1, 1).to(x.device, torch.long)
        return positions + int(seqlen_offsets)
    cu = cu_seqlens.to(x.device, torch.long)
    if int(cu[-1]) != x.shape[0]:
        raise ValueError(f"cu_seqlens ends at {int(cu[-1])} but x has {x.shape[0]} tokens")
    tokens = torch.arange(x.shape[0], device=x.device)
    sequence = torch.searchsorted(cu[1:], tokens, right=True)
    if isinstance(seqlen_offsets, torch.Tensor):
        return tokens - cu[sequence] + seqlen_offsets.to(x.device, torch.long).reshape(-1)[sequence]
    return tokens - cu[sequence] + int(seqlen_offsets)


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    """flash-attn's rotary embedding in plain torch: x (B, S, H, D), or (T, H, D) with
    ``cu_seqlens`` (positions restart per sequence, from ``seqlen_offsets``); cos/sin
    (S_rotary, rotary_dim / 2). The first ``rotary_dim`` channels turn, halves
    (GPT-NeoX) or, ``interleaved``, even/odd pairs (GPT-J); in float32, as the kernel."""
    rotary_dim = cos.shape[-1] * 2
    if rotary_dim > x.shape[-1]:
        raise ValueError(f"rotary_dim {rotary_dim} (2 * cos.shape[-1]) exceeds headdim {x.shape[-1]}")
    if sin.shape != cos.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must match")
    positions = _rotary_positions(x, seqlen_offsets, cu_seqlens)
    # Like the Triton kernel, positions past the table get cos=1, sin=0 (no rotation);
    # checking on the host instead would cost a device sync per call.
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


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False,
                          seqlen_offsets=0, num_heads_q=None):
    """In place on Q and K of ``qkv`` (B, S, 3, H, D) or (B, S, Hq + 2 Hk, D)."""
    if qkv.dim() == 5:
        q, k = qkv[:, :, 0], qkv[:, :, 1]
    else:
        if num_heads_q is None:
            raise ValueError("apply_rotary_emb_qkv_: num_heads_q is required for 4-D qkv")
        num_heads_k = (qkv.shape[2] - num_heads_q) // 2
        q, k = qkv[:, :, :num_heads_q], qkv[:, :, num_heads_q:num_heads_q + num_heads_k]
    apply_rotary_emb(q, cos, sin, interleaved, True, seqlen_offsets)
    apply_rotary_emb(k, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k,
                     interleaved, True, seqlen_offsets)
    return qkv


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets=0):
    """In place on K of ``kv`` (B, S, 2, H, D)."""
    apply_rotary_emb(kv[:, :, 0], cos, sin, interleaved, True, seqlen_offsets)
    return kv
