"""Bidirectional spans: image tokens attend to each other both ways, text stays causal.

Mixture-of-Transformers VLMs such as the seed's HY-Embodied model run the tokens of one
image span with full (bidirectional) attention while text tokens stay causal. A span is
described by ``span_ids`` (batch, seqlen): 0 for text, the same positive id for every
token of one span. Ids must be unique within a row (number each contiguous run of
image tokens 1, 2, ...); in packed rows a span never reaches across sequences because
the result is also restricted to one packed segment.

Spans reach the attention function registered by
:func:`hyport_lib.npu_attention.hf_integration.register_hyport_attention` through the
``hyport_span_ids=`` keyword of the model's ``forward``: transformers passes unknown
keyword arguments down to the attention function (Llama-style models do); this is safe
with gradient checkpointing, which re-runs forward with the same kwargs.
"""

from __future__ import annotations

from typing import Optional

import torch


def segment_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """(batch, seqlen) segment index that grows wherever the position does not grow by 1."""
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be (batch, seqlen), got {tuple(position_ids.shape)}")
    first = position_ids[:, :1] - 1
    return torch.cumsum((torch.diff(position_ids, prepend=first, dim=-1) != 1).long(), dim=-1)


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
