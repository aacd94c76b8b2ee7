"""Stage 05's full scan and comparisons: chunked reads that find every NaN/Inf (at chunk
boundaries too), checksums equal to those of the whole tensors, comparisons that find
exactly the tensors a test changed, and the default folders the notebook picks."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.compare import compare_weights
from hyport_lib.checkpoint_files.header import read_header
from hyport_lib.weights.layout import inspect_checkpoint
from hyport_lib.weights.scan import full_scan, nonfinite_counts, plan_reads, read_chunks


@pytest.fixture(scope="module")
def tiny():
    return ensure_tiny_model()


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype,name", [(torch.float32, "F32"), (torch.bfloat16, "BF16"),
                                        (torch.float16, "F16"), (torch.float64, "F64"),
                                        (torch.float8_e5m2, "F8_E5M2")])
def test_nonfinite_counts_on_raw_bits(dtype, name):
    x = torch.linspace(-3, 3, 4096).to(dtype)
    assert nonfinite_counts(_raw(x), name) == (0, 0)
    x[5], x[77], x[4095] = float("nan"), float("inf"), float("-inf")
    assert nonfinite_counts(_raw(x), name) == (1, 2)
    largest = torch.full((8,), torch.finfo(dtype).max, dtype=dtype)  # finite, exponent not all ones
    assert nonfinite_counts(_raw(largest), name) == (0, 0)


def test_integers_are_never_non_finite():
    assert nonfinite_counts(np.full(16, -1, np.int32).tobytes(), "I32") == (0, 0)


def test_scan_finds_values_at_chunk_boundaries_and_checksums_whole_tensors(tmp_path):
    chunk = 64  # bytes: 16 float32 per chunk, so every tensor spans many chunks
    a = torch.randn(1000)
    a[15], a[16], a[999] = float("nan"), float("inf"), float("nan")  # both sides of a boundary, the last
    b = torch.randn(333).to(torch.bfloat16)
    b[32] = float("-inf")  # first element of the second chunk
    c = torch.arange(10, dtype=torch.int64)
    empty = torch.empty(0)
    path = tmp_path / "m.safetensors"
    save_file({"a": a, "b": b, "c": c, "empty": empty}, str(path))
    shard = read_header(path)
    chunks = list(read_chunks(plan_reads([shard])[0], chunk))
    assert all(len(view) <= chunk and len(view) % 8 in (0, len(view) % 8) for _, _, view, _ in chunks)
    assert all(len(view) % (8 if e.dtype in ("I64",) else 2) == 0 for _, e, view, _ in chunks)
    seen = []
    result = full_scan([shard], chunk_bytes=chunk, on_progress=seen.append, min_interval_s=0)
    assert (result.tensors["a"].nan, result.tensors["a"].inf) == (2, 1)
    assert (result.tensors["b"].nan, result.tensors["b"].inf) == (0, 1)
    assert (result.tensors["c"].nan, result.tensors["c"].inf) == (0, 0)
    assert sorted(result.nonfinite_tensors) == ["a", "b"]
    for key, tensor in {"a": a, "b": b, "c": c, "empty": empty}.items():
        assert result.tensors[key].checksum == f"{zlib.crc32(_raw(tensor)):08x}"
    sha = full_scan([shard], checksum="sha256", chunk_bytes=chunk * 4)
    assert sha.tensors["a"].checksum == hashlib.sha256(_raw(a)).hexdigest()
    assert result.bytes_read == path.stat().st_size - shard.data_start
    assert seen[-1].done_bytes == seen[-1].total_bytes == result.bytes_read
    assert [f.cls for f in result.findings] == ["non_finite"]
    assert result.findings[0].file == "m.safetensors" and set(result.findings[0].tensors) == {"a", "b"}


def test_scan_bad_arguments_name_themselves(tiny):
    from hyport_lib.params import ParameterError, field_of
    from hyport_lib.weights.params import Params
    from hyport_lib.weights.scan import HASHERS

    shards = inspect_checkpoint(tiny, with_model=False).shards
    # the checksum is a stage parameter: refused by Params, in one line, before any scan
    assert set(field_of(Params, "checksum").spec.choices) == set(HASHERS)
    with pytest.raises(ParameterError, match="^checksum='md5': expected one of 'crc32', 'sha256'$"):
        Params(checksum="md5")
    with pytest.raises(ValueError, match="chunk_bytes=100"):
        full_scan(shards, chunk_bytes=100)


def test_scan_skips_tensors_outside_a_truncated_file(tiny, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes((tiny / "model.safetensors").read_bytes()[:-1000])
    shard = read_header(path)
    result = full_scan([shard])
    assert result.skipped and not set(result.skipped) & set(result.tensors)
    assert len(result.tensors) + len(result.skipped) == 64


def _copy_with(tiny: Path, folder: Path, change) -> Path:
    shutil.copytree(tiny, folder)
    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return folder


def _key(folder: Path, suffix: str) -> str:
    """The on-disk key ending in ``suffix`` (transformers 4 and 5 save LLaVA differently)."""
    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        (key,) = [k for k in fh.keys() if k.endswith(suffix)]
    return key


def test_comparison_finds_exactly_the_changed_tensors(tiny, tmp_path):
    names = [_key(tiny, s) for s in ("layers.1.mlp.up_proj.weight", "multi_modal_projector.linear_1.bias",
                                      "embeddings.patch_embedding.weight")]
    removed = _key(tiny, "post_layernorm.bias")

    def change(t):
        t[names[0]] = t[names[0]] * 1.5
        t[names[1]] = t[names[1]] + 0.25  # a bias of zeros: no relative change, max |Δ| says it
        t[names[2]][0, 0, 0, 0] += 1.0  # one element
        t["bogus.weight"] = torch.ones(3)
        del t[removed]

    trained = _copy_with(tiny, tmp_path / "trained", change)
    result = compare_weights(inspect_checkpoint(trained), inspect_checkpoint(tiny), role="base", chunk_bytes=256)
    status = {r["tensor"]: r for r in result.rows}
    assert sorted(k for k, r in status.items() if r["status"] == "changed") == sorted(names)
    assert result.changed == 3 and result.compared == 63  # 64 less the removed one
    assert status["bogus.weight"]["status"] == "added"
    assert status[removed]["status"] == "removed"
    assert status[names[0]]["relative change"] == pytest.approx(0.5, rel=1e-6)
    assert status[names[1]]["relative change"] is None and status[names[1]]["max |Δ|"] == pytest.approx(0.25)
    assert status[names[2]]["max |Δ|"] == pytest.approx(1.0)
    assert {f.cls for f in result.findings} == {"key_added", "key_removed"}


def test_rounding_to_the_saved_dtype_is_not_training(tiny, tmp_path):
    """A bf16 copy of a float32 base holds the same model: nothing changed."""
    rounded = _copy_with(tiny, tmp_path / "bf16", lambda t: t.update(
        {k: v.to(torch.bfloat16) for k, v in t.items()}))
    result = compare_weights(inspect_checkpoint(rounded), inspect_checkpoint(tiny), role="base")
    assert result.changed == 0 and result.compared == 64
    assert {f.cls for f in result.findings} == {"dtype_changed", "weights_unchanged"}


def test_checkpoint_comparison_matches_names_across_layouts(tiny, tmp_path):
    """Keys saved under the model's own names (as some tools do) still line up."""
    from hyport_lib.weights.names import model_names

    names = model_names(tiny)

    def rename(t):
        for key in list(t):
            t[names.to_model(key)] = t.pop(key)

    renamed = _copy_with(tiny, tmp_path / "renamed", rename)
    assert set(inspect_checkpoint(renamed).tensors) == set(names.expected)
    sharded = ensure_tiny_model(max_shard_size="500KB")
    for other in (renamed, sharded):
        result = compare_weights(inspect_checkpoint(tiny), inspect_checkpoint(other), role="checkpoint")
        assert result.count("same") == 64 and not result.findings
    norm = _key(tiny, "model.norm.weight")
    changed = _copy_with(tiny, tmp_path / "changed", lambda t: t.update({norm: t[norm] * 2}))
    result = compare_weights(inspect_checkpoint(tiny), inspect_checkpoint(changed), role="checkpoint")
    assert [f.cls for f in result.findings] == ["checkpoint_differs"]
    assert result.findings[0].tensors == [norm]


