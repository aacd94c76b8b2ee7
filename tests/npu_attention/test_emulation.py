"""The npu_fusion_attention emulation against the float64 reference and hand-computed answers."""

from __future__ import annotations

import contextlib
import math
import random

import pytest
import torch

from hyport_lib.npu_attention import reference as R
from hyport_lib.port.generated.flash_attn_ascend import NFA_MASK_SIZE, compressed_causal_mask
from hyport_lib.npu_attention.emulation import SUPPORTED_SPARSE_MODES, dropout_keep_mask, npu_fusion_attention as nfa

CMASK = compressed_causal_mask()
BIG = 2147483647
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


# --------------------------------------------------------------------------------------
# Hand-computed cases. With q = 0 every score is 0, so each row's output is the plain
# mean of the values it may attend: the masks can be checked by hand. Values are
# powers of two so that every subset has its own mean.
# --------------------------------------------------------------------------------------
def _zero_q(sq=2, values=(1.0, 2.0, 4.0, 8.0)):
    q = torch.zeros(1, 1, sq, 1)
    v = torch.tensor(values).view(1, 1, -1, 1)
    return q, torch.zeros_like(v), v


def _rows(out):
    return [round(x, 5) for x in out.reshape(-1).tolist()]


def test_hand_mode0_no_mask_is_full_attention():
    q, k, v = _zero_q()
    out = nfa(q, k, v, 1, "BNSD")[0]
    # both rows: (1 + 2 + 4 + 8) / 4 = 3.75
    assert _rows(out) == [3.75, 3.75]


def test_hand_mode0_band_from_top_left():
    q, k, v = _zero_q()
    mask = torch.zeros(2, 4, dtype=torch.bool)
    out, mx, sm = nfa(q, k, v, 1, "BNSD", atten_mask=mask, pre_tockens=0, next_tockens=1)[:3]
    # 0 <= j - i <= 1: row 0 -> keys 0,1: (1 + 2) / 2 = 1.5; row 1 -> keys 1,2: (2 + 4) / 2 = 3
    assert _rows(out) == [1.5, 3.0]
    # scores are all 0: max 0; sum = number of attended keys (2 each), over an axis of 8
    assert mx.shape == (1, 1, 2, 8) and mx.dtype == torch.float32
    assert mx.eq(0).all() and sm.eq(2).all()


def test_hand_mode1_full_mask_ignores_band():
    q, k, v = _zero_q()
    mask = torch.tensor([[False, True, False, True], [True, True, True, False]])
    out = nfa(q, k, v, 1, "BNSD", atten_mask=mask, pre_tockens=0, next_tockens=0,
              sparse_mode=1)[0]
    # row 0 attends keys 0,2: (1 + 4) / 2 = 2.5; row 1 only key 3: 8
    assert _rows(out) == [2.5, 8.0]


def test_hand_mode2_causal_top_left():
    q, k, v = _zero_q()
    out, _, sm = nfa(q, k, v, 1, "BNSD", atten_mask=CMASK, sparse_mode=2)[:3]
    # j <= i: row 0 -> 1; row 1 -> (1 + 2) / 2 = 1.5
    assert _rows(out) == [1.0, 1.5]
    assert sm[0, 0, :, 0].tolist() == [1.0, 2.0]


def test_hand_mode3_causal_bottom_right():
    q, k, v = _zero_q()
    out = nfa(q, k, v, 1, "BNSD", atten_mask=CMASK, sparse_mode=3)[0]
    # j <= i + (4 - 2): row 0 -> keys 0..2: 7/3 = 2.33333; row 1 -> all: 3.75
    assert _rows(out) == [2.33333, 3.75]


def test_hand_mode4_band_bottom_right():
    q, k, v = _zero_q()
    out = nfa(q, k, v, 1, "BNSD", atten_mask=CMASK, sparse_mode=4, pre_tockens=1,
              next_tockens=0)[0]
    # -1 <= j - i - 2 <= 0: row 0 -> keys 1,2: 3; row 1 -> keys 2,3: 6
    assert _rows(out) == [3.0, 6.0]


