"""flash-attn's public functions, bound to one backend.

``FlashAttnAPI(backend)`` exposes the flash-attn 2.x call surface with flash-attn's
exact signatures, so that remote model code written against flash-attn runs
unchanged (through :mod:`hyport_lib.npu_attention.shim`). Backends:

* ``npu``: ``torch_npu.npu_fusion_attention`` (see :mod:`hyport_lib.npu_attention.npu_ops`).
* ``npu-emulated``: the same argument conversion, executed by hyport's CPU emulation
  of the NFA contract, so that the NPU mapping can be checked on any host.
* ``sdpa`` (also ``cpu``/``cuda``): ``torch.nn.functional.scaled_dot_product_attention``
  (see :mod:`hyport_lib.npu_attention.sdpa_ops`).
* ``auto``: ``npu`` when the backend seam finds an NPU, else ``sdpa``.

Semantics kept from flash-attn: ``softmax_scale=None`` means 1/sqrt(headdim); causal
with ``seqlen_q != seqlen_k`` is aligned bottom-right; ``window_size=(left, right)``
with -1 = unbounded; ``dropout_p`` is applied whenever it is > 0 (callers pass 0 in
eval, as with flash-attn); GQA/MQA through fewer key/value heads; rows that see no key
are 0. Options with no equivalent here (``softcap``, ``alibi_slopes``,
``return_attn_probs``, paged ``block_table``, ...) raise :class:`FlashAttnUnsupported`
naming the option. Inputs flash-attn itself would reject but that are well defined
(fp32 tensors, CPU tensors) are accepted.
"""

from __future__ import annotations

import math

import torch

from hyport_lib.backend import get_backend, import_torch_npu
# The module, not its function: tests count the emulated calls by patching the module.
from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention.nfa_constants import compressed_causal_mask
from hyport_lib.npu_attention.npu_ops import nfa_bsnd, nfa_tnd
from hyport_lib.npu_attention.sdpa_ops import resolve_window, sdpa_bsnd, sdpa_varlen
from hyport_lib.npu_attention.seqlens import host_cu_seqlens

BACKEND_CHOICES = ("auto", "npu", "npu-emulated", "sdpa", "cpu", "cuda")


class FlashAttnUnsupported(NotImplementedError):
    """A flash-attn option that hyport's drop-in cannot honour on this backend."""


def resolve_backend(backend: str = "auto") -> str:
    """Map a requested backend to ``npu``, ``npu-emulated`` or ``sdpa``."""
    name = (backend or "auto").lower().strip()
    if name not in BACKEND_CHOICES:
        raise ValueError(f"backend={backend!r}: expected one of {', '.join(BACKEND_CHOICES)}")
    if name == "auto":
        name = get_backend().kind
    if name in ("cpu", "cuda", "sdpa"):
        return "sdpa"
    return name


def _unsupported(func: str, option: str, value, hint: str = "") -> FlashAttnUnsupported:
    msg = f"{func}({option}={value!r}) is not supported by hyport's flash-attn drop-in"
    return FlashAttnUnsupported(msg + (f"; {hint}" if hint else ""))


