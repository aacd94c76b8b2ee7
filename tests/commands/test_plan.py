"""``hyport plan`` on a real-size (sparse) checkpoint: the table from headers alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyport_lib.commands import main
from tests.real_size import write_sparse_checkpoint

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory):
    return write_sparse_checkpoint(tmp_path_factory.mktemp("plan") / "Qwen2.5-7B")


def test_plan_answers_will_it_fit_on_eight_910b3(seven_b, capsys):
    assert main(["plan", "--model-path", str(seven_b), "--num-cards", "8", "--card-memory-gib", "64",
                 "--host-ram-gib", "1500", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"] == 7_615_616_512
    rows = {(r["stage"], r["ZeRO"], r["fine-tune"], r["offload"]): r for r in out["plans"]}
    # ZeRO 0, 2, 3 (stage 04's) x full / LoRA, offload where ZeRO allows, and inference
    assert len(rows) == 11 and not any(zero == 1 for _, zero, _, _ in rows)
    zero0 = rows[("training", 0, "full", "-")]
    assert zero0["card"] == "does not fit" and zero0["card GiB"] > 64
    zero2 = rows[("training", 2, "full", "-")]
    assert zero2["card"] == "fits" and 30 < zero2["card GiB"] < 64
    assert rows[("training", 3, "full", "-")]["card GiB"] < zero2["card GiB"]


@pytest.mark.slow  # npu-smi is a process
def test_plan_reads_the_card_from_npu_smi(seven_b, fake_npu, monkeypatch, capsys):
    monkeypatch.setenv("HYPORT_FAKE_NPU_SMI_FILE", str(DATA / "npu_smi" / "910b_24x_classic.txt"))
    assert main(["plan", "--model-path", str(seven_b), "--num-cards", "8", "--host-ram-gib", "1500",
                 "--card-memory-gib", "32"]) == 0
    out = capsys.readouterr().out
    # the tool's figure wins over the parameter, which the line says it set aside
    assert "64.0 GiB per card (910B3, 65,536 MB as npu-smi reports it; card_memory_gib=32 set aside)" in out
    assert "8 cards;" in out and "every row: bf16, seq 2048, micro-batch 1, gradient checkpointing" in out


def test_plan_refuses_a_bad_figure_in_one_line(seven_b, capsys):
    assert main(["plan", "--model-path", str(seven_b), "--card-memory-gib", "0"]) == 2
    assert capsys.readouterr().err.strip() == "hyport plan: --card-memory-gib=0: expected a positive number"
