"""Stage 04's parts without a training process: parameters, DeepSpeed JSON, checkpoints,
metrics, the pre-launch checks and the CLI's refusal of a bad dataset."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.train import output_dir as ck
from hyport_lib.train import stage
from hyport_lib.train.dataset import DatasetError
from hyport_lib.train.deepspeed_config import build_deepspeed_config, resolve_precision
from hyport_lib.train.launch import first_failure
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import LaunchPlan, is_local, prepare
from hyport_lib.train.result import (MetricsSummary, StepMetrics, TrainResult, WorkerResult, final_weights, loss_span,
                                     summarize_metrics, truncate_metrics)
from hyport_lib.train.show import ema, spikes
from hyport_lib.utils.typed_records import from_mapping, to_mapping


# --------------------------------------------------------------------------- DeepSpeed JSON
def test_deepspeed_config_follows_precision_and_host():
    cpu = get_backend("cpu")
    assert resolve_precision("auto", cpu) == "bf16"
    with pytest.raises(ValueError, match="no fp16 on the CPU"):
        resolve_precision("fp16", cpu)
    data = build_deepspeed_config(Params(zero_stage=3), cpu, "bf16")
    assert data["zero_optimization"]["stage"] == 3 and data["bf16"]["enabled"] is True
    assert data["fp16"]["enabled"] is False and data["optimizer"]["params"]["torch_adam"] is True
    assert data["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    fp16 = build_deepspeed_config(Params(loss_scale=4096, precision="fp16"), cpu, "fp16")
    assert fp16["fp16"] == {**fp16["fp16"], "enabled": True, "loss_scale": 4096.0}
    offload = build_deepspeed_config(Params(offload_optimizer=True), cpu, "bf16")
    assert offload["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "torch_adam" not in offload["optimizer"]["params"]  # offload needs DeepSpeed's CPU Adam


def test_own_deepspeed_file_must_agree_with_zero_stage(tmp_path):
    own = tmp_path / "ds.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    with pytest.raises(ValueError, match="sets ZeRO stage 3 but zero_stage=2"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")
    own.write_text("{not json")
    with pytest.raises(ValueError, match="ds.json"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")


def test_own_deepspeed_file_with_stage_auto_names_the_file_and_the_field(tmp_path):
    own = tmp_path / "ds.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": "auto"}}))
    with pytest.raises(ValueError, match="ds.json.*zero_optimization.stage is 'auto'"):
        build_deepspeed_config(Params(deepspeed_config=str(own)), get_backend("cpu"), "bf16")


# --------------------------------------------------------------------------- checkpoints
def _checkpoint(folder: Path, step: int, complete: bool = True, world: int = 2, **versions) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text("{}")
    if complete:
        ck.write_marker(path, step=step, world_size=world, zero_stage=2, finetuning_type="full")
        if versions:
            data = json.loads((path / ck.MARKER).read_text())
            data["versions"].update(versions)
            (path / ck.MARKER).write_text(json.dumps(data))
    return path


def test_a_checkpoint_written_partly_is_never_taken(tmp_path):
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 20, complete=False)  # killed mid-save: no marker
    (tmp_path / "checkpoint-30").mkdir()  # an empty folder
    found = ck.list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in found] == [(10, True), (20, False), (30, False)]
    assert ck.resolve_resume("auto", tmp_path).step == 10
    assert ck.resolve_resume("none", tmp_path) is None
    with pytest.raises(ValueError, match="incomplete checkpoint"):
        ck.resolve_resume(str(tmp_path / "checkpoint-20"), tmp_path)
    assert ck.resolve_resume("auto", tmp_path / "nothing-here") is None


def test_resume_refuses_another_world_size_or_library_version(tmp_path):
    same = ck.Checkpoint(_checkpoint(tmp_path / "a", 5), 5, True)
    ck.check_compatible(same, world_size=2, zero_stage=2, finetuning_type="full")
    with pytest.raises(ValueError, match="world size 2 when saved, 4 now"):
        ck.check_compatible(same, world_size=4, zero_stage=2, finetuning_type="full")
    old = ck.Checkpoint(_checkpoint(tmp_path / "b", 5, deepspeed="0.15.0"), 5, True)
    with pytest.raises(ValueError, match="deepspeed 0.15.0 when saved"):
        ck.check_compatible(old, world_size=2, zero_stage=2, finetuning_type="full")


# --------------------------------------------------------------------------- metrics
def _records(steps, **extra):
    return [StepMetrics(step=s, loss=5.0 - 0.1 * s, step_s=0.5 if s > 2 else 3.0, tokens=1000, real_tokens=600,
                        world_size=2, process_step=s, **extra) for s in steps]


def test_summary_leaves_warmup_out_and_finds_gaps_and_repeats():
    summary = summarize_metrics(_records(range(1, 11)), warmup_steps=2)
    assert summary.steps == 10 and summary.measured_steps == 8 and summary.mean_step_s == 0.5
    assert summary.tokens_per_s_per_card == pytest.approx(1000 / (2 * 0.5))
    assert summary.real_tokens_per_s_per_card == pytest.approx(600 / (2 * 0.5))
    assert "first 2 step(s)" in summary.throughput_definition
    broken = summarize_metrics(_records([1, 2, 3, 3, 5]), warmup_steps=0)
    assert broken.repeated_steps == [3] and broken.missing_steps == [4]
    flagged = summarize_metrics(_records([1, 2], nonfinite_loss=True, skipped=True))
    assert flagged.nonfinite_loss_steps == [1, 2] and flagged.skipped_steps == 2


def test_checkpoint_seconds_are_left_out_of_step_time_and_throughput():
    records = _records(range(1, 7))
    records[3].save_s = 0.4  # step 4 came after a checkpoint save: 0.5 s wall, 0.1 s training
    summary = summarize_metrics(records, warmup_steps=2)
    assert summary.checkpoint_s == pytest.approx(0.4)
    assert summary.mean_step_s == pytest.approx((0.5 * 3 + 0.1) / 4)
    assert summary.tokens_per_s_per_card == pytest.approx(4000 / (2 * (0.5 * 3 + 0.1)))
    assert "seconds spent writing checkpoints" in summary.throughput_definition


def test_loss_span_says_when_the_last_steps_had_no_finite_loss():
    records = _records(range(1, 5))
    assert loss_span(summarize_metrics(records)) == "4.9000 → 4.6000"
    for r in records[1:]:
        r.loss = float("nan")
    summary = summarize_metrics(records)
    assert summary.last_loss == summary.first_loss and summary.last_loss_step == 1
    assert loss_span(summary) == "4.9000 → 4.9000 (last finite: step 1 of 4)"
    assert loss_span(summarize_metrics([StepMetrics(step=1, loss=None)])) is None


def test_truncate_keeps_steps_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(to_mapping(r)) + "\n" for r in _records(range(1, 8))) + '{"step": 8, "lo')
    assert truncate_metrics(path, 4) == 4
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
    assert truncate_metrics(tmp_path / "none.jsonl", 0) == 0


def test_ema_and_spikes():
    values = [1.0, 1.0, 1.0, 5.0, 1.0, float("nan"), 1.0]
    assert spikes(values) == [3]
    smooth = ema(values)
    assert smooth[0] == 1.0 and smooth[3] == pytest.approx(2.2) and smooth[5] == smooth[4]


# --------------------------------------------------------------------------- preflight
def test_taken_port_and_multi_node_without_port_are_refused(tmp_path):
    from hyport_lib.train.preflight import rendezvous_port

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"master_port={taken} is already taken"):
            rendezvous_port(Params(master_port=taken))
    assert rendezvous_port(Params()) > 0


def test_a_bad_dataset_stops_before_any_process_starts(tmp_path, monkeypatch, capsys):
    from hyport_lib import processes
    from hyport_lib.commands import main

    started = []
    monkeypatch.setattr(processes, "start_child", lambda *a, **k: started.append(a))
    data = tmp_path / "bad.json"
    data.write_text(json.dumps([{"id": "x1", "conversations": []},
                                {"id": "x2", "conversations": [{"from": "gpt", "value": "hi"}]}]))
    rc = main(["train", "--dataset-path", str(data), "--output-dir", str(tmp_path / "out"),
               "--no-record"])
    err = capsys.readouterr().err
    assert rc == 2 and not started
    assert "2 with problems" in err and "'x1'" in err and "'x2'" in err
    assert "conversations[0].from" in err
    assert not (tmp_path / "out").exists()  # the plan wrote nothing


def test_skip_bad_records_plans_without_them(tmp_path):
    from hyport_lib.train.smoke_data import write_smoke_dataset

    smoke = write_smoke_dataset(tmp_path / "data")
    records = json.loads(smoke.read_text())
    records[3]["conversations"] = []
    smoke.write_text(json.dumps(records))
    plan = prepare(Params(dataset_path=str(smoke), output_dir=str(tmp_path / "out"),
                          skip_bad_records=True), get_backend("cpu"))
    assert plan.skip_records == [3] and plan.dataset["samples"] == 13
    assert any("1 bad record(s) skipped" in note for note in plan.notes)
    assert plan.deepspeed_json["zero_optimization"]["stage"] == 2
    assert plan.worker_spec()["skip_records"] == [3]
    assert not (tmp_path / "out").exists()  # written by the launch, under the folder's lock


def test_unwritable_output_dir_and_missing_model_are_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="output_dir="):
        prepare(Params(output_dir=str(blocker / "sub")), get_backend("cpu"))
    with pytest.raises(ValueError, match="model_path=./no/such/model.: no such folder"):
        prepare(Params(model_path="/no/such/model", output_dir=str(tmp_path / "o")),
                get_backend("cpu"))


def test_first_failure_names_the_root_cause_rank(tmp_path):
    log = tmp_path / "node0.log"
    log.write_text(
        "[default1]:[hyport train rank 1] test fault: SIGKILL at step 3\n"
        "[default0]:[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:5010.\n"
        "Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 2)\n"
        "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 1)  (SIGKILL)\n")
    assert first_failure(log).startswith("rank 1: killed by signal SIGKILL")
    log.write_text("[default0]:Traceback (most recent call last):\n"
                   "[default0]:ValueError: dataset is empty\n"
                   "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
                   "  exitcode  : 1 (pid: 1)\n")
    assert first_failure(log) == "rank 0: ValueError: dataset is empty"
    log.write_text("[default1]:TypeError: bad argument\n")
    assert first_failure(log) == "rank 1: TypeError: bad argument"
    assert first_failure(tmp_path / "missing.log") is None


@pytest.mark.slow
def test_the_npu_branch_plans_hccl_tnd_attention_and_refuses_busy_cards(
        fake_npu, npu_smi_sample, monkeypatch, tmp_path):
    """On an Ascend host (the torch_npu double): packed runs use the fused NPU attention,
    bf16 is chosen, the workers init hccl, and a card another process holds stops the
    launch before anything starts."""
    from hyport_lib.train.worker import init_distributed  # noqa: F401 (imports on the double)

    data = Path(__file__).parents[1] / "data" / "npu_smi"
    npu = get_backend("npu")
    assert npu.dist_backend == "hccl"
    npu_smi_sample((data / "no_running_processes.txt").read_text())
    plan = prepare(Params(output_dir=str(tmp_path / "out"), num_cards=2), npu)
    assert (plan.attn_implementation, plan.attention_backend) == ("hyport_npu_fused", "npu")
    assert plan.precision == "bf16" and plan.nproc_per_node == 2
    assert "torch_adam" not in plan.deepspeed_json["optimizer"]["params"]
    npu_smi_sample((data / "910b_24x_classic.txt").read_text())
    with pytest.raises(RuntimeError, match="busy cards, training not started: card 1: card busy: pid 576489"):
        prepare(Params(output_dir=str(tmp_path / "out2"), num_cards=2), npu)
    with pytest.raises(ValueError, match="num_cards=9: only 8"):
        prepare(Params(output_dir=str(tmp_path / "out3"), num_cards=9), npu)


def test_first_failure_reads_a_ranks_exception_behind_torchs_rank_prefix(tmp_path):
    # a worker's exception, as torch prints it: "[rank0]: " after torchrun's "[default0]:"
    log = tmp_path / "node0.log"
    log.write_text("[default0]:[rank0]: peft.utils.error.NoMatchingPeftModuleError: Target modules "
                   "{'qkv_proj'} not found\nRoot Cause (first observed failure):\n[0]:\n"
                   "  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 1)\n")
    assert first_failure(log).startswith("rank 0: peft.utils.error.NoMatchingPeftModuleError")


def test_only_hyports_checkpoints_after_the_starting_point_are_dropped(tmp_path):
    # hyport's checkpoints beyond the starting point are dropped; another tool's stays
    for step in (2, 4, 6):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "hyport_saving.json").write_text("{}")
    (tmp_path / "run" / "checkpoint-500").mkdir()
    assert ck.drop_checkpoints_after(tmp_path / "run", 2) == ["checkpoint-4", "checkpoint-6"]
    assert [c.step for c in ck.list_checkpoints(tmp_path / "run")] == [2, 500]


def test_lora_targets_that_name_no_layer_are_refused_before_launch(tmp_path):
    with pytest.raises(ValueError, match="lora_target='qkv_proj': no layer"):
        prepare(Params(finetuning_type="lora", lora_target="qkv_proj",
                       output_dir=str(tmp_path / "lora")), get_backend("cpu"))


def test_lora_without_peft_is_named_before_launch(tmp_path, monkeypatch):
    # named as such, not a ModuleNotFoundError in a rank
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "peft" else real_find_spec(name, *a))
    with pytest.raises(ValueError, match="finetuning_type='lora' needs peft"):
        prepare(Params(finetuning_type="lora", output_dir=str(tmp_path / "lora2")), get_backend("cpu"))


def test_every_problem_of_a_big_bad_dataset_is_in_the_error_and_no_folder_is_made(tmp_path):
    # every problem of a big bad dataset is in the error, the first 50 in its lines; no file
    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"id": f"r{i}", "conversations": []} for i in range(60)]))
    with pytest.raises(DatasetError) as info:
        prepare(Params(dataset_path=str(many), output_dir=str(tmp_path / "many-out")),
                get_backend("cpu"))
    assert len(info.value.report.problems) == 60 and len(info.value.details) == 51
    assert info.value.details[-1].startswith("... and 10 more")
    assert not (tmp_path / "many-out").exists()


def test_a_master_addr_that_does_not_resolve_is_refused(tmp_path):
    # an address that does not resolve would make torchrun retry for ever
    with pytest.raises(ValueError, match="master_addr='no.such.host.invalid' does not resolve"):
        prepare(Params(master_addr="no.such.host.invalid", output_dir=str(tmp_path / "a")), get_backend("cpu"))


def test_loopback_and_unspecified_addresses_ipv6_included_are_this_machine():
    assert all(is_local(a) for a in ("::1", "0.0.0.0", "127.0.0.1", socket.gethostname()))


def test_zero3_on_two_processes_needs_an_image_in_every_training_row(tmp_path):
    # ZeRO-3 on two processes with text-only and image records would abort in DeepSpeed
    cpu = get_backend("cpu")
    with pytest.raises(ValueError, match="training rows hold no image.*zero_stage=3"):
        prepare(Params(zero_stage=3, num_cards=2, packing=False, output_dir=str(tmp_path / "z3")), cpu)
    prepare(Params(zero_stage=3, num_cards=2, output_dir=str(tmp_path / "z3p")), cpu)  # packed: all rows have images


def test_resuming_at_or_past_max_steps_is_refused(tmp_path):
    # resuming at or past max_steps trains nothing
    out = tmp_path / "run"
    _checkpoint(out, 4)
    with pytest.raises(ValueError, match="step 4.*max_steps=3: nothing is left to train"):
        prepare(Params(resume_from="auto", max_steps=3, num_cards=2, output_dir=str(out)), get_backend("cpu"))


def test_the_worker_spec_holds_the_resume_folder_absolute_and_the_params_as_they_are(tmp_path, monkeypatch):
    out = tmp_path / "run"
    _checkpoint(out, 4)
    # a relative folder reaches the workers absolute
    monkeypatch.chdir(tmp_path)
    plan = prepare(Params(resume_from="run/checkpoint-4", max_steps=6, num_cards=2,
                          output_dir=str(tmp_path / "other")), get_backend("cpu"))
    assert plan.worker_spec()["resume_checkpoint"] == str(out / "checkpoint-4")
    # the workers rebuild the plan's parameters from the spec as they are (checked once, here)
    assert Params.trusted(json.loads(json.dumps(plan.worker_spec()))["params"]) == plan.params


def test_a_fresh_start_says_it_removes_the_earlier_checkpoints(tmp_path):
    out = tmp_path / "run"
    _checkpoint(out, 4)
    fresh = prepare(Params(resume_from="none", max_steps=6, num_cards=2, output_dir=str(out)), get_backend("cpu"))
    assert any("1 earlier checkpoint(s) (checkpoint-4): they will be removed" in n for n in fresh.notes)


def test_a_run_that_logged_no_step_is_no_pass_even_with_weights_written(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"")
    worker = WorkerResult(status="ok", final_dir=str(out))
    empty = TrainResult("ok", 0, 1.0, None, from_mapping(LaunchPlan, {"params": {"max_steps": None}}),
                        MetricsSummary(), worker, final_dir=final_weights(worker))
    judged = stage.summarize(empty)
    assert (judged.verdict, judged.why) == ("FAIL", "no step was trained (no step in the metrics)")


def test_a_model_folder_without_processor_files_is_named_before_launch(tmp_path):
    # a model folder without tokenizer / processor files: named before launch, no traceback
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(ensure_tiny_model() / name, bare / name)
    with pytest.raises(ValueError, match="model_path=.*bare.*processor / tokenizer does not load"):
        prepare(Params(model_path=str(bare), output_dir=str(tmp_path / "o1"), num_cards=2), get_backend("cpu"))


def test_an_output_dir_that_is_the_model_folder_is_refused(tmp_path):
    # the final weights would overwrite the model being trained
    model = tmp_path / "model"
    shutil.copytree(ensure_tiny_model(), model)
    with pytest.raises(ValueError, match="output_dir=.* is the model folder"):
        prepare(Params(model_path=str(model), output_dir=str(model), num_cards=2), get_backend("cpu"))


def test_an_attention_no_rank_could_load_is_refused_before_torchrun(tmp_path):
    with pytest.raises(ValueError, match="attn_implementation='foo'"):
        prepare(Params(packing=False, attn_implementation="foo", output_dir=str(tmp_path / "o2"),
                       num_cards=2), get_backend("cpu"))


def test_resuming_an_older_checkpoint_removes_the_later_ones_only_when_allowed_and_says_so(tmp_path):
    cpu = get_backend("cpu")
    out = tmp_path / "run"
    for step in (4, 6, 8):
        _checkpoint(out, step)
    with pytest.raises(ValueError, match=r"2 later complete checkpoint\(s\) \(checkpoint-6, checkpoint-8\).*"
                                         r"overwrite_output_dir=True"):
        prepare(Params(resume_from=str(out / "checkpoint-4"), max_steps=6, num_cards=2,
                       output_dir=str(out)), cpu)
    plan = prepare(Params(resume_from=str(out / "checkpoint-4"), max_steps=6, num_cards=2,
                          output_dir=str(out), overwrite_output_dir=True), cpu)
    assert any("2 later checkpoint(s) in output_dir (checkpoint-6, checkpoint-8) will be removed" in n
               for n in plan.notes), plan.notes


def test_an_unreadable_marker_state_or_missing_rank_file_is_named_before_launch(tmp_path):
    out = tmp_path / "run"
    corrupt = _checkpoint(out, 2)
    (corrupt / ck.MARKER).write_text("{not json")
    state = _checkpoint(out, 4)
    (state / "trainer_state.json").write_text("[1, 2")
    ranks = _checkpoint(out, 6)
    (ranks / "global_step6").mkdir()
    (ranks / "global_step6" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    reasons = {c.step: c.why_incomplete for c in ck.list_checkpoints(out)}
    assert reasons[2].startswith("hyport_checkpoint.json is unreadable (JSONDecodeError")
    assert reasons[4].startswith("trainer_state.json is unreadable (JSONDecodeError")
    assert reasons[6] == "1 of 2 ranks' ZeRO optimizer states in global_step6/ (a rank's file is missing)"
    with pytest.raises(ValueError, match=r"resume_from=.*checkpoint-6.*incomplete checkpoint \(1 of 2 ranks'"):
        ck.resolve_resume(str(ranks), out)
    (ranks / "global_step6" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"x")
    assert ck.newest_complete(out).step == 6


def test_overflow_drop_drops_too_long_records_and_counts_them(tmp_path):
    plan = prepare(Params(output_dir=str(tmp_path / "o"), overflow="drop", max_seq_len=40, num_cards=2),
                   get_backend("cpu", num_cards=2))
    assert plan.dataset["samples"] == 3
    assert any(n.startswith("overflow='drop': 11 record(s) longer than max_seq_len=40 dropped") for n in plan.notes)
    # the bundled smoke set was checked from a private copy: the output folder is not made
    assert plan.bundled_dataset and plan.dataset_path == str(tmp_path / "o" / "smoke_data" / "smoke_data_packing.json")
    assert not (tmp_path / "o").exists()


def test_the_plan_refuses_a_locked_folder_without_taking_the_lock(tmp_path):
    import fcntl

    from hyport_lib.train.output_dir import OutputDirBusy, check_not_locked, lock_file

    out = tmp_path / "run"
    check_not_locked(out)  # no folder: nothing to refuse, and nothing made
    assert not out.exists()
    out.mkdir()
    with open(out / lock_file(0), "w", encoding="utf-8") as held:
        held.write("pid 1, started then\n")
        held.flush()
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputDirBusy, match=r"another hyport train is running into it \(pid 1, started then\)"):
            check_not_locked(out)
        check_not_locked(out, node_rank=1)  # another node of the same job locks its own file
    check_not_locked(out)  # released with the holder's file
    assert sorted(p.name for p in out.iterdir()) == [lock_file(0)]


def test_a_save_killed_half_way_is_resumed_past_and_named(tmp_path):
    """A save killed half-way (hyport's saving marker, no completion) is hyport's own: resumed past."""
    out = tmp_path / "run"
    _checkpoint(out, 2)
    killed = out / "checkpoint-4"  # a save killed half-way: hyport's marker, no completion
    killed.mkdir()
    (killed / ck.SAVING_MARKER).write_text("{}")
    plan = prepare(Params(max_steps=6, num_cards=2, output_dir=str(out)), get_backend("cpu", num_cards=2))
    assert plan.resume_checkpoint.endswith("checkpoint-2")
    assert any("checkpoint-4 (no hyport_checkpoint.json" in n for n in plan.notes), plan.notes


def test_the_plan_reckons_host_ram_from_the_models_parameters_and_the_run(tmp_path):
    """It assumed 1 GB per CPU rank whatever the model (a 135 M full fine-tune peaked at 4.3 GB)."""
    from hyport_lib.devices.host_memory import ram_need_per_rank

    full = ram_need_per_rank("cpu", 135_000_000, "full", zero_stage=2, world_size=2)
    assert 3.8 < full.per_rank_gb < 4.6  # near the 4.3 GB measured
    lora = ram_need_per_rank("cpu", 135_000_000, "lora")
    assert lora.per_rank_gb < full.per_rank_gb
    zero3 = ram_need_per_rank("cpu", 135_000_000, "full", zero_stage=3, world_size=2)
    assert zero3.per_rank_gb < full.per_rank_gb and "/ 2 ranks (ZeRO-3)" in zero3.how
    card = ram_need_per_rank("npu", 3_800_000_000, "full", dtype="bf16", zero_stage=2, world_size=8)
    assert "x 2 B (bf16 weights)" in card.how and card.per_rank_gb > 3.8e9 * 2 / 2**30
    with pytest.raises(ValueError, match="mode='train'"):
        ram_need_per_rank("cpu", 1, "train")

    plan = prepare(Params(output_dir=str(tmp_path / "out")), get_backend("cpu"))
    note = next(n for n in plan.notes if n.startswith("host RAM: "))
    from hyport_lib.models.loading import build_empty_model
    count = sum(p.numel() for p in build_empty_model(plan.model_path).parameters())
    assert f"{count:,} parameters x 16 B" in note and "(full, cpu)" in note