class FlashAttnAPI:
    """flash-attn functions bound to one backend.

    Args:
        backend: ``auto``, ``npu``, ``npu-emulated``, ``sdpa``, ``cpu`` or ``cuda``.

    Attributes:
        backend: the resolved backend (``npu``, ``npu-emulated`` or ``sdpa``).
        requested: the backend string as given.
        calls: attention calls served so far. A "ported" model whose forward adds none
            never reached the swapped attention (e.g. remote code that runs its flash path
            only ``if q.is_cuda``): the model-level check reports it.
    """

    def __init__(self, backend: str = "auto"):
        self.requested = backend
        self.backend = resolve_backend(backend)
        self.calls = 0

    def __repr__(self) -> str:
        return f"FlashAttnAPI(backend={self.backend!r})"

    # --- plumbing ------------------------------------------------------------------
    def _nfa(self):
        """The ``npu_fusion_attention`` callable this instance dispatches to."""
        if self.backend == "npu-emulated":
            return emulation.npu_fusion_attention
        torch_npu, error = import_torch_npu()
        if torch_npu is None:
            raise RuntimeError(
                "FlashAttnAPI(backend='npu') needs torch_npu: "
                f"{error or 'not installed'}; use backend='npu-emulated' to run the NPU "
                "argument conversion on CPU, or backend='sdpa'")
        return torch_npu.npu_fusion_attention

    @staticmethod
    def _check_common(func, softcap, alibi_slopes, return_attn_probs, dropout_p):
        if softcap:
            raise _unsupported(func, "softcap", softcap,
                               "neither NPU fusion attention nor SDPA has a logit soft-cap")
        if alibi_slopes is not None:
            raise _unsupported(func, "alibi_slopes", "<tensor>",
                               "add the ALiBi bias to an explicit attention mask instead")
        if return_attn_probs:
            raise _unsupported(func, "return_attn_probs", return_attn_probs,
                               "the fused kernels do not return the softmax; call with "
                               "return_attn_probs=False or use eager attention to inspect it")
        if not 0.0 <= float(dropout_p) < 1.0:
            raise ValueError(f"{func}: dropout_p must be in [0, 1), got {dropout_p!r}")

    @staticmethod
    def _check_heads(func, q, k, v, layout_dims: int):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != layout_dims:
                shape = "(batch, seqlen, nheads, headdim)" if layout_dims == 4 else \
                    "(total_tokens, nheads, headdim)"
                raise ValueError(f"{func}: {name} must be {shape}, got shape {tuple(t.shape)}")
        if k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"{func}: k {tuple(k.shape)} and v {tuple(v.shape)} disagree")
        if q.shape[-1] != k.shape[-1]:
            raise ValueError(f"{func}: q head dim {q.shape[-1]} != k head dim {k.shape[-1]}")
        nq, nk = q.shape[-2], k.shape[-2]
        if nk == 0 or nq % nk:
            raise ValueError(f"{func}: number of q heads ({nq}) must be a multiple of "
                             f"number of k/v heads ({nk})")
        if not (q.dtype == k.dtype == v.dtype):
            raise ValueError(f"{func}: q, k, v must share one dtype, got "
                             f"{q.dtype}, {k.dtype}, {v.dtype}")

    @staticmethod
    def _scale(softmax_scale, q) -> float:
        return 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)

    def _dense(self, q, k, v, dropout_p, softmax_scale, causal, window_size):
        self.calls += 1
        window = resolve_window(causal, window_size)
        scale = self._scale(softmax_scale, q)
        if self.backend == "sdpa":
            return sdpa_bsnd(q, k, v, scale, dropout_p, window)
        return nfa_bsnd(self._nfa(), q, k, v, scale, dropout_p, window)

    def _varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale, causal,
                window_size):
        self.calls += 1
        window = resolve_window(causal, window_size)
        scale = self._scale(softmax_scale, q)
        cu_q = host_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        cu_k = cu_q if cu_seqlens_k is cu_seqlens_q else host_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
        if len(cu_q) != len(cu_k):
            raise ValueError(f"cu_seqlens_q has {len(cu_q) - 1} sequences, "
                             f"cu_seqlens_k has {len(cu_k) - 1}")
        if cu_q[-1] != q.shape[0] or cu_k[-1] != k.shape[0]:
            raise ValueError(f"cu_seqlens_q/k end at {cu_q[-1]}/{cu_k[-1]} but q/k hold "
                             f"{q.shape[0]}/{k.shape[0]} tokens")
        if self.backend == "sdpa":
            return sdpa_varlen(q, k, v, cu_q, cu_k, scale, dropout_p, window)
        return nfa_tnd(self._nfa(), q, k, v, cu_q, cu_k, scale, dropout_p, window)

    # --- flash-attn 2.x surface ------------------------------------------------------
    def flash_attn_func(self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=False, return_attn_probs=False):
        """q: (B, Sq, N, D); k, v: (B, Sk, Nkv, D) -> (B, Sq, N, D)."""
        self._check_common("flash_attn_func", softcap, alibi_slopes, return_attn_probs, dropout_p)
        self._check_heads("flash_attn_func", q, k, v, 4)
        if q.shape[0] != k.shape[0]:
            raise ValueError(f"flash_attn_func: batch of q ({q.shape[0]}) != batch of k ({k.shape[0]})")
        return self._dense(q, k, v, dropout_p, softmax_scale, causal, window_size)

    def flash_attn_qkvpacked_func(self, qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                                  window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                  deterministic=False, return_attn_probs=False):
        """qkv: (B, S, 3, N, D) -> (B, S, N, D)."""
        if qkv.dim() != 5 or qkv.shape[2] != 3:
            raise ValueError(f"flash_attn_qkvpacked_func: qkv must be (batch, seqlen, 3, nheads, "
                             f"headdim), got {tuple(qkv.shape)}")
        return self.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p,
                                    softmax_scale, causal, window_size, softcap, alibi_slopes,
                                    deterministic, return_attn_probs)

    def flash_attn_kvpacked_func(self, q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                                 window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                 deterministic=False, return_attn_probs=False):
        """q: (B, Sq, N, D); kv: (B, Sk, 2, Nkv, D) -> (B, Sq, N, D)."""
        if kv.dim() != 5 or kv.shape[2] != 2:
            raise ValueError(f"flash_attn_kvpacked_func: kv must be (batch, seqlen, 2, nheads_k, "
                             f"headdim), got {tuple(kv.shape)}")
        return self.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal,
                                    window_size, softcap, alibi_slopes, deterministic,
                                    return_attn_probs)

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False, block_table=None):
        """q: (Tq, N, D); k, v: (Tk, Nkv, D); cu_seqlens_*: (B+1,) int32 with leading 0.

        ``max_seqlen_*`` are accepted and not needed (lengths come from ``cu_seqlens``).
        """
        func = "flash_attn_varlen_func"
        self._check_common(func, softcap, alibi_slopes, return_attn_probs, dropout_p)
        if block_table is not None:
            raise _unsupported(func, "block_table", "<tensor>",
                               "paged KV caches are not supported; pass contiguous k/v")
        self._check_heads(func, q, k, v, 3)
        return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale,
                            causal, window_size)

    def flash_attn_varlen_qkvpacked_func(self, qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                         softmax_scale=None, causal=False, window_size=(-1, -1),
                                         softcap=0.0, alibi_slopes=None, deterministic=False,
                                         return_attn_probs=False):
        """qkv: (T, 3, N, D) -> (T, N, D)."""
        if qkv.dim() != 4 or qkv.shape[1] != 3:
            raise ValueError("flash_attn_varlen_qkvpacked_func: qkv must be (total, 3, nheads, "
                             f"headdim), got {tuple(qkv.shape)}")
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
        if kv.dim() != 4 or kv.shape[1] != 2:
            raise ValueError("flash_attn_varlen_kvpacked_func: kv must be (total, 2, nheads_k, "
                             f"headdim), got {tuple(kv.shape)}")
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
        """Decode-time attention over a contiguous KV cache, flash-attn semantics.

        Supported: appending new ``k``/``v`` in place at ``cache_seqlens``, per-sample cache
        lengths, ``causal``, ``window_size``, ``softmax_scale``. Rotary, paged or indexed
        caches raise :class:`FlashAttnUnsupported` saying what to do instead.
        """
        func = "flash_attn_with_kvcache"
        self._check_common(func, softcap, alibi_slopes, False, 0.0)
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
        self._check_heads(func, q, k_cache, v_cache, 4)
        batch, cache_len = q.shape[0], k_cache.shape[1]
        if k_cache.shape[0] != batch:
            raise ValueError(f"{func}: k_cache batch {k_cache.shape[0]} != q batch {batch}")
        if (k is None) != (v is None):
            raise ValueError(f"{func}: pass both k and v, or neither")
        if cache_seqlens is None:
            if k is not None:
                raise ValueError(f"{func}: cache_seqlens is required when appending k/v")
            lengths = [cache_len] * batch
        elif isinstance(cache_seqlens, int):
            lengths = [int(cache_seqlens)] * batch
        else:
            lengths = [int(x) for x in cache_seqlens.reshape(-1).tolist()]
            if len(lengths) != batch:
                raise ValueError(f"{func}: cache_seqlens has {len(lengths)} entries for batch {batch}")
        new = 0 if k is None else k.shape[1]
        totals = [n + new for n in lengths]
        if max(totals) > cache_len:
            raise ValueError(f"{func}: cache of {cache_len} slots cannot hold "
                             f"cache_seqlens + new tokens = {max(totals)}")
        if k is not None:
            with torch.no_grad():
                for b, n in enumerate(lengths):
                    k_cache[b, n:n + new] = k[b]
                    v_cache[b, n:n + new] = v[b]
        if len(set(totals)) == 1:
            t = totals[0]
            return self.flash_attn_func(q, k_cache[:, :t], v_cache[:, :t], 0.0, softmax_scale,
                                        causal, window_size)
        outs = [self.flash_attn_func(q[b:b + 1], k_cache[b:b + 1, :t], v_cache[b:b + 1, :t], 0.0,
                                     softmax_scale, causal, window_size)
                for b, t in enumerate(totals)]
        return torch.cat(outs)

    # --- flash-attn 1.x names (causal aligned top-left, as in 1.x) -----------------
    def flash_attn_unpadded_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, dropout_p, softmax_scale=None, causal=False,
                                 return_attn_probs=False, deterministic=False):
        """flash-attn 1.x varlen. Causal with seqlen_q != seqlen_k is aligned top-left."""
        self._check_common("flash_attn_unpadded_func", 0.0, None, return_attn_probs, dropout_p)
        self._check_heads("flash_attn_unpadded_func", q, k, v, 3)
        if not causal:
            return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale,
                                False, (-1, -1))
        return self._varlen_top_left(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p,
                                     softmax_scale)

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

    def _varlen_top_left(self, q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale):
        """Top-left causal per sequence: a bottom-right band shifted by Sk - Sq."""
        cu_q = host_cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        cu_k = host_cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
        if all(b - a == d - c for a, b, c, d in zip(cu_q, cu_q[1:], cu_k, cu_k[1:])):
            return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, dropout_p, softmax_scale,
                                True, (-1, -1))
        if self.backend != "sdpa":
            return self._nfa()(q, k, v, head_num=q.shape[1], input_layout="TND",
                               scale=self._scale(softmax_scale, q), keep_prob=1.0 - dropout_p,
                               atten_mask=compressed_causal_mask(q.device), sparse_mode=2,
                               actual_seq_qlen=list(cu_q[1:]), actual_seq_kvlen=list(cu_k[1:]))[0]
        outs = []
        for (q0, q1), (k0, k1) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
            # top-left diagonal = bottom-right band with right = (Sq - Sk)
            shift = (q1 - q0) - (k1 - k0)
            window = (-1, shift) if shift >= 0 else None
            if window is None:  # Sk > Sq: top-left causal hides the tail keys
                outs.append(self._varlen(q[q0:q1], k[k0:k0 + (q1 - q0)], v[k0:k0 + (q1 - q0)],
                                         [0, q1 - q0], [0, q1 - q0], dropout_p, softmax_scale,
                                         True, (-1, -1)))
            else:
                outs.append(self._varlen(q[q0:q1], k[k0:k1], v[k0:k1], [0, q1 - q0], [0, k1 - k0],
                                         dropout_p, softmax_scale, False, window))
        return torch.cat(outs) if outs else q.new_zeros(0, q.shape[1], v.shape[-1])
