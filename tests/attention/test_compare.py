"""The attention numerics comparison: grid coverage, metrics, verdicts, bug detection, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from hyport_lib.attention import compare as C
from hyport_lib.attention import stage
from hyport_lib.attention.params import Params
from hyport_lib.npu_attention import reference as R
from hyport_lib.attention.implementations import Implementation, eager_attention
from hyport_lib.attention.cases import case_keep_mask, make_case_data
from hyport_lib.attention.cases import BATCH_KINDS, MASK_KINDS, AttentionCase, build_grid
from hyport_lib.port.generated.flash_attn_ascend import compressed_causal_mask
from hyport_lib.npu_attention.emulation import npu_fusion_attention as emulated
from hyport_lib.attention.compare import Metrics, compute_metrics, decide
from hyport_lib.attention.implementations import nfa_mapping, run_nfa
from hyport_lib.attention.stage import planted_example, run_scan
from hyport_lib.proof.model_check import Behaviour
from hyport_lib.proof.model_check import ModelComparison
from hyport_lib.results import StageSummary, record
from hyport_lib.utils.typed_records import from_mapping


def _case(**kw):
    base = dict(layout="BNSD", dtype="float16", mask="causal", batch="dense", lengths_q=(5,),
                lengths_kv=(11,), nq=4, nkv=2, head_dim=64)
    base.update(kw)
    return AttentionCase(**base)


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


# --------------------------------------------------------------------------------------
# Grid
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# Metrics and verdicts
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# The comparison catches the classic porting bugs
# --------------------------------------------------------------------------------------
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


def test_fake_npu_runs_through_the_same_mapping(fake_npu):
    case = _case(layout="TND", batch="packed", mask="band", window=(2, 0),
                 lengths_q=(4, 7), lengths_kv=(4, 7))
    data = make_case_data(case)
    got = run_nfa(fake_npu.npu_fusion_attention, case, data, "cpu")
    want = run_nfa(emulated, case, data, "cpu")
    assert torch.equal(got, want)


# --------------------------------------------------------------------------------------
# The default grid on this host, and its rendering
# --------------------------------------------------------------------------------------
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


def test_show_renders_table_and_heatmap(default_result):
    from hyport_lib.attention import show

    html = show.styled_comparison(default_result).to_html()
    assert "PASS" in html and "npu-emulated (CPU)" in html
    fig = show.rows_heatmap(default_result.frame())
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == default_result.cases
    assert "emulated" in ax.get_title()
    import matplotlib.pyplot as plt

    plt.close(fig)
    with pytest.raises(ValueError, match="backend='npu'"):
        show.rows_heatmap(default_result.frame(), backend="npu")
    assert "not an NPU measurement" in show.provenance_note(default_result)


def test_summary_and_record(default_result, tmp_path):
    result = stage.AttentionStageResult(**vars(default_result), scan=run_scan(""), flash_attn_version="2.7.4.post1")
    record(stage, result, directory=tmp_path)
    summary = stage.summarize(result)
    saved = json.loads((tmp_path / "02_attention.json").read_text())
    assert saved["verdict"] == summary.verdict == "PASS"
    assert saved["provenance"]["emulated"] is True
    assert len(saved["data"]["rows"]) == len(default_result.rows)
    assert saved["data"]["scan"]["path"] == saved["data"]["scan"]["root"] == result.scan.root
    assert 0 < summary.headline["worst npu-emulated err/bound"] <= 1


def test_planted_scan():
    report = run_scan("")
    assert report.root.endswith("hyport-planted-example")
    assert report.counts().get("flash_attn", 0) >= 1


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------
def test_cli_writes_json_and_exit_code(tmp_path, monkeypatch, capsys):
    from hyport_lib.commands import main

    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    out = tmp_path / "rows.json"
    rc = main(["attention", "--dtypes", "[float32]", "--model-path", "none", "--json", str(out),
               "--code-path", str(planted_example(tmp_path / "code")), "--port", "false"])
    text = capsys.readouterr().out
    assert rc == 0 and "npu-emulated" in text and "PASS:" in text and "port:" not in text
    payload = json.loads(out.read_text())
    assert payload["verdict"] == "PASS" and {r["dtype"] for r in payload["rows"]} == {"float32"}
    assert (tmp_path / "results" / "02_attention.json").exists()

    real = C.available_implementations

    def with_bug(device="auto", flash_attn_version=None):
        def no_scale(case, data, device):
            calls = nfa_mapping(case, data, device, compressed_causal_mask())
            call = calls[0]
            call.pop("rows")
            call.pop("scale")
            return R.to_bnsd(emulated(**call)[0], case.layout, case.nq)

        return real(device, flash_attn_version) + [_backend("buggy", no_scale)]

    monkeypatch.setattr(C, "available_implementations", with_bug)
    rc = main(["attention", "--dtypes", "[float32]", "--model-path", "none"])
    assert rc == 1 and "FAIL" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# Model level: how stage 02 shows it (the check itself: tests/proof/test_model_check.py)
# --------------------------------------------------------------------------------------
def test_a_skipped_model_check_shows_blanks():
    from hyport_lib.attention import show

    m = ModelComparison("tiny", "", "npu-emulated", "float32", "cpu", detail="not run")
    html = show.styled_model(m).to_html()  # blanks for the missing figures, no "nan%"
    assert "SKIP" in html and "nan" not in html.lower()
    text = show.summary_markdown(StageSummary("SKIP", "no model", {"a": 1}))
    assert text.startswith("**SKIP** — no model") and "- a: 1" in text


def test_backend_summary_counts_and_folds_the_full_table(monkeypatch):
    """The stage shows a per-backend summary, failing rows up front, every row folded."""
    from hyport_lib.attention import show

    result = C.run_comparison(device="cpu", dtypes=["float32"])
    frame = result.frame()
    frame.loc[frame.index[-1], "verdict"] = "FAIL"
    monkeypatch.setattr(result, "frame", lambda: frame)
    summary = show.backend_summary(result)
    assert summary["cases"].sum() == len(frame)
    failing = summary[summary["FAIL"] > 0]
    assert len(failing) == 1 and failing.iloc[0]["verdict"] == "FAIL"
    assert failing.iloc[0]["backend"] == frame.iloc[-1]["backend"]
    shown = []
    monkeypatch.setattr(show, "_display", shown.append)
    monkeypatch.setattr(show, "_markdown", shown.append)
    show.show_comparison(result)
    assert "1 row(s) not passing" in shown[2]
    assert shown[3].to_html().count("<tr") == 2  # header + the one failing row
    folded = shown[4].data
    assert folded.startswith("<details>") and folded.count("<tr") == len(frame) + 1


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


def test_the_summary_names_the_device_of_each_implementation():
    backends = [C.BackendInfo("eager", device="cuda:0"), C.BackendInfo("sdpa", device="cuda:0"),
                C.BackendInfo("npu-emulated", device="cpu"), C.BackendInfo("flash-api (npu-emulated)", device="cpu")]
    assert stage.where_each_ran(backends) == "eager, sdpa on CUDA; npu-emulated, flash-api (npu-emulated) on CPU"


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


def test_behaviour_on_flat_logits_is_not_meaningful_and_is_drawn_in_one_line(tmp_path):
    """A random-weight model other than the tiny one is recognised by its flat logits."""
    from hyport_lib.attention.views import behaviour_glance_row
    from blog_drafts import stage_draft

    record = {"behaviour": {"meaningful": False, "why": "random weights: not meaningful (flat logits)"}}
    flat = from_mapping(Behaviour, record["behaviour"])
    assert behaviour_glance_row(flat) == [("behaviour", "random weights: not meaningful (flat logits)")]
    text = stage_draft(tmp_path, "02_attention", {"model": record})
    assert "\nBehaviour (greedy answers, perplexity) not compared: random weights" in text
    real = {"behaviour": {"meaningful": True, "new_tokens": 32, "prompts": ["Capital?"],
                          "eager_answers": ["Paris."], "top1_probability": 0.6, "pairs": [
                              {"label": "hyport_npu_emulated, float32", "dtype": "float32", "identical": True,
                               "answers": ["Paris."], "perplexity": 4.77, "eager_perplexity": 4.77},
                              {"label": "NPU emulation, bfloat16", "dtype": "bfloat16", "identical": False,
                               "answers": ["Lyon."], "perplexity": 4.8, "eager_perplexity": 4.82,
                               "first_difference": {"prompt": 0, "token": 0, "eager": "Paris", "swapped": "Lyon"}}]}}
    said = behaviour_glance_row(from_mapping(Behaviour, real["behaviour"]))[0][1]
    assert said.startswith("32-token answers: hyport_npu_emulated, float32: identical; NPU emulation")
    assert "prompt 0, token 0: 'Paris' → 'Lyon'" in said
    text = stage_draft(tmp_path, "02_attention", {"model": real}, "zh")
    assert "Paris." in text and "4.82 → 4.8" in text
