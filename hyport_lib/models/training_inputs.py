"""Training inputs that keep each family's meaning: per-token keys, image tensors, positions.

What a processor returns for one sample falls into three groups, split by
:func:`split_processor_output`:

* the token ids;
* **per-token keys** (one value per token: ``mm_token_type_ids`` for the Qwen-VL family
  and HunYuan-VL, ``token_type_ids`` for Gemma3 and PaliGemma): the model needs them
  (M-RoPE positions are computed from ``mm_token_type_ids``; Gemma3 builds its
  bidirectional image mask from ``token_type_ids``), so they travel with the ids
  through truncation, packing and padding;
* **image tensors** (``pixel_values`` and what goes with it: ``image_grid_thw``,
  ``image_sizes``, ``pixel_attention_mask``, ...), joined across samples by
  :func:`join_image_tensors` on the dimension the model reads: one row per image or
  patch (cat on dim 0), or one row per sample with images or tiles padded (5-D
  ``pixel_values`` of Idefics3 and LLaVA-OneVision: padded on dim 1 with zeros, which
  these models drop, then cat on dim 0).

Packed rows of an M-RoPE model carry the positions the model computes for each sample
alone: :func:`rope_positions_function` wraps the model's own ``get_rope_index``,
called once per sample; the collator concatenates them and puts the per-sample text
positions first (the ``(axes + 1, batch, length)`` layout these models read as
"packed": row 0 builds the mask, the other rows rotate).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

from hyport_lib.models.families import rope_index_function

#: Keys that are the tokens themselves or rebuilt by the collators.
_REBUILT_KEYS = frozenset({"input_ids", "attention_mask", "labels", "position_ids"})

#: ``(input_ids, per-token keys, image tensors) -> (axes, length)`` positions of one sample.
PositionsFunction = Callable[[Sequence[int], dict, dict], Any]


def split_processor_output(out) -> tuple[list[int], dict[str, list[int]], dict[str, Any]]:
    """``(ids, per-token keys, image tensors)`` of a one-sample processor output."""
    import torch

    ids = out["input_ids"]
    length = int(ids.shape[-1])
    per_token: dict[str, list[int]] = {}
    images: dict[str, Any] = {}
    for key, value in out.items():
        if key in _REBUILT_KEYS or not isinstance(value, torch.Tensor):
            continue
        if value.dim() == 2 and tuple(value.shape) == (1, length) and not torch.is_floating_point(value):
            per_token[key] = value[0].tolist()
        else:
            images[key] = value
    return ids[0].tolist(), per_token, images


def join_image_tensors(parts: Sequence[dict]) -> dict:
    """The image tensors of several samples as one batch (see the module docstring).

    A key only some samples have cannot be lined up with the images, and is left out.
    """
    import torch

    if not parts:
        return {}
    pixels = [p.get("pixel_values") for p in parts]
    per_sample = all(p is not None and p.dim() == 5 for p in pixels)
    batch: dict[str, Any] = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        values = [p[key] for p in parts if key in p]
        if len(values) != len(parts):
            continue
        if per_sample and _sample_major(key, values, pixels):
            width = max(int(v.shape[1]) for v in values)
            values = [_pad_dim1(v, width) for v in values]
        batch[key] = torch.cat(values, dim=0)
    return batch


def _sample_major(key: str, values: list, pixels: list) -> bool:
    """Is ``key`` laid out like 5-D pixel values (sample, image or tile, ...)?"""
    return all(v.dim() >= 3 and v.shape[:2] == p.shape[:2] for v, p in zip(values, pixels))


def _pad_dim1(value, width: int):
    import torch

    missing = width - int(value.shape[1])
    if missing <= 0:
        return value
    pad = torch.zeros((value.shape[0], missing, *value.shape[2:]), dtype=value.dtype, device=value.device)
    return torch.cat([value, pad], dim=1)


def rope_positions_function(model) -> Optional[PositionsFunction]:
    """A function giving one sample's multimodal rotary positions ``(axes, length)`` from
    the model's own ``get_rope_index``; None for a model without one."""
    get = rope_index_function(model)
    if get is None:
        return None
    accepted = set(inspect.signature(get).parameters)

    def positions(input_ids: Sequence[int], per_token: dict, images: dict):
        import torch

        kwargs: dict[str, Any] = {}
        for key, values in per_token.items():
            if key in accepted:
                kwargs[key] = torch.tensor([values])
        for key, value in images.items():
            if key in accepted:
                kwargs[key] = value
        with torch.no_grad():
            result = get(torch.tensor([list(input_ids)]), **kwargs)
        position_ids = result[0] if isinstance(result, tuple) else result
        return position_ids[:, 0, :].detach().cpu().long()

    return positions


def packed_positions(samples: Sequence, width: int, text_row: bool = True):
    """One packed row's positions: each sample's own multimodal positions, concatenated;
    with ``text_row``, a first row restarting per sample (the packed-sequence boundary
    the Qwen-VL family builds its mask from): ``(axes + 1, width)``, else ``(axes,
    width)``. The padding segment counts from 0 on every row."""
    import torch

    columns = []
    for sample in samples:
        rope = sample.rope_positions
        if text_row:
            text = torch.arange(rope.shape[1], dtype=torch.long).unsqueeze(0)
            rope = torch.cat([text, rope], dim=0)
        columns.append(rope)
    used = sum(c.shape[1] for c in columns)
    if width > used:
        axes = columns[0].shape[0]
        columns.append(torch.arange(width - used, dtype=torch.long).unsqueeze(0).expand(axes, -1))
    return torch.cat(columns, dim=1)