def test_names_map_every_key_to_the_model(tiny):
    from hyport_lib.weights.names import model_names

    names = model_names(tiny)
    keys = inspect_checkpoint(tiny, with_model=False).tensors
    assert names.class_name == "LlavaForConditionalGeneration" and not names.error
    assert {names.to_model(k) for k in keys} == set(names.expected)
    assert names.to_model(_key(tiny, "embed_tokens.weight")) == "model.language_model.embed_tokens.weight"


def test_default_folders(tmp_path, monkeypatch):
    from hyport_lib.results import record_result
    from hyport_lib.weights.defaults import TINY_SHARD_SIZE, resolve_paths

    results = tmp_path / "results"
    picked = resolve_paths(results=results)
    assert picked.weights == str(ensure_tiny_model(max_shard_size=TINY_SHARD_SIZE))
    assert picked.checkpoint == str(ensure_tiny_model()) and picked.base is None
    assert "no stage 04 result" in picked.note
    final, checkpoint = tmp_path / "run", tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    data = {"final_dir": str(final), "last_checkpoint": str(checkpoint),
            "plan": {"model_path": str(ensure_tiny_model())}}
    record_result("04_train", "PASS", data=data, directory=results)
    picked = resolve_paths(results=results)
    assert (picked.weights, picked.checkpoint, picked.base) == (str(final), str(checkpoint), str(ensure_tiny_model()))
    assert "stage 04" in picked.note
    given = resolve_paths("/x", None, None, results=results)
    assert (given.weights, given.base, given.checkpoint) == ("/x", None, None)
    data["final_dir"] = str(tmp_path / "gone")  # a record whose folder was deleted: tiny again
    record_result("04_train", "PASS", data=data, directory=results)
    assert resolve_paths(results=results).checkpoint == str(ensure_tiny_model())
    assert "no usable stage 04 weights" in resolve_paths(results=results).note  # and says why
    (results / "04_train.json").write_text(json.dumps([1]))  # unreadable: tiny again
    assert "no usable stage 04 weights" in resolve_paths(results=results).note
    # stage 04 failed without weights: an error, never a PASS on the tiny model in its place
    record_result("04_train", "FAIL", summary="torchrun exited 1", data={"final_dir": None}, directory=results)
    with pytest.raises(ValueError, match="stage 04 trained no weights to check .*FAIL: torchrun exited 1"):
        resolve_paths(results=results)
    assert resolve_paths("/x", None, None, results=results).weights == "/x"  # a path given still wins