def _tnd_hand(sparse_mode, qlen, kvlen, pre=BIG, nxt=BIG, mask=CMASK):
    # Sample A: 1 query, values [16, 32]; sample B: 2 queries, values [1, 2, 4, 8];
    # an empty sample (0 queries, 0 keys) where the cumulative lists repeat a value.
    values = [16.0, 32.0, 1.0, 2.0, 4.0, 8.0]
    q = torch.zeros(3, 1, 1)
    v = torch.tensor(values).view(6, 1, 1)
    return nfa(q, torch.zeros_like(v), v, 1, "TND", atten_mask=mask, sparse_mode=sparse_mode,
               pre_tockens=pre, next_tockens=nxt, actual_seq_qlen=qlen,
               actual_seq_kvlen=kvlen)


def test_hand_tnd_mode3_per_sample_causal_with_empty_sample():
    out, mx = _tnd_hand(3, [1, 1, 3], [2, 2, 6])[:2]
    # A (1x2, offset 1): row 0 sees both: (16 + 32) / 2 = 24
    # empty sample: nothing. B (2x4, offset 2): 7/3 and 3.75
    assert _rows(out) == [24.0, 2.33333, 3.75]
    assert mx.shape == (3, 1, 8)


def test_hand_tnd_mode7_last_sample_is_band():
    out = _tnd_hand(7, [1, 3, 3], [2, 6, 6], pre=3, nxt=-1)[0]
    # A (not last): causal bottom-right -> 24.
    # B (last non-empty; the trailing empty sample is skipped): band from the bottom-right,
    # -3 <= j - i - 2 <= -1: row 0 -> keys 0,1: 1.5; row 1 -> keys 0..2: 7/3
    assert _rows(out) == [24.0, 1.5, 2.33333]


def test_hand_tnd_mode8_first_sample_is_band():
    out = _tnd_hand(8, [1, 1, 3], [2, 2, 6], pre=0, nxt=0)[0]
    # A (first non-empty): band from the bottom-right, j - 0 - 1 == 0 -> key 1: 32.
    # B: causal top-left: row 0 -> 1; row 1 -> (1 + 2) / 2 = 1.5
    assert _rows(out) == [32.0, 1.0, 1.5]


def test_hand_tnd_mode0_ss_mask_per_sample():
    mask = torch.tensor([[False, True, True, True], [False, False, True, True]])  # 2 x 4
    out = _tnd_hand(0, [1, 3], [2, 6], mask=mask)[0]
    # A uses mask[:1, :2] = [F, T] -> key 0: 16. B uses mask[:2, :4]:
    # row 0 -> key 0: 1; row 1 -> keys 0,1: 1.5
    assert _rows(out) == [16.0, 1.0, 1.5]


def test_hand_scale_default_is_one_and_pse_before_scale():
    # D=1, q = ln2, k = [0, 1]: scores = scale * ln2 * [0, 1]; v = [3, 6].
    q = torch.tensor([math.log(2)]).view(1, 1, 1, 1)
    k = torch.tensor([0.0, 1.0]).view(1, 1, 2, 1)
    v = torch.tensor([3.0, 6.0]).view(1, 1, 2, 1)
    # default scale 1.0: weights [1, 2] / 3 -> 1 + 4 = 5
    assert nfa(q, k, v, 1, "BNSD")[0].item() == pytest.approx(5.0, abs=1e-6)
    # scale 0.5: weights [1, sqrt2] / (1 + sqrt2) -> (3 + 6 sqrt2) / (1 + sqrt2) = 4.757359
    assert nfa(q, k, v, 1, "BNSD", scale=0.5)[0].item() == pytest.approx(4.757359, abs=1e-5)
    # pse = [0, ln3] added BEFORE scaling, q = 0, scale 2: scores [0, 2 ln3] -> weights
    # [1, 9] / 10 -> (3 + 54) / 10 = 5.7 (adding after scaling would give 5.25)
    pse = torch.tensor([0.0, math.log(3)]).view(1, 1, 1, 2)
    out = nfa(torch.zeros_like(q), k, v, 1, "BNSD", pse=pse, scale=2.0)[0]
    assert out.item() == pytest.approx(5.7, abs=1e-5)


