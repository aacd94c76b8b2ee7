"""The cases of stage 02's grid (attention/cases.py): every dimension covered, a wrong case
refused, the keep masks each case makes."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.attention.cases import BATCH_KINDS, MASK_KINDS, AttentionCase, build_grid, case_keep_mask
from hyport_lib.npu_attention import reference as R


def _case(**kw):
    base = dict(layout="BNSD", dtype="float16", mask="causal", batch="dense", lengths_q=(5,),
                lengths_kv=(11,), nq=4, nkv=2, head_dim=64)
    base.update(kw)
    return AttentionCase(**base)


def test_default_grid_covers_every_dimension():
    grid = build_grid()
    assert {c.layout for c in grid} == set(R.LAYOUTS)
    assert {c.dtype for c in grid} == {"float16", "bfloat16", "float32"}
    assert {c.mask for c in grid} == set(MASK_KINDS)
    assert {c.batch for c in grid} == set(BATCH_KINDS)
    assert {c.head_dim for c in grid} == {64, 128}
    assert any(c.nq != c.nkv for c in grid) and any(c.nq == c.nkv for c in grid)
    assert any(c.lengths_q != c.lengths_kv for c in grid)  # Sq != Skv
    assert any(1 in c.lengths_q for c in grid)
    assert any(n % 2 for c in grid for n in c.lengths_q + c.lengths_kv)  # odd lengths
    assert {c.npu_sparse_mode for c in grid} >= {0, 2, None}
    assert len(build_grid(full=True)) > 3 * len(grid)
    assert {c.dtype for c in build_grid(dtypes=["bfloat16"])} == {"bfloat16"}


@pytest.mark.parametrize("kw, pattern", [
    (dict(layout="TND"), "TND is packed-only"),
    (dict(layout="XYZ"), "layout"),
    (dict(dtype="int8"), "dtype"),
    (dict(mask="sliding"), "mask"),
    (dict(nq=3, nkv=2), "multiple"),
    (dict(mask="spans", spans=()), "spans"),
    (dict(batch="dense", lengths_q=(3, 4), lengths_kv=(3, 4)), "dense"),
])
def test_case_validation(kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        _case(**kw)


def test_case_keep_masks():
    # packed spans: block-diagonal causal + the span (1, 3) of sample 0 both ways
    case = _case(layout="TND", batch="packed", mask="spans", lengths_q=(4, 2),
                 lengths_kv=(4, 2), spans=(((1, 3),), ()))
    keep = case_keep_mask(case)[0, 0]
    want = R.block_diagonal_mask([4, 2], causal=True)
    want[1:3, 1:3] = True
    assert torch.equal(keep, want)
    # padded: per-sample bottom-right causal, padding rows fully masked
    keep = case_keep_mask(_case(batch="padded", lengths_q=(2, 1), lengths_kv=(3, 2)))
    assert keep[1, 0].tolist() == [[True, True, False], [False, False, False]]
