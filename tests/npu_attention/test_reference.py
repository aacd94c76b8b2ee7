"""The float64 reference attention and the mask builders (True = attend)."""

from __future__ import annotations

import math

import pytest
import torch

from hyport_lib.npu_attention import reference as R

T, F = True, False


def _naive(q, k, v, keep, scale):
    """Scalar-loop attention from the definition: an independent check of the reference."""
    b_, nq, sq, d = q.shape
    nkv, skv = k.shape[1], k.shape[2]
    out = torch.zeros(b_, nq, sq, d, dtype=torch.float64)
    for b in range(b_):
        for h in range(nq):
            hk = h // (nq // nkv)
            for i in range(sq):
                idx = [j for j in range(skv) if keep[b, h, i, j]]
                if not idx:
                    continue
                s = [scale * sum(float(q[b, h, i, x]) * float(k[b, hk, j, x]) for x in range(d))
                     for j in idx]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                tot = sum(w)
                for x in range(d):
                    out[b, h, i, x] = sum(wj * float(v[b, hk, j, x]) for wj, j in zip(w, idx)) / tot
    return out


def test_causal_masks_hand_written():
    # Sq=2, Skv=4. top-left: row i sees j <= i. bottom-right: j <= i + (4 - 2).
    assert R.causal_mask(2, 4, "top_left").tolist() == [[T, F, F, F], [T, T, F, F]]
    assert R.causal_mask(2, 4, "bottom_right").tolist() == [[T, T, T, F], [T, T, T, T]]
    # Sq > Skv bottom-right: offset -1, the first row sees nothing.
    assert R.causal_mask(3, 2, "bottom_right").tolist() == [[F, F], [T, F], [T, T]]


def test_band_and_window_masks():
    # -pre <= j - i <= next with pre=1, next=0 (top-left): the diagonal and one before.
    assert R.band_mask(3, 3, 1, 0).tolist() == [[T, F, F], [T, T, F], [F, T, T]]
    # Negative next: strictly before the diagonal, at most 2 back.
    assert R.band_mask(3, 3, 2, -1).tolist() == [[F, F, F], [T, F, F], [T, T, F]]
    # flash-attn window (left=1, right=0) on Sq=2, Skv=3 is bottom-right aligned.
    assert R.window_mask(2, 3, (1, 0)).tolist() == [[T, T, F], [F, T, T]]
    assert torch.equal(R.window_mask(4, 6, (-1, -1), causal=True),
                       R.causal_mask(4, 6, "bottom_right"))
    with pytest.raises(ValueError, match="align"):
        R.band_mask(2, 2, align="middle")


def test_padding_and_padded_mask():
    assert R.padding_mask([2, 3], 4).tolist() == [[T, T, F, F], [T, T, T, F]]
    m = R.padded_mask([1, 2], [2, 3], sq=2, skv=3, causal=True)
    assert m.shape == (2, 1, 2, 3)
    # sample 0: 1x2 bottom-right causal = [[T, T]]; its query row 1 is padding (all F).
    assert m[0, 0].tolist() == [[T, T, F], [F, F, F]]
    # sample 1: 2x3 bottom-right causal.
    assert m[1, 0].tolist() == [[T, T, F], [T, T, T]]
    with pytest.raises(ValueError, match="exceed"):
        R.padded_mask([3], sq=2)


def test_block_diagonal_with_zero_length_sample():
    m = R.block_diagonal_mask([2, 0, 1], [1, 2, 2], causal=True)
    # sample 0: 2x1 bottom-right (offset -1): row 0 sees nothing, row 1 sees key 0.
    # sample 1: no query rows (its 2 keys are never attended); sample 2: 1x2 -> both keys.
    assert m.tolist() == [
        [F, F, F, F, F],
        [T, F, F, F, F],
        [F, F, F, T, T],
    ]
    full = R.block_diagonal_mask([2, 1])
    assert full.tolist() == [[T, T, F], [T, T, F], [F, F, T]]