def test_hand_gqa_head_mapping():
    # 4 query heads, 2 kv heads: heads 0,1 use kv head 0 (value 1), heads 2,3 kv head 1 (value 5).
    q = torch.zeros(1, 4, 1, 1)
    k = torch.zeros(1, 2, 1, 1)
    v = torch.tensor([1.0, 5.0]).view(1, 2, 1, 1)
    assert _rows(nfa(q, k, v, 4, "BNSD")[0]) == [1.0, 1.0, 5.0, 5.0]


def test_fully_masked_row_gives_zero():
    q, k, v = _zero_q()
    mask = torch.tensor([[True, True, True, True], [False, True, True, True]])
    out, mx, sm = nfa(q, k, v, 1, "BNSD", atten_mask=mask, sparse_mode=1)[:3]
    assert _rows(out) == [0.0, 1.0]
    assert torch.isneginf(mx[0, 0, 0]).all() and sm[0, 0, 0].eq(0).all()


# --------------------------------------------------------------------------------------
# Randomised: every layout x sparse mode x dtype against the float64 reference
# --------------------------------------------------------------------------------------
def _keep_for_mode(mode, sq, skv, pre, nxt, user_keep):
    if mode == 0:
        return user_keep & R.band_mask(sq, skv, pre, nxt, "top_left")
    if mode == 1:
        return user_keep
    if mode == 2:
        return R.causal_mask(sq, skv, "top_left")
    if mode == 3:
        return R.causal_mask(sq, skv, "bottom_right")
    return R.band_mask(sq, skv, pre, nxt, "bottom_right")


def _random_case(seed, layout, mode, dtype):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    b, nkv, groups, d = rng.randint(1, 2), rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([8, 16])
    nq = nkv * groups
    sq, skv = rng.randint(1, 9), rng.randint(1, 9)
    q = torch.randn(b, nq, sq, d, generator=g).to(dtype)
    k = torch.randn(b, nkv, skv, d, generator=g).to(dtype)
    v = torch.randn(b, nkv, skv, d, generator=g).to(dtype)
    user_keep = torch.rand(b, 1, sq, skv, generator=g) > 0.3
    pre, nxt = rng.randint(0, 4), rng.randint(0, 4)
    return q, k, v, nq, nkv, user_keep, pre, nxt, b, sq, skv


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
def test_random_vs_reference(layout, mode, dtype):
    for seed in range(3):
        q, k, v, nq, nkv, user_keep, pre, nxt, b, sq, skv = _random_case(
            seed * 31 + mode, layout, mode, dtype)
        atten_mask = R.to_npu_mask(user_keep) if mode in (0, 1) else CMASK
        keep = _keep_for_mode(mode, sq, skv, pre, nxt, user_keep)
        out, mx, sm, so, *_ = nfa(
            R.from_bnsd(q, layout), R.from_bnsd(k, layout), R.from_bnsd(v, layout), nq, layout,
            atten_mask=atten_mask, scale=0.3, pre_tockens=pre, next_tockens=nxt, sparse_mode=mode)
        assert out.dtype == dtype and so.numel() == 0
        ref = R.attention_reference(q, k, v, keep, scale=0.3, return_stats=True)
        got = R.to_bnsd(out, layout, nq).double()
        assert (got - ref.out).abs().max().item() <= TOL[dtype], (layout, mode, seed)
        assert mx.shape == (b, nq, sq, 8) and mx.dtype == torch.float32 == sm.dtype
        finite = ~ref.empty_rows
        assert torch.allclose(mx[..., 0].double()[finite], ref.row_max[finite], atol=TOL[dtype] * 5)
        assert torch.allclose(sm[..., 3].double(), ref.row_sum, rtol=TOL[dtype] * 5, atol=1e-5)
        assert torch.all(got[ref.empty_rows.unsqueeze(-1).expand_as(got)] == 0)


