"""Argument checks of the ``npu_fusion_attention`` emulation, as the documented contract
states them (docs/npu_fusion_attention.md): tensor shapes per layout, head counts (GQA),
batch sizes, cumulative sequence lengths without a leading 0, and the mask's dtype and
shape (the compressed 2048x2048 causal mask for the compressed sparse modes).

Every error names the argument, as torch_npu's own do, so a porting mistake reads the
same under the emulation as on an NPU.
"""

from __future__ import annotations

import torch

from hyport_lib.npu_attention.reference import lengths_from_cumulative
from hyport_lib.port.generated.flash_attn_ascend import NFA_MASK_SIZE, compressed_causal_mask

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DIMS = {"BSH": 3, "SBH": 3, "BSND": 4, "BNSD": 4, "TND": 3}
_SHAPE_NAMES = {"BSH": "(B, S, H)", "SBH": "(S, B, H)", "BSND": "(B, S, N, D)",
                "BNSD": "(B, N, S, D)", "TND": "(T, N, D)"}


def check_tensors(query, key, value, input_layout):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not torch.is_tensor(t):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != _DIMS[input_layout]:
            raise ValueError(
                f"input_layout={input_layout!r} expects {name} of shape "
                f"{_SHAPE_NAMES[input_layout]}; got {name} of shape {tuple(t.shape)}")
    if query.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"query dtype {query.dtype} is not supported: expected float16, "
                        "bfloat16 or float32")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise TypeError(f"query, key and value must share one dtype: query is "
                            f"{query.dtype}, {name} is {t.dtype}")
        if t.device != query.device:
            raise ValueError(f"{name} is on {t.device}, query on {query.device}")
    if tuple(key.shape) != tuple(value.shape):
        raise ValueError(f"value shape {tuple(value.shape)} must equal key shape "
                         f"{tuple(key.shape)}")


def head_counts(query, key, head_num, input_layout):
    """(Nq, Nkv, D) from the layout, with errors naming the argument."""
    if isinstance(head_num, bool) or not isinstance(head_num, int) or head_num <= 0:
        raise ValueError(f"head_num={head_num!r}: expected a positive int")
    if input_layout in ("BSH", "SBH"):
        hq, hkv = query.shape[-1], key.shape[-1]
        if hq % head_num:
            raise ValueError(f"head_num={head_num} does not divide query's H={hq} "
                             f"(input_layout={input_layout!r})")
        d = hq // head_num
        if hkv % d:
            raise ValueError(f"key's H={hkv} is not a multiple of the head dim D={d} "
                             f"(query H={hq} / head_num={head_num})")
        nkv = hkv // d
    else:
        n_axis = 1 if input_layout == "BNSD" else (2 if input_layout == "BSND" else 1)
        if query.shape[n_axis] != head_num:
            raise ValueError(f"head_num={head_num} does not match query's N="
                             f"{query.shape[n_axis]} for input_layout={input_layout!r}")
        d, nkv = query.shape[-1], key.shape[n_axis]
        if key.shape[-1] != d:
            raise ValueError(f"key head dim D={key.shape[-1]} differs from query's D={d}")
    if nkv == 0 or head_num % nkv:
        raise ValueError(f"head_num={head_num} is not a multiple of key's head count "
                         f"Nkv={nkv} (GQA needs Nq % Nkv == 0)")
    return head_num, nkv, d


def check_batch(query, key, input_layout):
    if input_layout == "TND":
        return
    b_axis = 1 if input_layout == "SBH" else 0
    if query.shape[b_axis] != key.shape[b_axis]:
        raise ValueError(f"key batch {key.shape[b_axis]} differs from query batch "
                         f"{query.shape[b_axis]} (input_layout={input_layout!r})")


def seq_lengths(name, values, total):
    if values is None:
        raise ValueError(f"input_layout='TND' needs {name} (cumulative end offsets without "
                         "a leading 0, e.g. lengths 2,2,2 -> [2, 4, 6])")
    raw = values.tolist() if torch.is_tensor(values) else list(values)
    if not raw:
        raise ValueError(f"{name} is empty")
    if any(isinstance(x, float) and not float(x).is_integer() for x in raw):
        raise ValueError(f"{name}={raw}: expected ints")
    try:
        lengths = lengths_from_cumulative([int(x) for x in raw])
    except ValueError as exc:
        raise ValueError(f"{name}={raw}: must be cumulative (non-decreasing)") from exc
    if sum(lengths) != total:
        raise ValueError(f"{name}={raw}: last value {int(raw[-1])} must equal the packed "
                         f"token count T={total} (no leading 0: flash-attn's cu_seqlens "
                         "[0, 2, 4] becomes [2, 4])")
    return lengths


def check_mask_dtype(atten_mask):
    if not torch.is_tensor(atten_mask):
        raise TypeError(f"atten_mask must be a torch.Tensor, got {type(atten_mask).__name__}")
    if atten_mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"atten_mask dtype {atten_mask.dtype}: expected bool or uint8 "
                        "(True / 1 = masked out)")


def check_compressed(atten_mask, sparse_mode):
    shape = tuple(atten_mask.shape)
    if shape != (NFA_MASK_SIZE, NFA_MASK_SIZE):
        raise ValueError(f"atten_mask shape {shape}: sparse_mode={sparse_mode} takes the "
                         "compressed 2048x2048 triu(ones, 1) mask")
    expected = compressed_causal_mask(atten_mask.device)
    if atten_mask is not expected and not torch.equal(atten_mask.bool(), expected):
        raise ValueError(f"atten_mask: sparse_mode={sparse_mode} takes the compressed mask "
                         "triu(ones(2048, 2048), 1) with True = masked; this one differs "
                         "(a keep mask with True = attend?)")


def full_mask_4d(atten_mask, b, n, sq, skv):
    """Validated BNSS / B1SS / 11SS / SS mask as a bool tensor broadcastable to BNSS."""
    shape = tuple(atten_mask.shape)
    ok = (atten_mask.dim() == 2 and shape == (sq, skv)) or (
        atten_mask.dim() == 4 and shape[2:] == (sq, skv)
        and (shape[0], shape[1]) in ((b, n), (b, 1), (1, 1)))
    if not ok:
        raise ValueError(
            f"atten_mask shape {shape} does not fit: expected BNSS {(b, n, sq, skv)}, "
            f"B1SS {(b, 1, sq, skv)}, 11SS {(1, 1, sq, skv)} or SS {(sq, skv)}")
    mask = atten_mask.bool()
    return mask.view(1, 1, sq, skv) if mask.dim() == 2 else mask
