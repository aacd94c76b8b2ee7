"""Bidirectional spans: image tokens attend to each other both ways, text stays causal.

Mixture-of-Transformers VLMs such as the seed's HY-Embodied model run the tokens of one
image span with full (bidirectional) attention while text tokens stay causal. A span is
described by ``span_ids`` (batch, seqlen): 0 for text, the same positive id for every
token of one span. Ids must be unique within a row (:func:`span_ids_from_token_type`
makes them so); in packed rows a span never reaches across sequences because the
result is also restricted to one packed segment.

Two ways to hand spans to the attention function registered by
:func:`hyport_lib.npu_attention.hf_integration.register_hyport_attention`:

* the ``hyport_span_ids=`` keyword of the model's ``forward``: transformers passes
  unknown keyword arguments down to the attention function (Llama-style models do);
  this is safe with gradient checkpointing, which re-runs forward with the same kwargs;
* the :func:`bidirectional_spans` context manager, for model code that does not
  forward ``**kwargs``. With gradient checkpointing the backward pass must run inside
  the same ``with`` block, because the recomputed forward reads the spans again.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Optional

import torch

_ACTIVE_SPANS: contextvars.ContextVar = contextvars.ContextVar("hyport_span_ids", default=None)


def span_ids_from_token_type(token_type_ids: torch.Tensor, span_value: int = 1) -> torch.Tensor:
    """Number each contiguous run of ``span_value`` tokens 1, 2, ... per row; text = 0.

    Args:
        token_type_ids: (batch, seqlen) ints, e.g. 1 for image tokens, 0 for text.
        span_value: the token type that forms bidirectional spans.
    """
    if token_type_ids.dim() != 2:
        raise ValueError(f"token_type_ids must be (batch, seqlen), got {tuple(token_type_ids.shape)}")
    inside = token_type_ids == span_value
    before = torch.nn.functional.pad(inside[:, :-1], (1, 0), value=False)
    starts = inside & ~before
    return torch.cumsum(starts.long(), dim=-1) * inside.long()


def segment_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """(batch, seqlen) segment index that grows wherever the position does not grow by 1."""
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be (batch, seqlen), got {tuple(position_ids.shape)}")
    first = position_ids[:, :1] - 1
    return torch.cumsum((torch.diff(position_ids, prepend=first, dim=-1) != 1).long(), dim=-1)


def bidirectional_span_mask(span_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                            position_ids: Optional[torch.Tensor] = None,
                            causal: bool = True) -> torch.Tensor:
    """Full (batch, 1, seqlen, seqlen) bool mask, True = attend.

    Query i attends key j when both are in the same packed segment, j is a real token,
    and either j <= i (text, causal) or i and j share a non-zero span id.

    Args:
        span_ids: (batch, seqlen), 0 = text.
        attention_mask: (batch, seqlen) padding mask, 1 = real token.
        position_ids: (batch, seqlen); restarts mark packed sequences.
        causal: False makes the non-span part bidirectional too.
    """
    if span_ids.dim() != 2:
        raise ValueError(f"span_ids must be (batch, seqlen), got {tuple(span_ids.shape)}")
    batch, seqlen = span_ids.shape
    device = span_ids.device
    valid = (torch.ones(batch, seqlen, dtype=torch.bool, device=device) if attention_mask is None
             else attention_mask.to(device).bool())
    if position_ids is None:
        segments = torch.zeros(batch, seqlen, dtype=torch.long, device=device)
    else:
        segments = segment_ids_from_position_ids(position_ids.to(device).expand(batch, -1))
    same_segment = segments.unsqueeze(-1) == segments.unsqueeze(-2)
    attend = same_segment & valid.unsqueeze(-2)
    if causal:
        order = torch.ones(seqlen, seqlen, dtype=torch.bool, device=device).tril()
        same_span = (span_ids.unsqueeze(-1) == span_ids.unsqueeze(-2)) & (span_ids != 0).unsqueeze(-1)
        attend = attend & (order | same_span)
    return attend.unsqueeze(1)


def overlay_spans(attend: torch.Tensor, span_ids: torch.Tensor,
                  position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``attend`` (B|1, 1, Sq, Sk) bool OR "same non-zero span (and same segment)".

    The queries are the last ``Sq`` of the ``Sk`` positions that ``span_ids`` describes.
    """
    sq, sk = attend.shape[-2], attend.shape[-1]
    if span_ids.shape[-1] != sk:
        raise ValueError(f"hyport_span_ids covers {span_ids.shape[-1]} tokens, attention has {sk} keys")
    q_spans = span_ids[:, sk - sq:]
    same = (q_spans.unsqueeze(-1) == span_ids.unsqueeze(-2)) & (q_spans != 0).unsqueeze(-1)
    if position_ids is not None and position_ids.dim() == 2 and position_ids.shape[-1] == sk:
        seg = segment_ids_from_position_ids(position_ids.expand(span_ids.shape[0], -1))
        same &= seg[:, sk - sq:].unsqueeze(-1) == seg.unsqueeze(-2)
    return attend | same.unsqueeze(1)


@contextlib.contextmanager
def bidirectional_spans(span_ids: torch.Tensor):
    """Make ``span_ids`` visible to hyport's attention function inside the block."""
    token = _ACTIVE_SPANS.set(span_ids)
    try:
        yield span_ids
    finally:
        _ACTIVE_SPANS.reset(token)


def active_span_ids() -> Optional[torch.Tensor]:
    """The span ids set by the innermost :func:`bidirectional_spans`, or None."""
    return _ACTIVE_SPANS.get()