def test_the_plan_names_the_tiny_stand_in_without_building_it(tmp_path, monkeypatch):
    """hyport report plans every stage before any runs: naming the tiny model writes nothing;
    the run builds it."""
    from hyport_lib.weights import stage
    from hyport_lib.weights.params import Params

    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    plan = stage.plan(Params())
    assert plan.sources.tiny and "no stage 04 result" in plan.sources.note
    assert plan.params.reload_timeout_s == 600.0 and plan.log_dir is None
    assert not (tmp_path / "cache").exists() and not (tmp_path / "results").exists()


def test_the_plan_refuses_what_cannot_be_checked_in_one_line_each(tmp_path, tiny):
    from hyport_lib.params import ParameterError
    from hyport_lib.weights import stage
    from hyport_lib.weights.params import Params

    headers_only = {"full_scan": False, "reload": False, "logits_parity": False, "consolidate_zero": False}
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ParameterError, match=f"^weights_path={re.escape(repr(missing))}: no such file or folder$"):
        stage.plan(Params(weights_path=missing, **headers_only))
    with pytest.raises(ParameterError, match=f"^checkpoint_path={re.escape(repr(missing))}: no such file or folder$"):
        stage.plan(Params(weights_path=str(tiny), checkpoint_path=missing, **headers_only))
    with pytest.raises(ParameterError, match=f"^base_path={re.escape(repr(missing))}: no such file or folder$"):
        Params(base_path=missing)  # never written by stage 04: refused where it is declared
    with pytest.raises(ParameterError, match="^reload_timeout_s=0: expected a number > 0"):
        Params(reload_timeout_s=0)
    # a check that needs a checkpoint, without one: refused, never a PASS that left it out
    with pytest.raises(ParameterError) as caught:
        Params(weights_path=str(tiny))  # the notebook's defaults: every check on
    assert str(caught.value) == (
        "logits_parity=True compares the logits with a checkpoint's, and there is none: give "
        "checkpoint_path or set logits_parity=False")  # refused as given: nothing is guessed
    with pytest.raises(ParameterError) as caught:
        stage.plan(Params(weights_path=str(tiny), logits_parity=False))
    assert str(caught.value) == (
        "consolidate_zero=True consolidates a checkpoint's ZeRO states, and there is none: give "
        "checkpoint_path or set consolidate_zero=False")
    plan = stage.plan(Params(weights_path=str(tiny), **headers_only))
    assert (plan.sources.weights, plan.sources.checkpoint, plan.sources.tiny) == (str(tiny), None, False)
    # a Trainer checkpoint given as the weights holds its own ZeRO states
    trainer_checkpoint = shutil.copytree(tiny, tmp_path / "checkpoint-2")
    (trainer_checkpoint / "global_step2").mkdir()
    assert stage.plan(Params(weights_path=str(trainer_checkpoint), **{**headers_only, "consolidate_zero": True}))