def _tnd_keep(mode, lens_q, lens_kv, pre, nxt, user_keep):
    """Reference keep mask [Tq, Tkv] assembled sample by sample."""
    out = torch.zeros(sum(lens_q), sum(lens_kv), dtype=torch.bool)
    nonempty = [i for i, n in enumerate(lens_q) if n]
    band_i = (nonempty[-1] if mode == 7 else nonempty[0]) if nonempty else None
    q0 = k0 = 0
    for i, (a, c) in enumerate(zip(lens_q, lens_kv)):
        if mode in (7, 8) and i == band_i:
            m = R.band_mask(a, c, pre, nxt, "bottom_right")
        elif mode == 7:
            m = R.causal_mask(a, c, "bottom_right")
        elif mode == 8:
            m = R.causal_mask(a, c, "top_left")
        elif mode is None:
            m = torch.ones(a, c, dtype=torch.bool)
        else:
            m = _keep_for_mode(mode, a, c, pre, nxt, user_keep[:a, :c])
        out[q0:q0 + a, k0:k0 + c] = m
        q0, k0 = q0 + a, k0 + c
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", [None, 0, 1, 2, 3, 4, 7, 8])
def test_random_tnd_vs_reference(mode, dtype):
    for seed in range(3):
        rng = random.Random(100 + seed)
        g = torch.Generator().manual_seed(seed)
        n = rng.randint(2, 4)
        lens_q = [rng.choice([0, 1, 2, 3, 5]) for _ in range(n)]
        lens_kv = [rng.choice([0, 1, 4, 6]) if a else rng.choice([0, 2]) for a in lens_q]
        lens_q[-1 if seed % 2 else 0] = max(lens_q[0], 1)  # at least one non-empty sample
        nkv, groups, d = 2, rng.choice([1, 3]), 8
        nq = nkv * groups
        q = torch.randn(sum(lens_q), nq, d, generator=g).to(dtype)
        k = torch.randn(sum(lens_kv), nkv, d, generator=g).to(dtype)
        v = torch.randn(sum(lens_kv), nkv, d, generator=g).to(dtype)
        user_keep = torch.rand(max(lens_q), max(lens_kv), generator=g) > 0.3
        pre, nxt = rng.randint(1, 5), rng.randint(-1, 3)
        if mode in (0, 1):
            atten_mask = R.to_npu_mask(user_keep)
        else:
            atten_mask = None if mode is None else CMASK
        cum_q, cum_kv = R.cumulative_lengths(lens_q), R.cumulative_lengths(lens_kv)
        with pytest.warns(UserWarning) if cum_q[0] == cum_kv[0] == 0 else contextlib.nullcontext():
            out, mx, sm = nfa(q, k, v, nq, "TND", atten_mask=atten_mask, scale=0.25,
                              pre_tockens=pre, next_tockens=nxt, sparse_mode=mode or 0,
                              actual_seq_qlen=cum_q, actual_seq_kvlen=cum_kv)[:3]
        keep = _tnd_keep(mode, lens_q, lens_kv, pre, nxt, user_keep)
        ref = R.attention_reference(R.to_bnsd(q, "TND"), R.to_bnsd(k, "TND"), R.to_bnsd(v, "TND"),
                                    keep, scale=0.25, return_stats=True)
        assert out.shape == q.shape and mx.shape == (sum(lens_q), nq, 8)
        err = (R.to_bnsd(out, "TND").double() - ref.out).abs().max().item() if out.numel() else 0
        assert err <= TOL[dtype], (mode, seed, lens_q, lens_kv)
        assert torch.allclose(sm[..., 0].double(), ref.row_sum[0].T, rtol=TOL[dtype] * 5, atol=1e-5)


# --------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------
def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 2, 8, generator=g) for _ in range(3))
    return q, k, v


def test_keep_prob_one_is_identical_to_no_dropout():
    q, k, v = _qkv()
    a = nfa(q, k, v, 2, "BSND", scale=0.35)
    b = nfa(q, k, v, 2, "BSND", scale=0.35, keep_prob=1.0)
    assert torch.equal(a[0], b[0]) and a[4:] == b[4:] == (0, 0, 0)