def test_bidirectional_spans():
    m = R.bidirectional_span_mask(4, [(1, 3)])
    # causal plus the image tokens 1 and 2 seeing each other.
    assert m.tolist() == [[T, F, F, F], [T, T, T, F], [T, T, T, F], [T, T, T, T]]
    packed = R.bidirectional_span_mask(0, [(0, 2)], base=R.block_diagonal_mask([2, 2], causal=True))
    assert packed.tolist() == [[T, T, F, F], [T, T, F, F], [F, F, T, F], [F, F, T, T]]
    with pytest.raises(ValueError, match="spans"):
        R.bidirectional_span_mask(4, [(0, 2), (1, 3)])
    with pytest.raises(ValueError, match="spans"):
        R.bidirectional_span_mask(4, [(2, 5)])


def test_npu_conversions():
    keep = R.causal_mask(3, 3)
    masked = R.to_npu_mask(keep)
    assert torch.equal(masked, torch.ones(3, 3, dtype=torch.bool).triu(1))
    assert R.cumulative_lengths([2, 0, 3]) == [2, 2, 5]
    assert R.cumulative_lengths([2, 0, 3], leading_zero=True) == [0, 2, 2, 5]
    assert R.lengths_from_cumulative([2, 2, 5]) == [2, 0, 3]
    with pytest.raises(ValueError, match="non-decreasing"):
        R.lengths_from_cumulative([3, 2])


@pytest.mark.parametrize("layout", R.LAYOUTS)
def test_layout_round_trip(layout):
    x = torch.randn(1 if layout == "TND" else 2, 3, 5, 4)  # BNSD
    y = R.from_bnsd(x, layout)
    assert torch.equal(R.to_bnsd(y, layout, 3), x)


def test_reference_matches_naive_loops_with_gqa_and_mask():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 3, 5, generator=g)
    k = torch.randn(2, 2, 4, 5, generator=g)
    v = torch.randn(2, 2, 4, 5, generator=g)
    keep = R.padded_mask([3, 2], [4, 3], sq=3, skv=4, causal=True).expand(2, 4, 3, 4)
    res = R.attention_reference(q, k, v, keep, scale=0.7, return_stats=True)
    assert res.out.dtype == torch.float64
    assert torch.allclose(res.out, _naive(q, k, v, keep, 0.7), atol=1e-12)
    # sample 1, query row 2 is padding: fully masked -> 0 output, max -inf, sum 0.
    assert res.empty_rows[1, :, 2].all() and not res.empty_rows[0].any()
    assert torch.all(res.out[1, :, 2] == 0)
    assert torch.isneginf(res.row_max[1, :, 2]).all() and torch.all(res.row_sum[1, :, 2] == 0)


def test_reference_hand_computed_scale_and_default():
    # One query, D=1: scores = scale * q * k = scale * ln2 * [0, 1].
    q = torch.tensor([[[[math.log(2)]]]])
    k = torch.tensor([[[[0.0], [1.0]]]])
    v = torch.tensor([[[[3.0], [6.0]]]])
    # scale=1: weights exp([0, ln2]) = [1, 2] / 3 -> 3/3 + 12/3 = 5.
    assert R.attention_reference(q, k, v, scale=1.0).item() == pytest.approx(5.0)
    # default scale 1/sqrt(D) = 1 for D=1: same 5.
    assert R.attention_reference(q, k, v).item() == pytest.approx(5.0)
    # bias added after scaling: +ln2 on key 1 -> weights [1, 4] / 5 -> (3 + 24) / 5 = 5.4.
    bias = torch.tensor([0.0, math.log(2)]).view(1, 1, 1, 2)
    assert R.attention_reference(q, k, v, scale=1.0, bias=bias).item() == pytest.approx(5.4)


def test_reference_dropout_keep_pattern():
    q = torch.zeros(1, 1, 1, 1)
    k = torch.zeros(1, 1, 2, 1)
    v = torch.tensor([[[[2.0], [4.0]]]])
    # uniform weights [1/2, 1/2]; drop key 0, keep_prob 0.5 -> (1/2) * 4 / 0.5 = 4.
    keep = torch.tensor([F, T]).view(1, 1, 1, 2)
    assert R.attention_reference(q, k, v, dropout_keep=keep, keep_prob=0.5).item() == 4.0


def test_reference_rejects_bad_heads():
    with pytest.raises(ValueError, match="multiple"):
        R.attention_reference(torch.zeros(1, 3, 2, 4), torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
