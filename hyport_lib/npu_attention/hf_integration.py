"""hyport attention as a transformers ``attn_implementation`` (transformers 4.57 and 5.x; what
it accepts and refuses: docs/attention_swap.md). The SDPA mask builder is registered under the
same name, so the model hands it 4-D boolean masks; one name serves a text model, a vision
tower, or a composite model per sub-config. The function follows transformers'
``sdpa_attention_forward`` contract (``attention_mask`` may come by keyword, as in Qwen2-VL's
vision attention) and handles:

* padded batches: the 4-D mask (bool True = attend, or additive float) is used as is;
  for the NPU it becomes NFA's ``atten_mask`` (True = masked) in BNSD;
* packed batches (``position_ids`` restarting at 0, or flash-style ``cu_seq_lens_q``):
  computed as varlen (NPU: TND with ``actual_seq_qlen``; SDPA: batched calls per run of
  equal lengths) once the model's 4-D mask is checked to say exactly "causal within each
  packed sequence" (otherwise it is used densely). Without any mask (transformers skips
  it when nothing is padded, and ignores packing with a cache), restarting
  ``position_ids`` still mean packing, as with FlashAttention-2;
* bidirectional spans, as Mixture-of-Transformers VLMs (the seed's HY-Embodied) attend
  within one image: the ``hyport_span_ids=`` keyword of the model's ``forward``
  (``(batch, seqlen)``: 0 for text, one positive id per span, unique within a row) lets
  same-span tokens attend both ways on top of whatever mask the model built, never across
  packed sequences. transformers hands unknown keywords down to the attention function
  (Llama-style models do), and gradient checkpointing re-runs forward with the same ones.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.npu_attention.names import NAME_OF_BACKEND
from hyport_lib.npu_attention.reference import cumulative_lengths
from hyport_lib.port.generated.flash_attn_ascend import (HOST_CACHE, FlashAttnUnsupported,
                                                         IdentityCache, attend_band,
                                                         host_cu_seqlens, nfa_sparse_arguments,
                                                         nfa_varlen, repeat_kv, resolve_window,
                                                         sdpa_dense, sdpa_varlen)

logger = logging.getLogger(__name__)

#: name -> the FlashAttnAPI behind it (its ``calls`` count what the models used).
REGISTERED: dict[str, FlashAttnAPI] = {}
#: Per-batch derived masks (span overlays, NFA bool masks); entries die with their inputs.
MASK_CACHE = IdentityCache(maxsize=8)

#: Substrings transformers gives a meaning of its own inside attn_implementation names.
_RESERVED = ("flash", "sdpa", "flex_attention", "paged")


def register_hyport_attention(backend: str = "auto", name: Optional[str] = None) -> str:
    """The name for ``attn_implementation=`` (default by backend: :data:`NAME_OF_BACKEND`);
    ValueError for a name holding a word transformers treats specially ("flash" is routed
    into its FlashAttention checks and rejected)."""
    api = FlashAttnAPI(backend)
    name = name or NAME_OF_BACKEND[api.backend]
    reserved = [word for word in _RESERVED if word in name.lower()]
    if reserved:
        raise ValueError(f"name={name!r}: transformers treats names containing "
                         f"{reserved[0]!r} specially (support checks or rejection); "
                         "choose another name")
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(name, make_attention_forward(api))
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    REGISTERED[name] = api
    return name


def make_attention_forward(api: FlashAttnAPI):
    """A partial, so its repr names the backend."""
    return functools.partial(attention_forward, api)


class UnsupportedAttentionArgument(FlashAttnUnsupported):
    """The model handed hyport's attention an argument it does not compute with. Dropping it
    would run a different attention than the model's own (a relative position bias,
    per-token sink logits, a soft cap), so the model is kept on eager instead.
    """


def sdpa_refusal(model) -> Optional[str]:
    """Why ``model`` must not get an SDPA-like kernel, or None: one of its classes (a composite
    model's sub-models included) declares ``_supports_sdpa = False``."""
    classes = {type(m) for m in model.modules() if hasattr(type(m), "_supports_sdpa")
               and isinstance(m, torch.nn.Module)}
    declared = sorted(c.__name__ for c in classes if getattr(c, "_supports_sdpa", None) is False)
    if not declared:
        return None
    return (f"{declared[0]} declares _supports_sdpa = False (its authors say its attention needs "
            f"what an SDPA-like kernel does not take: soft-capping, sinks, a bias on the scores)")


#: Keyword arguments hyport's attention computes with.
UNDERSTOOD_ARGUMENTS = frozenset({
    "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k",
    "cu_seqlens", "max_seqlen", "sliding_window", "hyport_span_ids"})
#: Keyword arguments that carry no input of the attention itself: flags and bookkeeping that
#: transformers forwards from the model's ``forward`` to every layer (``TransformersKwargs``),
#: and processor outputs a composite model passes down unused. Their values never change
#: what attention computes, so they are accepted whatever they hold.
PASSED_THROUGH_ARGUMENTS = frozenset({
    "use_cache", "output_attentions", "output_hidden_states", "output_router_logits",
    "return_dict", "num_items_in_batch", "logits_to_keep", "cache_position", "seq_idx",
    "image_sizes", "layer_idx", "past_key_values", "past_key_value"})


#: What the arguments models are known to pass mean, for the refusal's message.
_KNOWN_MEANINGS = {
    "softcap": "attention logit soft-capping, which",
    "s_aux": "attention sinks (a logit column per head), which",
    "sinks": "attention sinks (a logit column per head), which",
    "position_bias": "a position bias added to the scores, which",
    "alibi_slopes": "ALiBi slopes, which",
}


def check_attention_arguments(module, kwargs: dict) -> None:
    """Refuse every keyword argument hyport's attention would otherwise drop; a value of
    None, 0 or False asks for nothing and passes."""
    for name, value in kwargs.items():
        if name in UNDERSTOOD_ARGUMENTS or name in PASSED_THROUGH_ARGUMENTS:
            continue
        if value is None or (isinstance(value, (bool, int, float)) and not value):
            continue
        meaning = _KNOWN_MEANINGS.get(name, "an argument")
        raise UnsupportedAttentionArgument(
            f"hyport attention: {describe_module(module)} passed {name}={describe_value(value)}, "
            f"{meaning} hyport's attention does not compute with; it is refused rather than "
            f"dropped (that would compute a different attention): use attn_implementation='eager' "
            f"for this model")


def describe_module(module) -> str:
    """``Gemma2Attention (layer 3)``: the layer where the module knows it."""
    layer = getattr(module, "layer_idx", None)
    return f"{type(module).__name__}" + (f" (layer {layer})" if isinstance(layer, int) else "")


def describe_value(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"<tensor {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}>"
    text = repr(value)
    return text if len(text) <= 40 else f"<{type(value).__name__}>"


def attention_forward(api: FlashAttnAPI, module, query, key, value, attention_mask=None,
                      dropout=0.0, scaling=None, is_causal=None, **kwargs):
    api.calls[api.path] += 1
    check_attention_arguments(module, kwargs)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"hyport attention expects (batch, heads, seq, dim) q/k/v, got "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    batch, heads, sq, head_dim = query.shape
    sk = key.shape[2]
    if heads % key.shape[1]:
        raise ValueError(f"hyport attention: {heads} query heads are not a multiple of "
                         f"{key.shape[1]} key/value heads")
    value_dim = value.shape[-1]
    if value_dim != head_dim:
        # MLA (DeepSeek-V2/V3) has a value head dim other than the query/key one; NPU fusion
        # attention takes one head dim for all three. Zero columns change neither the scores
        # (q/k padded: the products gain 0 terms; the scale is passed explicitly) nor the
        # kept output columns (v padded: the extra columns are cropped), as transformers'
        # own flash integration does.
        width = max(head_dim, value_dim)
        query, key, value = (torch.nn.functional.pad(t, (0, width - t.shape[-1])) if t.shape[-1] < width
                             else t for t in (query, key, value))
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    scale = float(scaling) if scaling is not None else head_dim ** -0.5
    dropout = float(dropout or 0.0)
    window = _window(causal, kwargs.get("sliding_window"))
    position_ids = kwargs.get("position_ids")
    span_ids = kwargs.get("hyport_span_ids")
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 4 \
            and attention_mask.shape[-1] > sk:
        attention_mask = attention_mask[..., :sk]

    if span_ids is None and sq == sk:
        segments = _segments(kwargs, position_ids, batch, sq)
        if segments is not None and (attention_mask is None or _mask_is_segment_causal(
                attention_mask, segments, batch, sq, window, position_ids, kwargs)):
            out = _varlen_forward(api, query, key, value, segments, scale, dropout, window)
            return out[..., :value_dim], None

    attend = _attend_mask(attention_mask, batch, sq, sk, window, query)
    if span_ids is not None:
        attend = _with_spans(attend, span_ids, position_ids, sq, sk, window, query)
    if api.backend == "sdpa":
        out = _sdpa_dense(query, key, value, attend, scale, dropout, window)
    else:
        masked = None if attend is None else _nfa_mask(attend)
        out = _nfa_bnsd_masked(api.fusion_attention(), query, key, value, scale, dropout, masked,
                              window).transpose(1, 2)
    return out[..., :value_dim].contiguous(), None


def _window(causal: bool, sliding_window) -> tuple:
    if sliding_window:
        reach = int(sliding_window) - 1  # transformers: key j visible when i - j < sliding_window
        return resolve_window(causal, (reach, -1 if causal else reach))
    return resolve_window(causal, (-1, -1))


def _cu_seqlens(kwargs):
    cu = kwargs.get("cu_seq_lens_q")
    # cu_seqlens: the one-name spelling of vision towers' code (both sides alike)
    return cu if cu is not None else kwargs.get("cu_seqlens")


def _segments(kwargs, position_ids, batch: int, seqlen: int):
    """Packed segment lengths over the flattened (B*S) tokens, or None when not packed."""
    cu = _cu_seqlens(kwargs)
    if cu is not None:  # flash-style kwargs, e.g. DataCollatorWithFlattening
        values = host_cu_seqlens(cu, "cu_seq_lens_q")
        cu_k = kwargs.get("cu_seq_lens_k")
        if cu_k is not None and cu_k is not cu and host_cu_seqlens(cu_k, "cu_seq_lens_k") != values:
            return None
        if values[-1] == batch * seqlen and len(values) - 1 > batch:
            return tuple(b - a for a, b in zip(values, values[1:]))
        return None
    if not isinstance(position_ids, torch.Tensor) or position_ids.dim() not in (1, 2) \
            or position_ids.shape[-1] != seqlen:
        return None
    if position_ids.dim() == 2 and position_ids.shape[0] != batch:
        return None  # one row of positions broadcast over the batch
    segments = packed_segments(position_ids)
    if segments is None or sum(segments) != batch * seqlen:
        return None
    return segments


def packed_segments(position_ids) -> Optional[tuple[int, ...]]:
    """Segment lengths over the flattened ``(B*S,)`` tokens, or None when the batch is not
    packed: every segment (a run where the position grows by exactly 1) must start at 0
    and outnumber the rows, so left-padded generation batches (pads carry position 1) and
    plain batches are not packed. ``position_ids``: 1-D or 2-D, read from the device once
    per tensor (``HOST_CACHE``, which also holds the host copies of ``cu_seqlens``): 24
    layers cost one copy."""

    def compute():
        pos = position_ids if position_ids.dim() == 2 else position_ids.unsqueeze(0)
        rows, length = pos.shape
        if length == 0:
            return None
        first = pos[:, :1] - 1
        starts = torch.diff(pos, prepend=first, dim=-1) != 1
        starts[:, 0] = True
        start_idx = torch.nonzero(starts.reshape(-1)).flatten()
        start_pos = pos.reshape(-1)[start_idx]
        # One small host transfer carries both the boundaries and their first positions.
        idx, first_pos = torch.stack([start_idx, start_pos.to(start_idx.dtype)]).tolist()
        if len(idx) <= rows or any(p != 0 for p in first_pos):
            return None
        ends = idx[1:] + [rows * length]
        return tuple(e - s for s, e in zip(idx, ends))

    return HOST_CACHE.get("packed_segments", (position_ids,), compute)


def segment_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """(batch, seqlen) segment index that grows wherever the position does not grow by 1."""
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be (batch, seqlen), got {tuple(position_ids.shape)}")
    first = position_ids[:, :1] - 1
    return torch.cumsum((torch.diff(position_ids, prepend=first, dim=-1) != 1).long(), dim=-1)


def _segment_attend(segments, batch: int, seqlen: int, window, device) -> torch.Tensor:
    lengths = torch.tensor(segments, device=device)
    seg = torch.repeat_interleave(torch.arange(len(segments), device=device), lengths)
    seg = seg.view(batch, seqlen)
    attend = (seg.unsqueeze(-1) == seg.unsqueeze(-2)) & attend_band(seqlen, seqlen, window, device)
    return attend.unsqueeze(1)


def _as_attend(mask: torch.Tensor) -> torch.Tensor:
    """Float masks: 0 attends, very negative does not."""
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def _mask_is_segment_causal(mask, segments, batch, seqlen, window, position_ids, kwargs) -> bool:
    """Does ``mask`` say exactly "within each packed sequence, the window/causal band"?"""
    if mask.dim() != 4 or mask.shape[-2:] != (seqlen, seqlen) or mask.shape[0] not in (1, batch):
        return False
    ids_source = _cu_seqlens(kwargs)
    ids_source = ids_source if ids_source is not None else position_ids

    def compute():
        expected = _segment_attend(segments, batch, seqlen, window, mask.device)
        got = _as_attend(mask)
        if mask.dtype != torch.bool and bool(((mask != 0) & got).any()):
            return False  # carries a bias, not just a pattern
        return bool((got == expected).all())  # broadcasts over (B|1, H|1, S, S)

    return HOST_CACHE.get(("segment-causal", window), (mask, ids_source), compute)


def _varlen_forward(api, query, key, value, segments, scale, dropout, window):
    batch, heads, seqlen, _ = query.shape
    q = query.transpose(1, 2).reshape(batch * seqlen, heads, -1)
    k = key.transpose(1, 2).reshape(batch * seqlen, key.shape[1], -1)
    v = value.transpose(1, 2).reshape(batch * seqlen, value.shape[1], -1)
    cu = tuple(cumulative_lengths(segments, leading_zero=True))
    if api.backend == "sdpa":
        out = sdpa_varlen(q, k, v, cu, cu, scale, dropout, window)
    else:
        out = nfa_varlen(api.fusion_attention(), q, k, v, cu, cu, scale, dropout, window)
    return out.reshape(batch, seqlen, heads, -1)


def _attend_mask(mask, batch, sq, sk, window, query) -> Optional[torch.Tensor]:
    """4-D (bool attend or additive float), or None: the window rules."""
    if mask is None:
        return None
    if mask.dim() == 2:  # (B, Sk) padding mask, 1 = real token
        if mask.shape[-1] != sk:
            raise ValueError(f"2-D attention_mask covers {mask.shape[-1]} keys, attention has {sk}")
        return mask.bool()[:, None, None, :] & attend_band(sq, sk, window, mask.device)
    if mask.dim() != 4:
        raise ValueError(f"attention_mask must be 2-D or 4-D, got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool and mask.dtype != query.dtype:
        mask = mask.to(query.dtype)
    return mask


def _with_spans(attend, span_ids, position_ids, sq, sk, window, query):
    """``attend`` OR "same non-zero span (and packed sequence)"; the queries are the last
    ``sq`` of the ``sk`` positions the spans describe."""
    if span_ids.shape[-1] != sk:
        if sq == 1:
            return attend  # decoding a text token: causal already sees every earlier token
        raise ValueError(f"hyport_span_ids covers {span_ids.shape[-1]} tokens but the "
                         f"attention has {sk} keys")

    def compute():
        spans = span_ids.to(query.device)
        same_sequence = None
        if isinstance(position_ids, torch.Tensor) and position_ids.dim() == 2 and position_ids.shape[-1] == sk:
            seg = segment_ids_from_position_ids(position_ids.expand(spans.shape[0], -1))
            same_sequence = (seg[:, sk - sq:].unsqueeze(-1) == seg.unsqueeze(-2)).unsqueeze(1)
        if attend is None:
            base = attend_band(sq, sk, window, query.device).expand(1, 1, sq, sk)
            base = base if same_sequence is None else base & same_sequence
        else:
            base = _as_attend(attend)
        q_spans = spans[:, sk - sq:]
        same_span = ((q_spans.unsqueeze(-1) == spans.unsqueeze(-2)) & (q_spans != 0).unsqueeze(-1)).unsqueeze(1)
        return base | (same_span if same_sequence is None else same_span & same_sequence)

    return MASK_CACHE.get(("spans", sq, sk, window), (attend, span_ids, position_ids), compute)


def _unmask_unattended(attend: torch.Tensor) -> torch.Tensor:
    """Let rows that see no key (left-padding queries) see every key: their outputs are
    discarded, but a kernel may write NaN there (older SDPA math kernels do; NFA does not
    document it), which leaks into real tokens through ``0 * NaN`` in later layers."""
    empty = ~attend.any(dim=-1, keepdim=True)
    return attend | empty


def _sdpa_mask(attend: torch.Tensor) -> torch.Tensor:
    if attend.dtype != torch.bool:
        return attend  # additive float: finite minima never produce NaN
    return MASK_CACHE.get("sdpa-mask", (attend,), lambda: _unmask_unattended(attend))


def _nfa_mask(attend: torch.Tensor) -> torch.Tensor:

    def compute():
        if attend.dtype != torch.bool:
            blocked = attend <= torch.finfo(attend.dtype).min / 2
            if bool(((attend != 0) & ~blocked).any()):
                raise FlashAttnUnsupported(
                    "hyport attention (npu): the float attention mask carries a bias (values "
                    "other than 0 and -inf); NPU fusion attention takes only a boolean mask")
            keep = ~blocked
        else:
            keep = attend
        return (~_unmask_unattended(keep)).contiguous()

    return MASK_CACHE.get("nfa-mask", (attend,), compute)


def _sdpa_dense(query, key, value, attend, scale, dropout, window):
    """(B, N, S, D) in, (B, Sq, N, D) out."""
    if attend is None:
        return sdpa_dense(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                         scale, dropout, window)
    groups = query.shape[1] // key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, repeat_kv(key, groups, 1), repeat_kv(value, groups, 1), attn_mask=_sdpa_mask(attend),
        dropout_p=dropout, scale=scale)
    return out.transpose(1, 2)


def _nfa_bnsd_masked(nfa, q, k, v, scale, dropout_p, masked, window):
    """NFA in BNSD with ``masked`` (True = masked out) as ``atten_mask``, or without one the
    window's sparse mode."""
    extra = nfa_sparse_arguments(window, q.device) if masked is None else \
        {"atten_mask": masked, "sparse_mode": 0}
    return nfa(q, k, v, head_num=q.shape[1], input_layout="BNSD", scale=float(scale),
               keep_prob=1.0 - float(dropout_p), **extra)[0]