def test_dropout_reproducible_and_matches_reference():
    q, k, v = _qkv()
    torch.manual_seed(123)
    a = nfa(q, k, v, 2, "BSND", scale=0.35, keep_prob=0.7)
    torch.manual_seed(123)
    b = nfa(q, k, v, 2, "BSND", scale=0.35, keep_prob=0.7)
    assert torch.equal(a[0], b[0]) and a[4:] == b[4:]
    c = nfa(q, k, v, 2, "BSND", scale=0.35, keep_prob=0.7)  # a new seed: a new pattern
    assert c[4] != a[4] and not torch.equal(c[0], a[0])
    seed, offset, numels = a[4:]
    assert offset == 0 and numels == 2 * 2 * 4 * 4
    keep = dropout_keep_mask(seed, numels, 0.7).view(2, 2, 4, 4)
    ref = R.attention_reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                scale=0.35, dropout_keep=keep, keep_prob=0.7)
    assert torch.allclose(a[0].transpose(1, 2).double(), ref, atol=1e-5)


def test_dropout_tnd_reproducible():
    q = torch.randn(5, 2, 8)
    args = dict(actual_seq_qlen=[2, 5], actual_seq_kvlen=[2, 5], keep_prob=0.5)
    torch.manual_seed(7)
    a = nfa(q, q, q, 2, "TND", **args)
    torch.manual_seed(7)
    b = nfa(q, q, q, 2, "TND", **args)
    assert torch.equal(a[0], b[0]) and a[6] == 2 * (2 * 2 + 3 * 3)


# --------------------------------------------------------------------------------------
# Invalid inputs name the argument
# --------------------------------------------------------------------------------------
def _bnsd(nq=2, nkv=2, sq=3, skv=3, dtype=torch.float16):
    return (torch.zeros(1, nq, sq, 8, dtype=dtype), torch.zeros(1, nkv, skv, 8, dtype=dtype),
            torch.zeros(1, nkv, skv, 8, dtype=dtype))


@pytest.mark.parametrize("kwargs, exc, pattern", [
    (dict(input_layout="BHSD"), ValueError, "input_layout"),
    (dict(input_layout="BSH"), ValueError, "input_layout='BSH' expects query"),
    (dict(head_num=3), ValueError, "head_num=3"),
    (dict(sparse_mode=5), NotImplementedError, "sparse_mode=5"),
    (dict(sparse_mode=6), NotImplementedError, "sparse_mode=6"),
    (dict(sparse_mode=9), NotImplementedError, "sparse_mode=9"),
    (dict(sparse_mode=7, atten_mask=CMASK), ValueError, "sparse_mode=7 is only valid"),
    (dict(sparse_mode=3, atten_mask=~CMASK), ValueError, "atten_mask"),
    (dict(sparse_mode=2, atten_mask=torch.ones(3, 3, dtype=torch.bool).triu(1)), ValueError,
     "atten_mask shape"),
    (dict(atten_mask=torch.zeros(1, 2, 3, 4, dtype=torch.bool)), ValueError, "atten_mask shape"),
    (dict(atten_mask=torch.zeros(1, 2, 3, dtype=torch.bool)), ValueError, "atten_mask shape"),
    (dict(atten_mask=torch.zeros(3, 3)), TypeError, "atten_mask dtype"),
    (dict(keep_prob=0.0), ValueError, "keep_prob"),
    (dict(padding_mask=torch.zeros(3)), NotImplementedError, "padding_mask"),
    (dict(actual_seq_qlen=[3]), ValueError, "actual_seq_qlen"),
    (dict(pse=torch.zeros(2, 2, 2, 2)), ValueError, "pse"),
    (dict(inner_precise=5), ValueError, "inner_precise"),
])
def test_invalid_arguments_are_named(kwargs, exc, pattern):
    q, k, v = _bnsd()
    args = dict(head_num=2, input_layout="BNSD")
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        nfa(q, k, v, **args)


