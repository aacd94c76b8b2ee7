"""Real torchrun + DeepSpeed runs on CPU processes (gloo): ZeRO-2, ZeRO-3, LoRA, a rank
killed and resumed, an injected NaN (two nodes: test_nodes_run.py), and the papermill
commands of notebook 04. Two ranks where ranks meet (ZeRO partitions and reductions, a
restarted rank, ranks with different batches); one where the behaviour is the launcher's
or one rank's (relaunch, a reused folder, LoRA's adapter, the NaN flags): each rank is a
process importing torch, transformers and DeepSpeed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.results import record
from hyport_lib.train import stage
from hyport_lib.display import VEGA_LITE_MIME
from hyport_lib.train.params import Params
from fault_injection.hyport_faults import KILL_FAULT_ENV, NAN_FAULT_ENV
from fixtures_runs import ZERO2_STEPS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _train(tmp_path, name="run", **params):
    params.setdefault("max_steps", 4)
    params.setdefault("save_steps", 2)
    params.setdefault("resume_from", "none")
    return stage.run(stage.plan(Params(output_dir=str(tmp_path / name), **params)))


def _steps(result):
    return [r.step for r in result.metrics]


def _reload(folder):
    from transformers import AutoModelForImageTextToText

    model, info = AutoModelForImageTextToText.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    return model


def _tiny_parameters():
    from hyport_lib.models.tiny import ensure_tiny_model

    return sum(p.numel() for p in _reload(str(ensure_tiny_model())).parameters())


def test_zero2_run_exits_0_and_its_weights_reload(zero2_run, tmp_path):
    # The session's ZeRO-2 run (tests/fixtures_runs.py: ZERO2_STEPS steps, save_steps 2),
    # also read by tests/weights/test_zero.py and by the killed-run and reused-folder tests below.
    result = zero2_run
    assert result.status == "ok" and result.exit_code == 0, result.reason
    assert stage.summarize(result).verdict == "PASS", stage.summarize(result)
    assert result.diagnosis is None  # logs are diagnosed only after a failure
    assert _steps(result) == list(range(1, ZERO2_STEPS + 1))
    assert all(r.world_size == 2 and r.tokens > r.real_tokens > 0 for r in result.metrics)
    complete = [c.step for c in result.checkpoints if c.complete]
    assert complete == list(range(2, ZERO2_STEPS + 1, 2))
    checkpoint = Path(result.last_checkpoint)
    assert (checkpoint / f"global_step{ZERO2_STEPS}").is_dir() and (checkpoint / "hyport_checkpoint.json").is_file()
    assert result.final_dir == result.plan.output_dir
    model = _reload(result.final_dir)
    assert sum(p.numel() for p in model.parameters()) == _tiny_parameters()
    assert (Path(result.final_dir) / "tokenizer.json").is_file()  # processor files beside the weights
    summary = result.summary
    warmup = result.plan.params.throughput_warmup_steps
    assert warmup > 0 and summary.tokens_per_s_per_card > 0
    assert summary.measured_steps == ZERO2_STEPS - warmup  # warm-up left out
    assert result.worker.trainer_loss > 0
    # auto: bf16 only where this CPU computes it natively (AMX or AVX512-BF16), float32 elsewhere
    chosen = get_backend("cpu").choose_precision()
    assert (result.plan.precision, result.plan.precision_reason) == (chosen.precision, chosen.reason)
    assert result.plan.deepspeed.torch_adam is True
    saved = json.loads(record(stage, result, directory=tmp_path / "results").read_text())
    assert saved["provenance"]["device"] == "cpu" and saved["data"]["final_dir"] == result.final_dir


def test_zero3_run_saves_real_weights_that_reload(tmp_path):
    result = _train(tmp_path, zero_stage=3, max_shard_size="300KB")
    assert result.status == "ok", result.reason
    assert result.plan.deepspeed.zero_stage == 3
    index = json.loads((Path(result.final_dir) / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2  # sharded as asked
    model = _reload(result.final_dir)
    assert sum(p.numel() for p in model.parameters()) == _tiny_parameters()
    assert all(p.numel() > 0 for p in model.parameters())  # no ZeRO-3 placeholders
    # the index counts the gathered model, not rank 0's ZeRO-3 partitions
    if "total_parameters" in index.get("metadata", {}):
        assert index["metadata"]["total_parameters"] == _tiny_parameters()


def test_lora_under_zero3_finishes_and_merges(tmp_path):
    """The merge builds a plain model on rank 0 alone: under ZeRO-3 it used to wait for
    the other rank for ever after the last step."""
    result = _train(tmp_path, zero_stage=3, finetuning_type="lora", lora_rank=4, lora_alpha=8,
                    max_steps=2, save_steps=2, train_timeout_s=240)
    assert result.status == "ok", result.reason
    assert (Path(result.final_dir) / "adapter" / "adapter_config.json").is_file()
    assert sum(p.numel() for p in _reload(result.final_dir).parameters()) == _tiny_parameters()


def test_lora_run_saves_an_adapter_and_merged_weights(tmp_path):
    import torch

    from hyport_lib.models.tiny import ensure_tiny_model

    result = _train(tmp_path, finetuning_type="lora", lora_rank=4, lora_alpha=8, learning_rate=1e-2,
                    num_cards=1)
    assert result.status == "ok", result.reason
    assert result.worker.trainable_parameters < _tiny_parameters() / 10
    assert (Path(result.final_dir) / "adapter" / "adapter_config.json").is_file()
    merged = _reload(result.final_dir)
    base = _reload(str(ensure_tiny_model()))
    changed = [name for (name, p), (_, q) in zip(merged.named_parameters(), base.named_parameters())
               if not torch.allclose(p.float(), q.float())]
    assert changed and all("q_proj" in n or "v_proj" in n for n in changed), changed


def test_a_rank_killed_mid_run_is_restarted_and_resumes(zero2_run, fault_switches, tmp_path, monkeypatch):
    # The reference is the session's ZeRO-2 run: the same parameters as the killed run
    # below (6 steps, save_steps 2, ZeRO-2), without the kill.
    reference = zero2_run
    assert reference.plan.params.max_steps == 6 and reference.plan.params.save_steps == 2
    monkeypatch.setenv(KILL_FAULT_ENV, "3:1")
    # resume_from="none" for the first attempt: a restart still resumes this launch's
    # newest complete checkpoint instead of starting over.
    result = _train(tmp_path, "killed", max_steps=6, save_steps=2, max_restarts=1,
                    resume_from="none")
    assert result.status == "ok", result.reason
    assert _steps(result) == [1, 2, 3, 4, 5, 6]  # step 3 was lost with the kill, redone once
    assert result.summary.restarts == 1 and result.worker.resumed_step == 2
    assert [r.restart for r in result.metrics] == [0, 0, 1, 1, 1, 1]
    for got, want in zip(result.metrics, reference.metrics):  # loss and lr continue
        # The loss moves ~1 % over the run: only a tight tolerance tells a resumed run
        # from one that lost its weights (resumed runs match the reference bit for bit).
        assert got.learning_rate == pytest.approx(want.learning_rate, rel=1e-6)
        assert got.loss == pytest.approx(want.loss, rel=1e-5)
        assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-4)


def test_a_killed_run_relaunched_with_resume_auto_ends_at_max_steps(fault_switches, tmp_path, monkeypatch):
    monkeypatch.setenv(KILL_FAULT_ENV, "3:0")
    failed = _train(tmp_path, "job", max_steps=5, save_steps=2, resume_from="auto", num_cards=1)
    assert failed.status == "failed" and stage.summarize(failed).verdict == "FAIL"
    assert "SIGKILL" in failed.reason or "rank" in failed.reason
    monkeypatch.delenv(KILL_FAULT_ENV)
    resumed = _train(tmp_path, "job", max_steps=5, save_steps=2, resume_from="auto", num_cards=1)
    assert resumed.status == "ok", resumed.reason
    assert resumed.plan.resume_checkpoint.endswith("checkpoint-2")
    assert _steps(resumed) == [1, 2, 3, 4, 5]
    assert stage.summarize(resumed).verdict == "PASS"


def test_text_only_and_image_batches_on_different_ranks_train(tmp_path):
    """Unpacked, the smoke set gives one rank a text-only batch while the other has images:
    the vision tower must still run on both, or ZeRO-2's reduction aborts (seen: gloo
    "Received data size doesn't match expected size" at step 3)."""
    result = _train(tmp_path, packing=False, max_steps=8, save_steps=100000)
    assert result.status == "ok", result.reason
    assert _steps(result) == list(range(1, 9)) and stage.summarize(result).verdict == "PASS"
    # the train_loss shown is the mean of the logged step losses
    losses = [r.loss for r in result.metrics]
    assert stage.summarize(result).headline["train_loss"] == pytest.approx(sum(losses) / len(losses),
                                                                           abs=1e-4)


def test_injected_nan_shows_in_the_flags(fault_switches, tmp_path, monkeypatch):
    monkeypatch.setenv(NAN_FAULT_ENV, "2")
    result = _train(tmp_path, max_steps=3, save_steps=100000, num_cards=1)
    assert result.status == "ok", result.reason
    flagged = {r.step: r.nonfinite_loss for r in result.metrics}
    # the metrics file is strict JSON: the NaN is a null beside its flag
    lines = Path(result.plan.metrics_path).read_text().splitlines()
    assert all(json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c}")) for line in lines)
    assert result.metrics[1].loss is None
    assert flagged[2] is True and flagged[1] is False and flagged[3] is False
    judged = stage.summarize(result)
    assert judged.verdict == "WARN" and "non-finite loss at steps [2]" in judged.why
    finite = [r.loss for r in result.metrics if r.step != 2]  # not a NaN counted as 0
    assert judged.headline["train_loss"] == pytest.approx(sum(finite) / 2, abs=1e-4)
    assert result.metrics[1].skipped is True or result.metrics[1].nonfinite_grad_norm is True


@pytest.mark.parametrize("where", ["root", "notebooks"])
def test_the_users_papermill_command_works(where, papermill_04):
    """``papermill notebooks/04_train.ipynb out.ipynb -p max_steps 20`` from the repository
    root, and ``papermill 04_train.ipynb out.ipynb -p max_steps 20`` from notebooks/
    (tests/fixtures_runs.py; test_notebooks.py reads the second as 04's run without
    parameters, 20 being the notebook's own max_steps)."""
    done = papermill_04(where)
    run = done.proc
    assert run.returncode == 0, run.stderr[-3000:]
    nb = json.loads(done.notebook.read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    pngs = [o["data"] for o in outputs if "image/png" in o.get("data", {})]
    # the live plot's final state, once (one display handle), and the loss explorer's static
    # PNG in its own Vega-Lite bundle (what the report shows of it)
    assert sorted(VEGA_LITE_MIME in data for data in pngs) == [False, True], [sorted(d) for d in pngs]
    text = json.dumps(outputs)
    assert "step 20/20" in text and "finished" in text
    recorded = json.loads((done.results / "04_train.json").read_text())
    assert recorded["verdict"] == "PASS" and recorded["headline"]["steps"] == 20
    assert recorded["data"]["summary"]["last_step"] == 20


def test_a_reused_output_dir_never_passes_off_old_checkpoints(zero2_run, tmp_path):
    """A later run in the same folder drops the checkpoints beyond its starting point (they
    are not its own, and the Trainer would write into them), and keeps its own save_steps
    after a resume (the Trainer would take the checkpoint's)."""
    # The first run is the session's ZeRO-2 run (save_steps 2, as _train's default),
    # copied: the later runs write into the folder.
    first = zero2_run
    shutil.copytree(first.plan.output_dir, tmp_path / "job")
    assert [c.step for c in first.checkpoints] == list(range(2, ZERO2_STEPS + 1, 2))
    again = _train(tmp_path, "job", max_steps=2, save_steps=2, resume_from="none", num_cards=1)
    assert [c.step for c in again.checkpoints] == [2] and again.last_checkpoint.endswith("checkpoint-2")
    assert stage.summarize(again).verdict == "PASS"
    resumed = _train(tmp_path, "job", max_steps=5, save_steps=100000, resume_from="auto", num_cards=1)
    judged = stage.summarize(resumed)
    assert resumed.worker.resumed_step == 2 and judged.verdict == "PASS", judged
    assert [c.step for c in resumed.checkpoints] == [2, 5]  # no checkpoint-4: 100000 won


def test_an_interrupt_ends_torchrun_and_records_interrupted(tmp_path):
    # What notebook 04 does: the Stop button (or Kernel -> Interrupt) sends the kernel a
    # SIGINT; torchrun and its ranks stop, and the steps that finished come back INTERRUPTED.
    import signal

    import psutil

    from hyport_lib.workbook.stop import StopButton, run_stoppable

    stop, seen = StopButton(), []

    def display(progress):
        seen.append(progress)
        if progress.done_steps >= 2 and progress.running:
            signal.raise_signal(signal.SIGINT)  # the server's interrupt, as the kernel gets it

    plan = stage.plan(Params(output_dir=str(tmp_path / "run"), max_steps=500, num_cards=1,
                             save_steps=1000, resume_from="none"))
    result = run_stoppable(stage.run, plan, on_progress=stop.watch(display))
    assert result.status == "interrupted" and stage.summarize(result).verdict == "INTERRUPTED"
    assert "interrupted before torchrun exited" in stage.summarize(result).summary  # never "exit None"
    assert 2 <= len(result.metrics) < 500 and result.reason.startswith("stopped by a signal after step")
    assert not seen[0].records and seen[0].ranks == 1 and seen[0].device == "cpu"  # from the first poll
    assert seen[-1].stopped and not seen[-1].running  # the display heard how it ended
    assert stop.state == "done" and stop.note.startswith("stopped")
    assert psutil.Process().children(recursive=True) == []  # torchrun and its rank are gone
    path = record(stage, result)
    assert json.loads(Path(path).read_text())["verdict"] == "INTERRUPTED"
