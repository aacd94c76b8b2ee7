"""The implementations stage 02 compares (attention/implementations.py): the
npu_fusion_attention calls a port writes for each case, the same on the torch_npu double."""

from __future__ import annotations

import torch

from hyport_lib.attention.cases import case_keep_mask, make_case_data
from hyport_lib.attention.implementations import nfa_mapping, run_nfa
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.emulation import npu_fusion_attention as emulated
from hyport_lib.port.generated.flash_attn_ascend import compressed_causal_mask

from .test_cases import _case


def test_nfa_mapping_per_case():
    """The sparse arguments a port passes: compressed mask + mode 3 / 4, full masks
    (True = masked) for padded batches, the forced modes 2 and 0, TND lengths without 0."""
    compressed = compressed_causal_mask()

    def call(**kw):
        case = _case(**kw)
        calls = nfa_mapping(case, make_case_data(case), "cpu", compressed)
        return case, calls

    _, (c,) = call()  # causal, Sq != Skv: bottom-right
    assert c["sparse_mode"] == 3 and c["atten_mask"] is compressed and c["scale"] == 0.125
    _, (c,) = call(lengths_q=(6,), lengths_kv=(6,), npu_sparse_mode=2)
    assert c["sparse_mode"] == 2 and c["atten_mask"] is compressed
    _, (c,) = call(mask="band", window=(4, 2))
    assert (c["sparse_mode"], c["pre_tockens"], c["next_tockens"]) == (4, 4, 2)
    case, (c,) = call(mask="band", window=(3, 0), lengths_q=(9,), lengths_kv=(9,),
                      npu_sparse_mode=0)
    assert c["sparse_mode"] == 0 and tuple(c["atten_mask"].shape) == (9, 9)
    assert torch.equal(c["atten_mask"], ~R.window_mask(9, 9, (3, 0)))
    case, (c,) = call(batch="padded", lengths_q=(5, 2), lengths_kv=(11, 3))
    assert c["sparse_mode"] == 1 and torch.equal(c["atten_mask"], ~case_keep_mask(case))
    _, (c,) = call(mask="bidirectional")
    assert c.get("atten_mask") is None and c.get("sparse_mode", 0) == 0
    _, calls = call(layout="TND", batch="packed", mask="spans", lengths_q=(4, 3),
                    lengths_kv=(4, 3), spans=(((1, 3),), ()))
    assert len(calls) == 2 and calls[0]["sparse_mode"] == 3
    assert calls[0]["actual_seq_qlen"] == [4, 7] and calls[1]["actual_seq_qlen"] == [2]
    assert calls[1]["rows"].tolist() == [1, 2] and "atten_mask" not in calls[1]


def test_fake_npu_runs_through_the_same_mapping(fake_npu):
    case = _case(layout="TND", batch="packed", mask="band", window=(2, 0),
                 lengths_q=(4, 7), lengths_kv=(4, 7))
    data = make_case_data(case)
    got = run_nfa(fake_npu.npu_fusion_attention, case, data, "cpu")
    want = run_nfa(emulated, case, data, "cpu")
    assert torch.equal(got, want)