def test_invalid_gqa_dtype_and_tnd_lengths():
    q, k, v = _bnsd(nq=4, nkv=3)
    with pytest.raises(ValueError, match="head_num=4 is not a multiple of key's head count"):
        nfa(q, k, v, 4, "BNSD")
    q, k, v = _bnsd()
    with pytest.raises(TypeError, match="key is torch.float32"):
        nfa(q, k.float(), v, 2, "BNSD")
    with pytest.raises(TypeError, match="query dtype torch.float64"):
        nfa(q.double(), k.double(), v.double(), 2, "BNSD")
    with pytest.raises(ValueError, match="value shape"):
        nfa(q, k, v[:, :, :2], 2, "BNSD")
    t = torch.zeros(6, 2, 8)
    with pytest.raises(ValueError, match="needs actual_seq_qlen"):
        nfa(t, t, t, 2, "TND")
    with pytest.raises(ValueError, match="needs actual_seq_kvlen"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[6])
    # flash-attn's cu_seqlens (leading 0, one entry too many) is caught by the last value...
    with pytest.raises(ValueError, match="actual_seq_qlen=.*must equal the packed token count"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[0, 2, 4], actual_seq_kvlen=[2, 4, 6])
    # ... or by the leading-0 warning when it does add up.
    with pytest.warns(UserWarning, match="leading 0"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[0, 2, 6], actual_seq_kvlen=[0, 2, 6])
    with pytest.raises(ValueError, match="actual_seq_qlen has 3 samples, actual_seq_kvlen 2"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[2, 4, 6], actual_seq_kvlen=[2, 6])
    with pytest.raises(ValueError, match="non-decreasing"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[4, 2, 6], actual_seq_kvlen=[2, 4, 6])
    with pytest.raises(ValueError, match="maxSq x maxSkv"):
        nfa(t, t, t, 2, "TND", actual_seq_qlen=[2, 6], actual_seq_kvlen=[2, 6],
            atten_mask=torch.zeros(6, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="only used with input_layout='TND'"):
        nfa(q, k, v, 2, "BNSD", actual_seq_qlen=[3])


def test_mode_without_mask_warns_and_is_full_attention():
    q, k, v = _zero_q()
    with pytest.warns(UserWarning, match="sparse_mode=3 with atten_mask=None"):
        out = nfa(q, k, v, 1, "BNSD", sparse_mode=3)[0]
    assert _rows(out) == [3.75, 3.75]


def test_uint8_mask_and_supported_modes_listed():
    q, k, v = _zero_q()
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.uint8)
    assert _rows(nfa(q, k, v, 1, "BNSD", atten_mask=mask, sparse_mode=1)[0]) == [1.0, 1.5]
    assert SUPPORTED_SPARSE_MODES == (0, 1, 2, 3, 4, 7, 8)
    assert CMASK.shape == (NFA_MASK_SIZE, NFA_MASK_SIZE)


def test_gradients_flow_and_stay_finite_with_masked_rows():
    q, k, v = (torch.randn(1, 3, 2, 8, requires_grad=True) for _ in range(3))
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[0] = True  # a fully masked row
    out = nfa(q, k, v, 2, "BSND", atten_mask=mask, sparse_mode=1, scale=0.3)[0]
    out.float().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


# --------------------------------------------------------------------------------------
# The torch_npu test double forwards to the emulation
# --------------------------------------------------------------------------------------
def test_fake_npu_forwards_to_emulation(fake_npu):
    from hyport_lib.utils.imports import try_import

    torch_npu, error = try_import("torch_npu")
    assert error is None and torch_npu is fake_npu
    q, k, v = _qkv()
    got = torch_npu.npu_fusion_attention(q, k, v, 2, "BSND", atten_mask=CMASK, scale=0.35,
                                         sparse_mode=3)
    want = nfa(q, k, v, 2, "BSND", atten_mask=CMASK, scale=0.35, sparse_mode=3)
    assert len(got) == 7 and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    ref = R.attention_reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                R.causal_mask(4, 4), scale=0.35)
    assert torch.allclose(got[0].transpose(1, 2).double(), ref, atol=1e-5)
    with pytest.raises(NotImplementedError, match="sparse_mode=5"):
        torch_npu.npu_fusion_attention(q, k, v, 2, "BSND", sparse_mode=5)
