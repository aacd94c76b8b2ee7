"""Training inputs that keep each family's meaning: per-token keys, image tensors, positions.

One sample's processor output splits into token ids, **per-token keys**
(``mm_token_type_ids``, ``token_type_ids``, mllama's ``cross_attention_mask``: the model
builds positions or masks from them, so they travel with the ids through truncation,
packing and padding) and **image tensors** (joined across samples). Packed M-RoPE rows
carry each sample's own positions.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

from hyport_lib.models.module_tree import language_model_path, rope_index_function

#: Keys that are the tokens themselves or rebuilt by the collators.
_REBUILT_KEYS = frozenset({"input_ids", "attention_mask", "labels", "position_ids"})

#: The language model's input of image states in a cross-attention VLM (mllama): what its
#: cross-attention layers take their keys and values from.
IMAGE_STATES = "cross_attention_states"
#: Such a model's per-token key saying which tile of which image of its row each token may
#: attend to (the name of mllama's forward argument and processor output).
IMAGE_MASK = "cross_attention_mask"

#: ``(input_ids, per-token keys, image tensors) -> (axes, length)`` positions of one sample.
PositionsFunction = Callable[[Sequence[int], dict, dict], Any]


def image_processor_keys(processor) -> frozenset:
    """The keys the image (and video) processor returns: image tensors whatever their shape,
    even one whose second dimension happens to equal the sample's token count (Gemma-4's
    ``image_position_ids`` of 2520 patches beside a 2520-token sample, Aria's 980-wide
    ``pixel_mask``)."""
    keys = set()
    for part in ("image_processor", "video_processor"):
        names = getattr(getattr(processor, part, None), "model_input_names", None)
        if isinstance(names, (list, tuple)):
            keys.update(str(n) for n in names)
    return frozenset(keys)


def split_processor_output(out, image_keys: frozenset = frozenset()) -> tuple[list[int], dict[str, list], dict[str, Any]]:
    """``(ids, per-token keys, image tensors)`` of a one-sample processor output; a
    per-token key's value is a list over the tokens (nested for a key of rank above 2)."""
    import torch

    ids = out["input_ids"]
    length = int(ids.shape[-1])
    per_token: dict[str, list] = {}
    images: dict[str, Any] = {}
    for key, value in out.items():
        if key in _REBUILT_KEYS or not isinstance(value, torch.Tensor):
            continue
        if key not in image_keys and _is_per_token(value, length):
            per_token[key] = value[0].tolist()
        else:
            images[key] = value
    return ids[0].tolist(), per_token, images


def _is_per_token(value, length: int) -> bool:
    """Decided from the shape, not a list of key names (which would miss the next family's):
    transformers documents every per-token input as ``(batch_size, sequence_length, ...)``.
    No image tensor looks like that: pixel values are floating point, and an integer image
    tensor's dim 1 (images, tiles, a fixed width) is always below the token count.
    """
    return (value.dim() >= 2 and tuple(value.shape[:2]) == (1, length)
            and not value.is_floating_point())


def indexes_images(values: Sequence) -> bool:
    """Are these per-token values tensors of their own (mllama's ``cross_attention_mask``:
    images x tiles per token)? Such a key names the images of the token's row by index, so
    its model reads row ``r``'s images from row ``r`` of the image tensors."""
    return bool(values) and isinstance(values[0], (list, tuple))


def token_tensor(key: str, rows: Sequence[Sequence[tuple[int, Optional[Sequence]]]], width: int):
    """One per-token key of a batch, ``(len(rows), width, *trailing)`` int64; each row lists
    its samples as ``(length, values or None)``. Every place no sample fills is 0: what the
    processors put there themselves, a text token's type and mllama's "this token may not
    see this tile". ValueError where a sample lacks a key of one value per token (every
    sample's processor output has those: samples processed differently).
    """
    import torch

    parts = [[(int(n), None if v is None else torch.as_tensor(v, dtype=torch.long)) for n, v in row]
             for row in rows]
    present = [t for row in parts for _, t in row if t is not None]
    if not present:
        raise ValueError(f"per-token key {key!r}: no sample of the batch has it")
    rank = present[0].dim()
    if any(t.dim() != rank for t in present):
        raise ValueError(f"per-token key {key!r} has a different rank in some samples of the batch")
    if rank == 1 and len(present) < sum(len(row) for row in parts):
        raise ValueError(f"per-token key {key!r} is missing from some samples of the batch")
    trailing = [max(int(t.shape[d]) for t in present) for d in range(1, rank)]
    out = torch.zeros((len(parts), int(width), *trailing), dtype=torch.long)
    for r, row in enumerate(parts):
        start = 0
        for length, values in row:
            if values is not None:
                if int(values.shape[0]) != length:
                    raise ValueError(f"per-token key {key!r}: {values.shape[0]} values for {length} tokens")
                out[(r, slice(start, start + length), *(slice(0, s) for s in values.shape[1:]))] = values
            start += length
        if start > width:
            raise ValueError(f"a row of {start} tokens > width {width}")
    return out


