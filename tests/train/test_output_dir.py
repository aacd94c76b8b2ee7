"""output_dir (hyport_lib/train/output_dir.py): checkpoints written partly are never taken, a resume
names every difference from the run, only hyport's checkpoints are dropped; and under real
``hyport train`` commands (torchrun on one CPU process: the folder is the launcher's, whatever the
number of ranks): another tool's files are never removed or overwritten without
overwrite_output_dir, and two runs into one folder cannot interleave (an exclusive lock; the
second is refused naming the first). A later run into a folder of hyport's own files:
test_training_run's reused-folder test. The tests that start a process are marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hyport_lib.results import CHECKPOINT_MARKER
from hyport_lib.backend import get_backend
from hyport_lib.train import output_dir, stage
from hyport_lib.train.output_dir import (OutputDirBusy, RUN_MARKER, foreign_entries, lock_file,
                                         lock_output_dir, release_output_dir)
from hyport_lib.train.params import Params
from hyport_lib.train.preflight import prepare


def _checkpoint(folder: Path, step: int, complete: bool = True, world: int = 2, states: bool = True,
                **versions) -> Path:
    """A checkpoint folder as the Trainer and DeepSpeed leave it (``states``: every rank's ZeRO
    optimizer states in ``global_step<N>/``)."""
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text("{}")
    if states:
        (path / f"global_step{step}").mkdir()
        for rank in range(world):
            (path / f"global_step{step}" / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"x")
    if complete:
        output_dir.write_marker(path, step=step, world_size=world, zero_stage=2, finetuning_type="full")
        if versions:
            data = json.loads((path / CHECKPOINT_MARKER).read_text())
            data["versions"].update(versions)
            (path / CHECKPOINT_MARKER).write_text(json.dumps(data))
    return path


def test_a_checkpoint_written_partly_is_never_taken(tmp_path):
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 20, complete=False)  # killed mid-save: no marker
    (tmp_path / "checkpoint-30").mkdir()  # an empty folder
    found = output_dir.list_checkpoints(tmp_path)
    assert [(c.step, c.complete) for c in found] == [(10, True), (20, False), (30, False)]
    assert output_dir.resolve_resume("auto", tmp_path).step == 10
    assert output_dir.resolve_resume("none", tmp_path) is None
    with pytest.raises(ValueError, match="incomplete checkpoint"):
        output_dir.resolve_resume(str(tmp_path / "checkpoint-20"), tmp_path)
    assert output_dir.resolve_resume("auto", tmp_path / "nothing-here") is None


def test_resume_refuses_another_world_size_or_library_version(tmp_path):
    same = output_dir.Checkpoint(_checkpoint(tmp_path / "a", 5), 5, True)
    output_dir.check_compatible(same, world_size=2, zero_stage=2, finetuning_type="full")
    with pytest.raises(ValueError, match="world size 2 when saved, 4 now"):
        output_dir.check_compatible(same, world_size=4, zero_stage=2, finetuning_type="full")
    old = output_dir.Checkpoint(_checkpoint(tmp_path / "b", 5, deepspeed="0.15.0"), 5, True)
    with pytest.raises(ValueError, match="deepspeed 0.15.0 when saved"):
        output_dir.check_compatible(old, world_size=2, zero_stage=2, finetuning_type="full")


def test_only_hyports_checkpoints_after_the_starting_point_are_dropped(tmp_path):
    # hyport's checkpoints beyond the starting point are dropped; another tool's stays
    for step in (2, 4, 6):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "hyport_saving.json").write_text("{}")
    (tmp_path / "run" / "checkpoint-500").mkdir()
    assert output_dir.drop_checkpoints_after(tmp_path / "run", 2) == ["checkpoint-4", "checkpoint-6"]
    assert [c.step for c in output_dir.list_checkpoints(tmp_path / "run")] == [2, 500]


REPO = Path(__file__).resolve().parents[2]


def _train(out: Path, *args: str, wait: bool = True):
    # one weights file (the tiny model's own shard size would write several)
    cmd = [sys.executable, "-m", "hyport_lib", "train", "--output-dir", str(out), "--max-steps", "2",
           "--num-cards", "1", "--device", "cpu", "--no-record", "--max-shard-size", "5GB", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_another_tools_files_stop_the_run_and_survive_an_allowed_one(tmp_path):
    out = tmp_path / "out"
    foreign = out / "checkpoint-500"
    foreign.mkdir(parents=True)
    (foreign / "weights.bin").write_bytes(b"not hyport's")
    (out / "model.safetensors").write_bytes(b"someone's model")
    refused = _train(out)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "checkpoint-500, model.safetensors" in line and "overwrite_output_dir" in line
    assert not (out / "metrics.jsonl").exists()  # nothing ran
    allowed = _train(out, "--overwrite-output-dir", "true")
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr[-2000:]
    assert (foreign / "weights.bin").read_bytes() == b"not hyport's"  # never removed
    owned = json.loads((out / RUN_MARKER).read_text())["files"]
    assert "model.safetensors" in owned and "config.json" in owned
    # the next run into the folder: what hyport wrote is its own; the other tool's still stops it
    assert foreign_entries(out) == ["checkpoint-500"]
    (foreign / "weights.bin").unlink()
    foreign.rmdir()
    assert foreign_entries(out) == []
    # what the next run checks before it starts (ForeignFiles, OutputDirBusy) lets it start
    stage.plan(Params(output_dir=str(out), max_steps=2, num_cards=1, device="cpu", resume_from="none"))


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    first = _train(out, "--max-steps", "10", wait=False)
    try:
        lock = out / lock_file(0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (lock.is_file() and lock.read_text().startswith("pid")):
            time.sleep(0.2)
        holder = lock.read_text().strip()
        second = _train(out)
        assert second.returncode == 2, second.stderr
        assert "another hyport train is running into it" in second.stderr and holder in second.stderr
        assert f"pid {first.pid}" in holder
    finally:
        output, _ = first.communicate(timeout=600)
    assert first.returncode == 0, output[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # the whole run, never interleaved
    # the kernel released the lock with the process: a later run takes it
    lock_output_dir(out)
    release_output_dir(out)


@pytest.mark.slow
def test_the_lock_dies_with_a_killed_launcher(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from hyport_lib.train.output_dir import lock_output_dir; "
         f"lock_output_dir(Path({str(out)!r})); print('held', flush=True); time.sleep(600)"],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(OutputDirBusy, match=rf"pid {holder.pid}, started"):
        lock_output_dir(out)
    holder.kill()
    holder.wait()
    lock_output_dir(out)  # no stale lock after SIGKILL
    release_output_dir(out)


@pytest.mark.slow
def test_a_bad_record_stops_the_report_before_stage_04_or_05_runs(tmp_path):
    """hyport report plans every selected stage first: stage 04's bad record stops the run
    (exit 2, naming the stage and the dataset) before anything is written, so stage 05 never
    verifies the embedded model in place of weights stage 04 did not train."""
    data = tmp_path / "bad.json"
    data.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]))
    done = subprocess.run([sys.executable, "-m", "hyport_lib", "report", "--profile", "default",
                           "--only", "04,05", "-p", f"dataset_path={data}", "--output-dir",
                           str(tmp_path / "out"), "--cell-timeout", "600"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"04_train: 1 records in {data}: 0 good, 1 with problems" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_final_save_killed_before_its_file_list_leaves_its_files_hyports(tmp_path):
    # the final save killed before its file list: what it wrote is still hyport's, what was
    # there before it (another tool's file) is not
    out = tmp_path / "run"
    out.mkdir()
    (out / "someone_else.bin").write_bytes(b"x")
    (out / RUN_MARKER).write_text(json.dumps({"before": output_dir._listing(out)}))
    (out / "model.safetensors").write_bytes(b"x")
    for leftover in (".hyport-write-test-ab12", ".hyport_run.json.k2j3.tmp", ".metrics.jsonl.zz.tmp"):
        (out / leftover).write_text("")
    assert foreign_entries(out) == ["someone_else.bin"]


def test_the_plan_keeps_no_lock_and_the_nodes_of_one_job_lock_apart(tmp_path):
    out = tmp_path / "run"
    prepare(Params(max_steps=6, num_cards=2, output_dir=str(out)), get_backend("cpu", num_cards=2))
    assert not output_dir._HELD
    lock_output_dir(out, node_rank=1)
    lock_output_dir(tmp_path / "other")
    release_output_dir(out)
    release_output_dir(tmp_path / "other")
    assert not output_dir._HELD