def test_stage05_in_a_run_whose_stage04_wrote_no_record_checks_no_stand_in(tmp_path, monkeypatch):
    """Stage 04 refused before launch (a bad dataset) writes no record: in that report run
    stage 05 errors with stage 04's verdict instead of PASSing on the tiny model."""
    from hyport_lib.weights.defaults import resolve_paths

    run_dir = tmp_path / "run"
    (run_dir / "results").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"stages": [
        {"stage": "04_train", "verdict": "FAIL", "error": "DatasetError: 2 of 14 records have problems"},
        {"stage": "05_weights", "verdict": "RUNNING"}]}))
    monkeypatch.setenv("HYPORT_RUN_DIR", str(run_dir))
    with pytest.raises(ValueError, match=r"stage 04 of this run trained no weights to check \(FAIL: "
                                         r"DatasetError: 2 of 14 records"):
        resolve_paths(results=run_dir / "results")
    assert resolve_paths("/x", None, None, results=run_dir / "results").weights == "/x"
    (run_dir / "run.json").write_text(json.dumps({"stages": [{"stage": "05_weights", "verdict": "RUNNING"}]}))
    assert "no stage 04 result" in resolve_paths(results=run_dir / "results").note  # 04 not in the run


def test_zero_states_compare_with_a_lora_adapter_file(tmp_path):
    """DeepSpeed names LoRA weights with the adapter name, PEFT's file without it."""
    from hyport_lib.weights.zero_consolidate import ADAPTER_FILE, _compare

    a = torch.randn(4, 8)
    b = torch.randn(8, 4)
    path = tmp_path / ADAPTER_FILE
    save_file({"m.q_proj.lora_A.weight": a.to(torch.bfloat16), "m.q_proj.lora_B.weight": b.to(torch.bfloat16)},
              str(path))
    state = {"m.q_proj.lora_A.default.weight": a, "m.q_proj.lora_B.default.weight": b + 1}
    target = _compare("adapter", str(path), state, False)
    assert (target["compared"], target["matching"], target["differing_keys"]) == (2, 1, ["m.q_proj.lora_B.weight"])
    assert target["max_abs_cast"] == pytest.approx(1.0, abs=0.02) and not target["only_in_zero"]


def test_a_lone_safetensors_file_compares_by_the_other_sides_names(tiny, tmp_path):
    """A file given on its own (no config, so no model class) against its folder: the
    folder's name mapping serves both sides, so every tensor is compared, not 64 added
    and 64 removed."""
    name = _key(tiny, "layers.1.mlp.up_proj.weight")
    trained = _copy_with(tiny, tmp_path / "trained", lambda t: t.update({name: t[name] * 1.5}))
    lone = trained / "model.safetensors"
    for a, b in ((lone, tiny), (tiny, lone)):
        result = compare_weights(inspect_checkpoint(a), inspect_checkpoint(b), role="base")
        assert result.compared == 64 and result.changed == 1, [f.cls for f in result.findings]
        assert not {f.cls for f in result.findings} & {"key_added", "key_removed"}