def join_image_tensors(parts: Sequence[dict], per_row: bool = False) -> dict:
    """The image tensors of several samples (``{}`` for none) as one batch, joined on the
    dimension the model reads: cat on dim 0, or, for per-sample pixel values (5-D of
    Idefics3 and LLaVA-OneVision, mllama's 6-D), images and tiles zero-padded (these models
    drop or mask them) then cat. ``per_row``: a sample without images gets padding images
    (aspect ratio id 0, which mllama reserves for padding) instead of being left out. A key
    only some samples with images have cannot be lined up with the images: left out.
    """
    import torch

    with_images = [p for p in parts if p]
    if not with_images:
        return {}
    pixels = [p.get("pixel_values") for p in with_images]
    per_sample = all(p is not None and p.dim() >= 5 for p in pixels)
    if per_row and not per_sample:
        shapes = ", ".join(str(tuple(p.shape)) if p is not None else "none" for p in pixels)
        raise ValueError(f"the rows' images cannot be given one row each: pixel_values {shapes} are "
                         "not laid out per sample")
    batch: dict[str, Any] = {}
    for key in dict.fromkeys(k for p in with_images for k in p):
        values = [p[key] for p in with_images if key in p]
        if len(values) != len(with_images):
            continue
        if per_sample and _sample_major(values, pixels):
            axes = min(min(v.dim() for v in values), pixels[0].dim() - 3)
            shape = [max(int(v.shape[d]) for v in values) for d in range(1, axes)]
            values = [_pad_to(v, shape) for v in values]
            if per_row:
                empty = torch.zeros((1, *values[0].shape[1:]), dtype=values[0].dtype)
                own = iter(values)
                values = [next(own) if p else empty for p in parts]
        batch[key] = torch.cat(values, dim=0)
    return batch


def _sample_major(values: list, pixels: list) -> bool:
    """Is a key laid out like per-sample pixel values (its first two dims theirs)? A 2-D key
    only beside 6-D pixels, where dim 1 surely counts images (mllama's ``aspect_ratio_ids``):
    beside 5-D pixels LLaVA-OneVision's ``(images, 2)`` ``image_sizes`` would look the same.
    """
    return all((v.dim() >= 3 or (v.dim() == 2 and p.dim() >= 6)) and v.shape[:2] == p.shape[:2]
               for v, p in zip(values, pixels))


def _pad_to(value, shape: Sequence[int]):
    import torch

    inner = tuple(int(s) for s in value.shape[1:len(shape) + 1])
    if inner == tuple(shape):
        return value
    out = torch.zeros((value.shape[0], *shape, *value.shape[len(shape) + 1:]), dtype=value.dtype,
                      device=value.device)
    out[(slice(None), *(slice(0, s) for s in inner))] = value
    return out


def image_states_of_rows(model, seeing) -> Optional[dict]:
    """Give the rows of a batch whose tokens may see no image no image states.

    transformers' mllama lets a token that may see no image attend to every image of its
    row (it zeroes such rows after the MLP only; transformers issue 39379), so a text-only
    row would read its padding images. Until ``holder["remove"]()`` every forward
    multiplies each row's image states by its ``seeing`` (``(rows,)`` bool): a text-only
    row's cross-attention then adds exactly 0, as the layers skipped for the sample alone
    do. ``holder["calls"]`` counts the forwards that did it; None for a model without
    image states.
    """
    if IMAGE_STATES not in inspect.signature(model.forward).parameters:
        return None
    decoder = model.get_submodule(language_model_path(model))
    holder: dict[str, Any] = {"calls": 0}

    def scaled(module, args, kwargs):
        states = kwargs.get(IMAGE_STATES)
        if states is None:
            return None
        rows = int(seeing.shape[0])
        if states.shape[0] % rows:
            raise ValueError(f"{IMAGE_STATES} of shape {tuple(states.shape)} is not {rows} rows' worth")
        keep = seeing.to(device=states.device, dtype=states.dtype).view(rows, 1)
        kwargs[IMAGE_STATES] = (states.reshape(rows, -1) * keep).view_as(states)
        holder["calls"] += 1
        return args, kwargs

    handle = decoder.register_forward_pre_hook(scaled, with_kwargs=True)
    holder["remove"] = handle.remove
    return holder


def rows_seeing_images(batch: dict):
    """``(rows,)`` bool: which rows hold a token that may see an image, read from the keys
    that index images (mllama's ``cross_attention_mask``); None when the batch has none."""
    ids = batch.get("input_ids")
    if ids is None:
        return None
    seeing = None
    for key, value in batch.items():
        if key in _REBUILT_KEYS or not hasattr(value, "dim") or value.dim() < 3 \
                or tuple(value.shape[:2]) != tuple(ids.shape) or value.is_floating_point():
            continue
        row = value.flatten(1).ne(0).any(dim=1)
        seeing = row if seeing is None else seeing | row
    return seeing


def rope_positions_function(model) -> Optional[PositionsFunction]:
    """One sample's multimodal rotary positions ``(axes, length)`` from the model's own
    ``get_rope_index``; None for a model without one."""
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
    """One packed row's positions: each sample's own, concatenated; with ``text_row``, a
    first row restarting per sample (the layout the Qwen-VL family reads as packed: row 0
    builds the mask, the others rotate). The padding segment counts from 0 on every row."""
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
