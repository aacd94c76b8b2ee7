"""Stage 05's memory on a real-size (sparse, never loaded) 7 B folder: a float32 reload or a
logits parity the host's RAM cannot hold is refused by the plan in one line with the figures
(``hyport verify`` exits 2), or, for folders written after the plan (stage 04's of the same
run), left out with a warning that keeps the figures; a reload that fits records its plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.memory import capacity as memory_capacity
from hyport_lib.memory.fit import DoesNotFit
from hyport_lib.utils.typed_records import from_mapping, to_mapping
from hyport_lib.weights import stage
from hyport_lib.weights.defaults import Sources
from hyport_lib.weights.memory_plan import plan_reload
from hyport_lib.weights.params import Params
from hyport_lib.weights.result import WeightsResult
from tests.real_size import write_sparse_checkpoint

GIB = 2 ** 30
#: The host of issue 41's trial: 2 cores and 23.5 GiB, where 7.6 B float32 weights (28.4 GiB) do not fit.
TRIAL_HOST = (int(23.5 * GIB), "the host's RAM, as this test sets it")


@pytest.fixture
def trial_host(monkeypatch):
    monkeypatch.setattr(memory_capacity, "host_ram", lambda: TRIAL_HOST)


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory) -> Path:
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B")


@pytest.fixture(scope="module")
def seven_b_copy(tmp_path_factory) -> Path:
    return write_sparse_checkpoint(tmp_path_factory.mktemp("q7b-checkpoint") / "checkpoint-100")


def _params(folder: Path, **kw) -> Params:
    return Params(**{"weights_path": str(folder), "full_scan": False, "logits_parity": False,
                     "consolidate_zero": False, **kw})


def test_a_float32_reload_the_host_cannot_hold_is_refused_naming_dtype(seven_b, trial_host):
    with pytest.raises(DoesNotFit) as refused:
        stage.plan(_params(seven_b, reload=True, dtype="float32"))
    said = str(refused.value)
    assert said.startswith("dtype: Qwen2.5-7B (7.62 B parameters) does not fit for reload, fp32")
    assert "of host RAM for 1 process > the host's 23.5 GiB" in said and "\n" not in said
    assert "nearest plan that fits: dtype=bfloat16 (" in said
    plan = stage.plan(_params(seven_b, reload=True, dtype="auto"))  # the config's bfloat16 fits
    assert plan.sources.weights == str(seven_b)


def test_a_logits_parity_the_host_cannot_hold_is_refused_naming_logits_parity(seven_b, seven_b_copy, trial_host):
    with pytest.raises(DoesNotFit) as refused:
        stage.plan(_params(seven_b, reload=False, logits_parity=True, checkpoint_path=str(seven_b_copy)))
    said = str(refused.value)
    assert said.startswith("logits_parity: the parity loads Qwen2.5-7B (7.62 B parameters) in float32")
    assert "GiB of host RAM > the host's 23.5 GiB" in said and said.endswith("set logits_parity=False (the "
                                                                           "checkpoint's tensors are still compared)")


def test_hyport_verify_says_the_refusal_in_one_line(seven_b, trial_host, capsys):
    assert main(["verify", str(seven_b), "--reload", "--dtype", "float32", "--no-record"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hyport verify: dtype: Qwen2.5-7B"), err
    assert "GiB of host RAM for 1 process > the host's 23.5 GiB" in err and "dtype=bfloat16" in err


def test_a_folder_written_after_the_plan_is_left_out_with_the_figures(seven_b, trial_host):
    """Stage 04's folders do not exist when a report run plans stage 05: judged when it runs."""
    params = _params(seven_b, reload=True, dtype="float32")
    result = stage.run(stage.WeightsPlan(params, Sources(str(seven_b), None, None, "as given")))
    assert result.reload is None and result.reload_memory is None  # no child started
    (left,) = [f for f in result.findings if f.cls == "does_not_fit"]
    assert left.severity == "warning" and left.file == "Qwen2.5-7B"
    assert left.message.startswith("the reload was left out: dtype: Qwen2.5-7B (7.62 B parameters)")
    assert "> the host's 23.5 GiB" in left.message
    summary = stage.summarize(result)
    assert summary.verdict == "WARN" and "does_not_fit" in summary.why


def test_a_reload_that_fits_records_its_plan(seven_b, monkeypatch):
    """Planned only: the folder's data are holes, so no child loads it here."""
    monkeypatch.setattr(memory_capacity, "host_ram", lambda: (64 * GIB, "a 64 GiB host, as this test sets it"))
    result = WeightsResult(reload_memory=plan_reload(seven_b, "bfloat16"))
    memory = from_mapping(WeightsResult, to_mapping(result)).reload_memory
    assert memory == result.reload_memory and memory.fits and memory.card_line == ""
    assert memory.host_line.startswith("fits: ") and memory.host_line.endswith("(a 64 GiB host, as this test sets it)")
    assert memory.setting == "reload, bf16, seq 1, batch 1" and 14 < memory.host_gib < 17  # 7.6 B x 2 B + runtime
