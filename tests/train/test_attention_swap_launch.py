"""A model whose swapped attention would differ (tests/biased_attention_model.py: a
position bias handed to the attention function) never trains silently different: packed,
``hyport train`` exits 2 before any worker starts; unpacked with hyport's attention asked
for, it trains on eager, and its loss is eager's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hyport_lib.models.loading import load_model, load_processor
from hyport_lib.train import stage
from hyport_lib.train.packing import proof_batches
from hyport_lib.train.params import Params
from biased_attention_model import write_biased_model

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def biased_model(tmp_path_factory, zoo):
    return str(write_biased_model(tmp_path_factory.mktemp("biased"), zoo["llama"]))


@pytest.fixture
def one_record(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([{"instruction": "Where is the key?",
                                 "output": "The key is under the blue book on the second shelf."}]),
                    encoding="utf-8")
    return path


def test_packed_training_of_a_model_the_swap_cannot_serve_stops_before_launch(biased_model, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "hyport_lib", "train", "--model-path", biased_model, "--trust-remote-code",
         "--packing", "--num-cards", "1", "--max-steps", "1", "--output-dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "HYPORT_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hyport train: packing=True needs hyport's attention")
    assert "position_bias" in last and "packing=False" in last
    assert not out.exists()  # nothing started, nothing written


def test_unpacked_training_keeps_eager_and_its_loss_is_eagers(biased_model, one_record, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    params = Params(model_path=biased_model, trust_remote_code=True, packing=False,
                    attn_implementation="hyport_torch", dataset_path=str(one_record), num_cards=1,
                    max_steps=1, precision="fp32", zero_stage=0, output_dir=str(tmp_path / "run"))
    plan = stage.plan(params)
    assert plan.attn_implementation == "eager"
    assert plan.attention_proof.verdict == "FAIL" and "position_bias" in plan.attention_proof.reason
    assert any(note.startswith("attn_implementation='hyport_torch' not used") for note in plan.notes)
    result = stage.run(plan)
    assert result.exit_code == 0, result.reason
    record = stage.summarize(result)
    assert "FAIL" in record.headline["attention proof"] and record.headline["attention"] == "eager"

    loaded = load_processor(biased_model, trust_remote_code=True)
    _, batch, _ = proof_batches(params, biased_model, loaded, _records(one_record), [])[0]
    model = load_model(biased_model, attn_implementation="eager", trust_remote_code=True).float()
    with torch.no_grad():
        eager_loss = float(model(**{k: v for k, v in batch.items() if not k.startswith("hyport_")}).loss)
    assert result.metrics[0].loss == pytest.approx(eager_loss, rel=1e-5)


def _records(path):
    from hyport_lib.train.dataset import load_dataset

    return load_dataset(path).records
