"""Stage 01 as a whole: collected on this host and on the torch_npu double, ``hyport env``
(text, JSON, exit code, a copied tree), the notebook, the verdict and the drafts; nothing
secret in the report's text or JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hyport_lib.backend import get_backend
from hyport_lib.commands import main
from hyport_lib.devices.probe import DeviceProcess, probe_devices
from hyport_lib.environment import stage
from hyport_lib.devices.ascend_versions import CannFacts
from hyport_lib.environment.params import Params
from hyport_lib.results import Check, worst_verdict
from hyport_lib.utils.imports import clear_import_caches, collect_versions

from conftest import requires_full_stack

from .test_container import DRIVER_24_1_RC3, DRIVER_FLAG, FIRMWARE_7_5, _run, build_tree


REPO = Path(__file__).resolve().parents[2]

SAMPLES = Path(__file__).parents[1] / "data" / "npu_smi"


def _collect(**values) -> stage.EnvironmentReport:
    """Stage 01 run as the notebook runs it, with these parameters."""
    return stage.run(stage.plan(Params(**values)))


def test_env_cli_passes_with_gpus_hidden_on_cpu(capsys, monkeypatch):
    for value in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        code = main(["env", "--device", "cpu", "--no-record"])
        out = capsys.readouterr().out
        assert f"[PASS] visible_devices: CUDA_VISIBLE_DEVICES={value!r}: GPUs hidden" in out
        assert "[FAIL]" not in out and code == 0, out


@pytest.mark.slow
def test_hidden_gpus_on_an_npu_host(fake_npu, npu_smi_sample, monkeypatch):
    npu_smi_sample(_npu_smi_table(4, busy={}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    report = _collect(device="npu", num_cards=2, check_ports=False)
    visible = [c for c in report.checks if c.name == "visible_devices"]
    assert [c.verdict for c in visible] == ["PASS", "SKIP"]  # the NPU variable first
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in visible[0].reason
    assert "GPUs hidden" in visible[1].reason
    assert report.check("busy_cards").verdict == "PASS"


def test_requested_cuda_names_the_hidden_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    report = _collect(device="cuda", check_ports=False)  # no CUDA here: falls back
    assert report.check("backend").verdict == "FAIL"
    check = report.check("visible_devices")
    assert check.verdict == "FAIL" and check.reason.startswith("CUDA_VISIBLE_DEVICES is set but empty")


def _busy(backend) -> dict:
    """Cards that some process holds: ``{logical index: processes}``."""
    return {d.index: d.processes for d in probe_devices(backend).devices if d.processes}


def _npu_smi_table(cards: int, busy: dict[int, int]) -> str:
    """An ``npu-smi info`` text (24.x layout) for ``cards`` 910B3 chips; ``busy``: card -> pid."""
    rule = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
    lines = ["+" + "-" * 96 + "+", "| npu-smi 24.1.rc1                 Version: 24.1.rc1" + " " * 45 + "|",
             "| NPU   Name                | Health        | Power(W)    Temp(C)           "
             "Hugepages-Usage(page)|",
             "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  "
             "HBM-Usage(MB)        |", rule]
    for i in range(cards):
        used = 60000 if i in busy else 3300
        lines += [f"| {i:<5} 910B3               | OK            | 95.0        40                "
                  f"0    / 0             |",
                  f"| 0                         | 0000:{i:02X}:00.0  | 0           0    / 0          "
                  f"{used:<5}/ 65536         |", rule]
    lines += ["| NPU     Chip              | Process id    | Process name             | "
              "Process memory(MB)      |", rule]
    for i in range(cards):
        if i in busy:
            lines.append(f"| {i:<7} 0                 | {busy[i]:<13} | python                   | "
                         f"56000                   |")
        else:
            lines.append(f"| No running processes found in NPU {i}" + " " * 60 + "|")
        lines.append(rule)
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_busy_cards_judged_among_the_visible_cards(fake_npu, npu_smi_sample, monkeypatch, capsys):
    from hyport_lib.devices.card_plan import plan_grid

    npu_smi_sample(_npu_smi_table(8, busy={4: 4444, 5: 5555}))
    assert _busy(get_backend("npu")) == {4: [DeviceProcess(4444, "python", 56000)],
                                             5: [DeviceProcess(5555, "python", 56000)]}
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    code = main(["env", "--device", "npu", "--num-cards", "2", "--no-record"])
    out = capsys.readouterr().out
    assert code == 1
    assert ("[FAIL] busy_cards: both visible cards (4, 5) are busy (ASCEND_RT_VISIBLE_DEVICES=4,5): "
            "0 free, 2 requested") in out
    # The grid agrees: under that variable it would skip both cards.
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")  # what the runtime shows under it
    assert plan_grid(get_backend("npu"), num_cards=2).to_run == []


@pytest.mark.parametrize("visible, num_cards, verdict, words", [
    ("4,5", 2, "FAIL", ["both visible cards (4, 5) are busy", "0 free, 2 requested"]),
    ("4,5", None, "FAIL", ["both visible cards (4, 5) are busy", "nothing can run"]),
    ("5", 1, "FAIL", ["the only visible card (5) is busy"]),
    ("3,4,5,6", 2, "WARN", ["2 of 4 visible cards (3, 4, 5, 6) busy", "pid 4444", "skips them"]),
    ("3,4,5,6", 3, "FAIL", ["2 of 4 visible cards (3, 4, 5, 6) busy", "2 free, 3 requested"]),
    ("5,6", 2, "FAIL", ["1 of 2 visible cards (5, 6) busy", "1 free, 2 requested",
                        "not visible, so not used: card 4"]),
    ("0,1", 2, "PASS", ["2 visible cards (0, 1)", "not visible, so not used: cards 4, 5"]),
    ("0,1", 3, "FAIL", ["only 2 visible cards (0, 1)", "3 requested"]),
    (None, 2, "WARN", ["2 of 8 cards busy", "pid 5555"]),
    (None, 7, "FAIL", ["6 free, 7 requested"]),
])
@pytest.mark.slow
def test_busy_cards_check_with_a_visible_variable(fake_npu, npu_smi_sample, monkeypatch,
                                                  visible, num_cards, verdict, words):
    npu_smi_sample(_npu_smi_table(8, busy={4: 4444, 5: 5555}))
    if visible is None:
        monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", visible)
    check = _collect(device="npu", num_cards=num_cards, check_ports=False).check("busy_cards")
    assert check.verdict == verdict, check.reason
    for word in words:
        assert word in check.reason, check.reason
    assert (f"(ASCEND_RT_VISIBLE_DEVICES={visible})" in check.reason) == (visible is not None)


@pytest.mark.slow
def test_collect_environment_on_fake_npu(fake_npu, npu_smi_sample, monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0, 1")
    npu_smi_sample((SAMPLES / "910b_24x_classic.txt").read_text(encoding="utf-8"))
    report = _collect(device="npu", num_cards=2, check_ports=False)
    assert report.device == "npu" and report.device_source == "npu-smi"
    assert report.versions["torch_npu"] == fake_npu.__version__
    got = {c.name: c.verdict for c in report.checks}
    assert got["torch_npu_import"] == "PASS"
    # "0, 1": the runtime sees card 0 only, so 2 requested cannot be met (busy card 1 unused)
    assert got["busy_cards"] == "FAIL"
    assert "only 1 visible card (0)" in report.check("busy_cards").reason
    assert "not visible, so not used: card 1" in report.check("busy_cards").reason
    assert got["card_health"] == "WARN"  # card 2 reports Warning
    assert got["visible_devices"] == "FAIL"  # "0, 1" -> the runtime sees card 0 only
    torch_minor = ".".join(report.versions["torch"].split(".")[:2])
    assert got["torch_npu_compat"] == ("PASS" if torch_minor == "2.8" else "FAIL")
    assert stage.summarize(report).verdict == "FAIL"
    assert report.cann.driver_version == "24.1.rc1"
    assert "pid 576489 python 60703 MB" in stage.report_text(report)
    # the smallest card npu-smi lists, and each card as it lists them
    memory = report.check("card_memory")
    assert memory.verdict == "PASS" and memory.reason.startswith(
        "64.0 GiB per card (910B3, 65,536 MB as npu-smi reports it)")
    assert "GiB HBM" in memory.reason
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "3")  # the sample's host: 3 cards
    report2 = _collect(device="npu", num_cards=2, check_ports=False)
    busy2 = report2.check("busy_cards")
    assert busy2.verdict == "WARN" and busy2.reason.startswith("1 of 3 cards busy")
    report3 = _collect(device="npu", num_cards=3, check_ports=False)
    assert report3.check("busy_cards").verdict == "FAIL"
    assert "2 free, 3 requested" in report3.check("busy_cards").reason


def _report(*verdicts):
    checks = [Check(f"c{i}", v, "why") for i, v in enumerate(verdicts)]
    return stage.EnvironmentReport(system={}, versions={}, cann=CannFacts(), devices=[], env_vars={}, checks=checks)


def test_verdict_is_the_worst_ignoring_skip():
    assert stage.summarize(_report("PASS", "SKIP", "WARN")).verdict == "WARN"
    assert stage.summarize(_report("PASS", "FAIL", "WARN")).verdict == "FAIL"
    assert stage.summarize(_report("SKIP", "PASS")).verdict == "PASS"
    assert stage.summarize(_report("SKIP")).verdict == "SKIP" and worst_verdict([]) == "SKIP"
    assert _report("PASS", "PASS", "WARN", "SKIP").summary() == {"PASS": 2, "WARN": 1, "FAIL": 0, "SKIP": 1}
    assert _report("PASS", "WARN").summary_line(skip=False) == "1 PASS / 1 WARN / 0 FAIL"
    with pytest.raises(ValueError, match="verdict"):
        Check("x", "MAYBE", "why")


def test_collect_on_cpu_is_fast_and_complete():
    import torch  # noqa: F401  (the import itself is not the check's cost)

    had_deepspeed = "deepspeed" in sys.modules
    report = _collect(device="cpu", num_cards=2)
    assert report.elapsed_s < 3.0
    assert report.device == "cpu" and len(report.devices) == 2
    assert had_deepspeed or "deepspeed" not in sys.modules
    for key in ("os", "cpu_model", "ram_total_gb", "shm_total_gb", "python"):
        assert key in report.system
    for key in ("torch", "torch_npu", "transformers", "deepspeed", "accelerate", "safetensors",
                "papermill", "jupyterlab", "ipywidgets"):
        assert key in report.versions
    assert collect_versions()["torch"] == report.versions["torch"]
    names = [c.name for c in report.checks]
    for name in ("torch_npu_compat", "torch_npu_import", "packages", "visible_devices", "busy_cards",
                 "hccl_ports", "flash_attn", "bf16", "host_ram", "dev_shm"):
        assert name in names
    lines = stage.report_text(report).splitlines()
    headings = {"Versions", "CANN", "Container and driver", "Environment variables", "Nodes", "Checks"}
    body = [l for l in lines[1:] if l and l not in headings and not l.startswith("Devices (")]
    assert body and all(l.startswith("- ") and ": " in l for l in body)
    json.dumps(report.to_dict())  # serialisable as is


@requires_full_stack  # exit 0 needs no FAIL: every required package installed
def test_cli_json_and_exit_code(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    assert main(["env", "--device", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "cpu" and data["verdict"] in ("PASS", "WARN")
    recorded = json.loads((tmp_path / "01_environment.json").read_text())
    assert recorded["verdict"] == data["verdict"] and recorded["provenance"]["device"] == "cpu"
    assert main(["env", "--device", "npu", "--no-record"]) == 1  # no NPU here: backend FAILs
    out = capsys.readouterr().out
    assert "[FAIL] backend" in out
    assert json.loads((tmp_path / "01_environment.json").read_text())["verdict"] == data["verdict"]


def test_summary_names_the_first_fail_before_warns():
    report = _report("PASS", "WARN", "FAIL")
    text = stage.summary_line(report)
    assert text.endswith(f"first FAIL: {report.checks[2].name}")


@pytest.mark.slow
def test_notebook_runs_with_papermill(tmp_path, monkeypatch):
    import papermill as pm

    out = tmp_path / "01.ipynb"
    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    pm.execute_notebook(str(REPO / "notebooks" / "01_environment.ipynb"), str(out),
                        cwd=str(tmp_path), kernel_name="python3", progress_bar=False,
                        parameters={"device": "cpu"})  # about the CPU backend on any host
    result = json.loads((results / "01_environment.json").read_text())
    assert result["stage"] == "01_environment"
    assert result["provenance"]["device"] == "cpu"
    assert set(result["headline"]) >= {"checks", "device", "cards"}
    html = out.read_text()
    assert "Environment:" in html and "torch_npu_compat" in html


def test_the_environment_report_judges_the_video_part_for_the_model(zoo):
    from hyport_lib.models.loading import torchvision_problem, wants_video_processor

    assert wants_video_processor("tiny") == ("llava", False)
    assert wants_video_processor(str(zoo["qwen2_vl"])) == ("qwen2_vl", True)
    assert wants_video_processor(str(zoo["qwen3"])) == ("qwen3", False)
    assert wants_video_processor("org/not-here") == ("", None)
    assert _collect(check_ports=False).check("video_processors").verdict == "PASS"
    qwen = _collect(check_ports=False, model_path=str(zoo["qwen2_vl"])).check("video_processors")
    assert qwen.verdict == ("PASS" if torchvision_problem() is None else "WARN")


def test_a_broken_torch_npu_of_any_kind_is_reported_not_raised(tmp_path, monkeypatch, capsys):
    """A torch_npu built for another torch raises AttributeError from its import."""
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text(
        'raise AttributeError("module torch_npu.dynamo.torchair has no attribute get_npu_backend")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    clear_import_caches()
    try:
        rc = main(["env", "--device", "cpu", "--no-record", "--json"])
        out = capsys.readouterr().out
        assert rc in (0, 1) and "get_npu_backend" in out
    finally:
        sys.modules.pop("torch_npu", None)
        clear_import_caches()


def test_env_command_judges_a_tree(tmp_path, capsys):
    from hyport_lib.commands import main

    root = build_tree(tmp_path, omit=("/dev/davinci3", "/usr/local/Ascend/driver"))
    code = main(["env", "--device", "cpu", "--num-cards", "8", "--check-ports", "false",
                 "--host-root", str(root), "--no-record"])
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] container_devices" in out and "add --device=/dev/davinci3" in out
    assert "[FAIL] container_mounts" in out and DRIVER_FLAG in out
    assert f"- root read: {root}" in out


def test_env_command_names_a_missing_root(tmp_path, capsys):
    from hyport_lib.commands import main

    missing = tmp_path / "no-such-tree"
    assert main(["env", "--host-root", str(missing), "--no-record"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"hyport env: host_root={str(missing)!r}: no such folder"


def test_the_drafts_show_the_recorded_driver_and_firmware(tmp_path):
    from blog_drafts import STAGES, english_runs, make_run, write_result

    from hyport_lib.report.blog import render_blog

    root = build_tree(tmp_path / "host", driver=DRIVER_24_1_RC3, firmware=FIRMWARE_7_5)
    report = _run(root, num_cards=2)
    run = make_run(tmp_path, {s: "PASS" for s in STAGES})
    write_result(run, "01_environment", stage.summarize(report).verdict, stage.result_data(report))
    en, zh = render_blog(run, "en"), render_blog(run, "zh")
    for text, driver, firmware in ((en, "Ascend driver", "Ascend firmware"), (zh, "昇腾驱动", "昇腾固件")):
        rows = {line.split("|")[1].strip(): line.split("|")[2].strip(" `") for line in text.splitlines()
                if line.startswith("| ") and line.count("|") == 3}
        assert rows[driver] == "24.1.rc3" and rows[firmware] == "7.5.0.1.129"
    section = zh.split("## 01")[1].split("\n## ")[0]
    assert not english_runs(section), english_runs(section)


SECRETS = {"HCCL_AUTH_TOKEN": "tok-1234567", "ASCEND_ACCESS_KEY": "ak-7654321",
           "NCCL_PASSWORD": "pw-abcdefg", "DS_SECRET": "sec-9999999", "MASTER_CREDENTIAL": "cred-8888"}


def test_report_never_contains_secrets(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "600")
    report = _collect(device="cpu", check_ports=False)
    assert report.env_vars["HCCL_CONNECT_TIMEOUT"] == "600"
    outputs = [stage.report_text(report), json.dumps(report.to_dict(), default=str)]
    for text in outputs:
        for key, value in SECRETS.items():
            assert key not in text and value not in text
