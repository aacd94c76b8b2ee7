"""A CPU (any torch device) emulation of ``torch_npu.npu_fusion_attention``, following the
contract of docs/npu_fusion_attention.md, so that hyport's NPU code path can be checked
without an NPU (the torch_npu test double, the numerics comparison); never a runtime
fallback that pretends to be an NPU. Math in float32 (inputs upcast), the output cast back
to the input dtype.

Every argument error names the argument, as torch_npu's own do, so a porting mistake
reads the same under the emulation as on an NPU. Dropout draws its seed from torch's
default CPU generator (``torch.manual_seed`` makes it repeatable) and returns it; the keep
pattern is :func:`dropout_keep_mask`. Not emulated (``NotImplementedError``): sparse modes
5, 6 and unknown ones, ``padding_mask`` (reserved by torch_npu) and ``pse`` in TND.
"""

from __future__ import annotations

import warnings

import torch

from hyport_lib.npu_attention.reference import (LAYOUTS, band_mask, causal_mask, from_bnsd,
                                                lengths_from_cumulative, to_bnsd)
from hyport_lib.port.generated.flash_attn_ascend import NFA_MASK_SIZE, NFA_MAX_TOKENS, compressed_causal_mask

SUPPORTED_SPARSE_MODES = (0, 1, 2, 3, 4, 7, 8)
TND_ONLY_SPARSE_MODES = (7, 8)
COMPRESSED_MODES = (2, 3, 4, 7, 8)
SPARSE_MODE_NAMES = {
    0: "defaultMask", 1: "allMask", 2: "leftUpCausal", 3: "rightDownCausal", 4: "band",
    5: "prefix uncompressed", 6: "prefix compressed", 7: "varlen split rightDownCausal",
    8: "varlen split leftUpCausal", 9: "treeMask",
}
STATS_WIDTH = 8  # softmax_max / softmax_sum repeat each value over a last axis of 8


