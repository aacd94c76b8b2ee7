"""Every implementation against float64 (attention/compare.py): metrics, verdicts in the
documented order, the classic porting bugs caught, the default grid passing."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from hyport_lib.attention import compare as C
from hyport_lib.attention import stage
from hyport_lib.attention.cases import build_grid, make_case_data
from hyport_lib.attention.compare import Metrics, compute_metrics, decide
from hyport_lib.attention.implementations import Implementation, eager_attention, nfa_mapping
from hyport_lib.attention.params import Params
from hyport_lib.npu_attention import reference as R
from hyport_lib.npu_attention.emulation import npu_fusion_attention as emulated
from hyport_lib.port.generated.flash_attn_ascend import compressed_causal_mask

from .test_cases import _case


def _backend(name, fn):
    return Implementation(name, f"{name} (test)", "cpu", fn)


def _nfa_backend(name, mutate):
    """An NFA backend whose call arguments are altered by ``mutate(call, case, data)``:
    the porting bugs the comparison exists to catch."""

    def run(case, data, device):
        calls = nfa_mapping(case, data, device, compressed_causal_mask())
        out = None
        for call in calls:
            rows = call.pop("rows")
            mutate(call, case, data)
            res = emulated(**call)[0]
            out = res if rows is None else out.index_copy(0, rows, res)
        return R.to_bnsd(out, case.layout, case.nq)

    return _backend(name, run)


def test_metrics_on_a_known_perturbation():
    case = _case(dtype="float32", batch="padded", lengths_q=(5, 3), lengths_kv=(11, 4))
    data = make_case_data(case, seed=3)
    out = data.ref.clone()
    valid = data.valid_rows.unsqueeze(-1).expand_as(out)
    n = int(valid.sum())
    idx = valid.nonzero()[0].tolist()
    out[tuple(idx)] += 0.01
    m = compute_metrics(out, data, data.ref, torch.float32)
    assert m.max_abs == pytest.approx(0.01, rel=1e-9)
    assert m.rmse == pytest.approx(math.sqrt(0.01 ** 2 / n), rel=1e-9)
    assert m.rel_gt_1e3 == pytest.approx(1 / n) or m.rel_gt_1e3 == 0  # one element at most
    assert m.eager_max_abs == 0 and m.bound == pytest.approx(m.atol)
    assert m.empty_rows == int(data.empty_rows.sum()) > 0 and m.empty_rows_out == "0"
    assert decide(m)[0] == "FAIL"  # 0.01 is far above fp32's rounding noise
    out[~valid] = float("nan")  # NaN only where nothing is attended: a WARN
    m = compute_metrics(out, data, data.ref, torch.float32)
    assert m.finite and m.empty_rows_out == "NaN"


def test_a_non_finite_eager_baseline_fails_the_rows_it_bounds():
    """flash-attn's rule bounds a kernel by eager's error: a NaN or an Inf in eager's output
    (float16 scores overflowing) makes the bound NaN, and ``max_abs > NaN`` is false for every
    kernel. Such a row is a FAIL naming eager, never a PASS."""
    case = _case(dtype="float32", batch="padded", lengths_q=(5, 3), lengths_kv=(11, 4))
    data = make_case_data(case, seed=3)
    eager = data.ref.clone()
    first_valid = tuple(data.valid_rows.nonzero()[0].tolist())
    for bad in (float("nan"), float("inf")):
        eager[first_valid] = bad
        m = compute_metrics(data.ref.clone(), data, eager, torch.float32)
        assert m.finite and not math.isfinite(m.bound)
        verdict, rule = decide(m)
        assert verdict == "FAIL" and "eager" in rule, (bad, rule)


def test_decide_order():
    ok = Metrics(max_abs=1e-3, eager_max_abs=1e-3, atol=1e-4, bound=2.1e-3, cosine=0.9999,
                   max_rel=1.0, rel_gt_1e3=0.1, rel_gt_5e3=0.0, rmse=1e-4, finite=True,
                   empty_rows=0, empty_rows_out="-")
    assert decide(ok)[0] == "PASS"
    assert decide(ok, baseline=True)[1].startswith("baseline")
    assert decide(dataclasses.replace(ok, finite=False)) == ("FAIL", "non-finite output on rows that attend keys")
    verdict, rule = decide(dataclasses.replace(ok, max_abs=3e-3))
    assert verdict == "FAIL" and rule.startswith("flash-attn rule")
    verdict, rule = decide(dataclasses.replace(ok, cosine=0.98))
    assert verdict == "FAIL" and rule.startswith("cosine")
    verdict, rule = decide(dataclasses.replace(ok, empty_rows=3, empty_rows_out="NaN"))
    assert verdict == "WARN" and "NaN" in rule
    # the cosine floor is the one tolerance table's, by the case's dtype
    assert decide(dataclasses.replace(ok, cosine_floor=0.99995))[1] == "cosine 0.99990 ≤ 0.99995"


def test_the_grid_reads_its_cosine_floor_from_the_one_tolerance_table(monkeypatch):
    from hyport_lib.proof import tolerance

    data = make_case_data(_case(dtype="bfloat16"), seed=0)
    monkeypatch.setitem(tolerance.TOLERANCE["bfloat16"], tolerance.KERNEL_COSINE, 0.5)
    assert compute_metrics(data.ref, data, data.ref, torch.bfloat16).cosine_floor == 0.5


def test_tolerance_scales_with_the_magnitude_of_the_reference():
    """One float32 ulp at |v| = 4 (4.77e-07) against an exact eager result used to FAIL
    with a constant atol of 2.4e-07; two ulps at max|ref| let it pass, while a missing
    scale (a gross error) still fails."""
    import torch

    from hyport_lib.attention.compare import Metrics, decide, ulp_atol

    one_ulp = float(torch.finfo(torch.float32).eps * 4)
    assert one_ulp == pytest.approx(4.77e-07, rel=1e-2)
    atol = ulp_atol(4.0, torch.float32)
    assert atol == pytest.approx(2 * one_ulp)

    def metrics(max_abs):
        return Metrics(max_abs=max_abs, eager_max_abs=0.0, atol=atol, bound=atol, cosine=1.0,
                       max_rel=0.0, rel_gt_1e3=0.0, rel_gt_5e3=0.0, rmse=max_abs, finite=True,
                       empty_rows=0, empty_rows_out="-")

    assert decide(metrics(one_ulp))[0] == "PASS"
    assert decide(metrics(0.5))[0] == "FAIL"  # e.g. the softmax without its 1/sqrt(d)
    assert ulp_atol(0.0, torch.float32) == 0.0
    assert ulp_atol(4.0, torch.bfloat16) > ulp_atol(4.0, torch.float16) > atol


def _verdicts(case, backends, seed=0):
    return {r["backend"]: (r["verdict"], r["rule"]) for r in C.compare_case(case, backends, seed)}


def test_porting_bugs_fail():
    def no_scale(call, case, data):
        call.pop("scale")  # NFA's default 1.0 instead of 1/sqrt(d)

    def top_left(call, case, data):
        call["sparse_mode"] = 2  # flash-attn 2.0 alignment for Sq != Skv

    def keep_mask_passed(call, case, data):
        call["atten_mask"] = ~call["atten_mask"].bool()  # True = attend to the NPU

    def lengths_not_cumulative(call, case, data):
        call["actual_seq_qlen"] = list(case.lengths_q)  # [3, 5, 4] instead of [3, 8, 12]
        call["actual_seq_kvlen"] = list(case.lengths_kv)

    backends = [_nfa_backend("right", lambda *a: None), _nfa_backend("no_scale", no_scale),
                _nfa_backend("top_left", top_left)]
    got = _verdicts(_case(), backends)
    assert got["right"][0] == "PASS"
    assert got["no_scale"][0] == "FAIL" and got["top_left"][0] == "FAIL"

    padded = _case(layout="BSH", batch="padded", lengths_q=(6, 3), lengths_kv=(6, 3))
    got = _verdicts(padded, [_nfa_backend("right", lambda *a: None),
                             _nfa_backend("flipped", keep_mask_passed)])
    assert got["right"][0] == "PASS" and got["flipped"][0] == "FAIL"

    packed = _case(layout="TND", batch="packed", lengths_q=(3, 5, 4), lengths_kv=(3, 5, 4))
    rows = C.compare_case(packed, [_nfa_backend("right", lambda *a: None),
                                   _nfa_backend("lengths", lengths_not_cumulative)])
    got = {r["backend"]: (r["verdict"], r["rule"]) for r in rows}
    assert got["right"][0] == "PASS" and got["lengths"][0] == "FAIL"
    assert "actual_seq_qlen" in got["lengths"][1]


def test_backend_errors_nan_rows_and_inexpressible_cases():
    case = _case(batch="padded", lengths_q=(5, 2), lengths_kv=(11, 3))

    def raises(case, data, device):
        raise RuntimeError("kernel not found\nsecond line")

    def nan_rows(case, data, device):
        out = eager_attention(data.q, data.k, data.v, data.keep, case.scale)
        return out.masked_fill(data.empty_rows.unsqueeze(-1), float("nan"))

    optional = Implementation("optional", "optional (test)", "cpu", raises, optional_dtypes=("float16",))
    rows = C.compare_case(case, [_backend("raises", raises), _backend("nan", nan_rows),
                                 _backend("none", lambda *a: None), optional])
    by = {r["backend"]: r for r in rows}
    assert set(by) == {"raises", "nan", "optional"}
    assert by["optional"]["verdict"] == "SKIP" and "float16 not supported" in by["optional"]["rule"]
    assert by["raises"]["verdict"] == "FAIL" and "kernel not found" in by["raises"]["rule"]
    assert "second line" not in by["raises"]["rule"]
    assert by["nan"]["verdict"] == "WARN" and by["nan"]["empty_rows_out"] == "NaN"


@pytest.fixture(scope="module")
def default_result():
    return C.run_comparison(device="cpu")


def test_default_grid_passes_and_is_labelled(default_result):
    res = default_result
    df = res.frame()
    assert "PASS" in res.counts and not {"FAIL", "WARN"} & set(res.counts), \
        df[df.verdict != "PASS"][["case", "backend", "rule"]]
    names = {b.name for b in res.backends}
    assert {"eager", "sdpa", "npu-emulated"} <= names and "npu" not in names
    assert res.provenance.emulated and res.provenance.device == "cpu"
    emu = df[df.backend == "npu-emulated"]
    assert len(emu) == res.cases and set(emu.source) == {"npu-emulated (CPU)"}
    assert df.source.notna().all()
    for col in ("max_abs", "cosine", "max_rel", "rel_gt_1e-3", "rel_gt_5e-3", "rmse", "rule"):
        assert df[col].notna().all(), col
    assert (df[df.dtype == "float32"].max_abs < 1e-5).all()
    assert (df.cosine > 0.99).all()
    assert res.seconds < 60


def test_the_drop_in_serves_the_pinned_flash_attn_version():
    """Code pinned to flash-attn < 2.7 unpacks 4 values from unpad_input: the padded cases
    run that way under the 2.5.8 API, and the stage says which API it served."""
    cases = [c for c in build_grid(False, ["float32"]) if c.batch == "padded"][:2]
    legacy = C.run_comparison(cases=cases, dtypes=["float32"], flash_attn_version="2.5.8")
    rows = [r for r in legacy.rows if r["backend"].startswith("flash-api")]
    assert rows and all(r["verdict"] == "PASS" for r in rows)
    assert any("flash-api 2.5.8" in b.source for b in legacy.backends)
    result = stage.run(stage.plan(Params(device="cpu", dtypes=["float32"], model_path=None,
                                         flash_attn_version="2.5.8")))
    assert stage.summarize(result).headline["flash-attn API served"] == "2.5.8"