def dropout_keep_mask(seed: int, numels: int, keep_prob: float, device=None) -> torch.Tensor:
    """Flat bool keep pattern of one call, consumed in order: BNSD scores row-major, TND
    sample after sample. Drawn on the CPU so that every device gets the same pattern."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    keep = torch.rand(int(numels), generator=gen) < float(keep_prob)
    return keep.to(device) if device is not None else keep


# --- argument checks ------------------------------------------------------------------
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


# --- core --------------------------------------------------------------------------------
def _attend(q, k, v, masked, scale, pse, keep, keep_prob):
    """fp32 ``(out, row_max, row_sum)`` on ``[B, N, S, D]`` tensors; ``masked`` True = masked out."""
    nq, nkv = q.shape[1], k.shape[1]
    if k.shape[2] == 0:  # nothing to attend (an empty packed kv sample): the 0-row rule
        b, _, sq, _ = q.shape
        return (q.new_zeros(b, nq, sq, v.shape[-1], dtype=torch.float32),
                torch.full((b, nq, sq), float("-inf"), device=q.device),
                torch.zeros(b, nq, sq, device=q.device))
    qf, kf, vf = q.float(), k.float(), v.float()
    if nq != nkv:
        kf = kf.repeat_interleave(nq // nkv, dim=1)
        vf = vf.repeat_interleave(nq // nkv, dim=1)
    scores = torch.matmul(qf, kf.transpose(-1, -2))
    if pse is not None:
        scores = scores + pse.float()
    scores = scores * float(scale)
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    # Shift by the row max; rows with nothing to attend shift by 0 and end up all-zero.
    # Detached: softmax does not depend on the shift, and -inf must not reach autograd.
    shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    expd = torch.exp(scores - shift)
    row_sum = expd.sum(dim=-1, keepdim=True)
    probs = expd / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
    if keep is not None:
        probs = probs * keep.view_as(probs).to(probs.dtype) / float(keep_prob)
    out = torch.matmul(probs, vf)
    return out, row_max.squeeze(-1), row_sum.squeeze(-1)


def _stats(x):
    return x.float().unsqueeze(-1).expand(*x.shape, STATS_WIDTH).contiguous()


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None,
                         padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                         pre_tockens=NFA_MAX_TOKENS, next_tockens=NFA_MAX_TOKENS, inner_precise=0,
                         prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                         sparse_mode=0, gen_mask_parallel=True, sync=False):
    """``torch_npu.npu_fusion_attention``'s signature and return tuple (docs/npu_fusion_attention.md);
    fully masked rows come out 0, with ``softmax_max`` -inf and ``softmax_sum`` 0."""
    del gen_mask_parallel, sync, prefix  # performance knobs / modes 5-6 only
    if not isinstance(input_layout, str) or input_layout.upper() not in LAYOUTS:
        raise ValueError(f"input_layout={input_layout!r}: expected one of {', '.join(LAYOUTS)}")
    layout = input_layout.upper()
    if sparse_mode not in SUPPORTED_SPARSE_MODES:
        name = SPARSE_MODE_NAMES.get(sparse_mode, "unknown")
        raise NotImplementedError(
            f"sparse_mode={sparse_mode!r} ({name}) is not emulated; supported: "
            f"{', '.join(map(str, SUPPORTED_SPARSE_MODES))}")
    if sparse_mode in TND_ONLY_SPARSE_MODES and layout != "TND":
        raise ValueError(f"sparse_mode={sparse_mode} is only valid with input_layout='TND', "
                         f"got {input_layout!r}")
    if padding_mask is not None:
        raise NotImplementedError("padding_mask is reserved by torch_npu (not supported); "
                                  "express padding through atten_mask")
    if not 0.0 < float(keep_prob) <= 1.0:
        raise ValueError(f"keep_prob={keep_prob!r}: expected 0 < keep_prob <= 1")
    if inner_precise not in (0, 1, 2):
        raise ValueError(f"inner_precise={inner_precise!r}: expected 0, 1 or 2")
    for name, val in (("pre_tockens", pre_tockens), ("next_tockens", next_tockens)):
        if isinstance(val, bool) or not isinstance(val, int):
            raise ValueError(f"{name}={val!r}: expected an int")
    check_tensors(query, key, value, layout)
    nq, nkv, d = head_counts(query, key, head_num, layout)
    check_batch(query, key, layout)
    if atten_mask is not None:
        check_mask_dtype(atten_mask)
        if sparse_mode in COMPRESSED_MODES:
            check_compressed(atten_mask, sparse_mode)
    elif sparse_mode in COMPRESSED_MODES:
        warnings.warn(f"npu_fusion_attention: sparse_mode={sparse_mode} with atten_mask=None; the NPU "
                      "ignores the mode and computes full attention. Pass the compressed 2048x2048 "
                      "triu(ones, 1) mask.", stacklevel=2)
    dropout = float(keep_prob) < 1.0
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,)).item()) if dropout else 0

    if layout == "TND":
        if actual_seq_qlen is None or actual_seq_kvlen is None:
            missing = "actual_seq_qlen" if actual_seq_qlen is None else "actual_seq_kvlen"
            seq_lengths(missing, None, 0)
        if pse is not None:
            raise NotImplementedError("pse with input_layout='TND' is not emulated")
        return _tnd(query, key, value, nq, nkv, atten_mask, scale, keep_prob, seed,
                    pre_tockens, next_tockens, actual_seq_qlen, actual_seq_kvlen,
                    sparse_mode, dropout)
    if actual_seq_qlen is not None or actual_seq_kvlen is not None:
        raise ValueError("actual_seq_qlen / actual_seq_kvlen are only used with "
                         f"input_layout='TND', got {input_layout!r}")

    q = to_bnsd(query, layout, nq)
    k = to_bnsd(key, layout, nkv)
    v = to_bnsd(value, layout, nkv)
    b, _, sq, _ = q.shape
    skv = k.shape[2]
    if pse is not None:
        if not torch.is_tensor(pse):
            raise TypeError(f"pse must be a torch.Tensor, got {type(pse).__name__}")
        try:
            torch.broadcast_shapes(tuple(pse.shape), (b, nq, sq, skv))
        except RuntimeError as exc:
            raise ValueError(f"pse shape {tuple(pse.shape)} does not broadcast to BNSS "
                             f"{(b, nq, sq, skv)}") from exc
    masked = None
    if atten_mask is not None:
        given = full_mask_4d(atten_mask, b, nq, sq, skv) if sparse_mode in (0, 1) else None
        masked = _masked(given, sq, skv, sparse_mode, pre_tockens, next_tockens, query.device)
    numels = b * nq * sq * skv if dropout else 0
    keep = dropout_keep_mask(seed, numels, keep_prob, query.device) if dropout else None
    out, row_max, row_sum = _attend(q, k, v, masked, scale, pse, keep, keep_prob)
    out = from_bnsd(out.to(query.dtype), layout)
    return (out, _stats(row_max), _stats(row_sum), query.new_empty(0), seed, 0, numels)


def _masked(given, sq, skv, sparse_mode, pre, nxt, dev):
    """NPU mask (True = masked) of ``sparse_mode`` 0-4; ``given``: the caller's ``atten_mask``
    fitted to the scores (read by modes 0 and 1 only)."""
    if sparse_mode in (0, 1):
        return given | ~band_mask(sq, skv, pre, nxt, "top_left", dev) if sparse_mode == 0 else given
    if sparse_mode == 4:
        return ~band_mask(sq, skv, pre, nxt, "bottom_right", dev)
    return ~causal_mask(sq, skv, "top_left" if sparse_mode == 2 else "bottom_right", dev)


def _tnd(query, key, value, nq, nkv, atten_mask, scale, keep_prob, seed, pre, nxt,
         actual_seq_qlen, actual_seq_kvlen, sparse_mode, dropout):
    lens_q = seq_lengths("actual_seq_qlen", actual_seq_qlen, query.shape[0])
    lens_kv = seq_lengths("actual_seq_kvlen", actual_seq_kvlen, key.shape[0])
    if len(lens_q) != len(lens_kv):
        raise ValueError(f"actual_seq_qlen has {len(lens_q)} samples, actual_seq_kvlen "
                         f"{len(lens_kv)}: they must describe the same batch")
    if len(lens_q) > 1 and lens_q[0] == 0 and lens_kv[0] == 0:
        warnings.warn("actual_seq_qlen and actual_seq_kvlen start with 0: NPU lengths are "
                      "cumulative ends without flash-attn's leading 0", stacklevel=3)
    if atten_mask is not None and sparse_mode in (0, 1):
        want = (max(lens_q), max(lens_kv))
        if tuple(atten_mask.shape) != want:
            raise ValueError(f"atten_mask shape {tuple(atten_mask.shape)}: input_layout='TND' "
                             f"takes an SS mask of maxSq x maxSkv = {want}")
    nonempty = [i for i, n in enumerate(lens_q) if n > 0]
    band_sample = None
    if nonempty and sparse_mode in TND_ONLY_SPARSE_MODES:
        band_sample = nonempty[-1] if sparse_mode == 7 else nonempty[0]
    numels = nq * sum(a * b for a, b in zip(lens_q, lens_kv)) if dropout else 0
    keep_all = dropout_keep_mask(seed, numels, keep_prob, query.device) if dropout else None

    outs, maxes, sums = [], [], []
    q0 = k0 = used = 0
    for i, (sq, skv) in enumerate(zip(lens_q, lens_kv)):
        q = query[q0:q0 + sq].permute(1, 0, 2).unsqueeze(0)
        k = key[k0:k0 + skv].permute(1, 0, 2).unsqueeze(0)
        v = value[k0:k0 + skv].permute(1, 0, 2).unsqueeze(0)
        q0, k0 = q0 + sq, k0 + skv
        if sq == 0:
            continue
        masked = None
        if atten_mask is not None:
            # 7 / 8: the band sample is mode 4, the others causal bottom-right / top-left.
            mode = 4 if i == band_sample else {7: 3, 8: 2}.get(sparse_mode, sparse_mode)
            given = atten_mask[:sq, :skv].bool() if mode in (0, 1) else None
            masked = _masked(given, sq, skv, mode, pre, nxt, query.device)
        keep = None
        if keep_all is not None:
            count = nq * sq * skv
            keep, used = keep_all[used:used + count], used + count
        out, row_max, row_sum = _attend(q, k, v, masked, scale, None, keep, keep_prob)
        outs.append(out[0].permute(1, 0, 2))  # [sq, N, D]
        maxes.append(row_max[0].permute(1, 0))  # [sq, N]
        sums.append(row_sum[0].permute(1, 0))
    t, d = query.shape[0], query.shape[-1]
    if outs:
        out = torch.cat(outs, dim=0).to(query.dtype)
        row_max, row_sum = torch.cat(maxes, dim=0), torch.cat(sums, dim=0)
    else:
        out = query.new_zeros(t, nq, d)
        row_max = torch.full((t, nq), float("-inf"), device=query.device)
        row_sum = torch.zeros(t, nq, device=query.device)
    return (out, _stats(row_max), _stats(row_sum), query.new_empty(0), seed, 0, numels)
