"""Stage 01's judgements on made-up facts: ports, busy cards, flash_attn, HCCL variables,
packages and the install hints that keep the host's torch, video processors."""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

from hyport_lib.devices.probe import DeviceInfo, DeviceListing
from hyport_lib.environment import checks as C


REPO = Path(__file__).resolve().parents[2]


def test_busy_cards_when_nothing_visible_maps():
    devices = [DeviceInfo(i, i, 0, "910B3", "OK", 1, 2) for i in range(2)]
    listing = DeviceListing(devices=devices, source="npu-smi")
    assert C.check_busy_cards("npu", listing, 1, visible=[], visible_var="X=").verdict == "SKIP"
    hidden = C.check_busy_cards("npu", listing, 1, visible=[7], visible_var="X=7")
    assert hidden.verdict == "SKIP" and "no card of this host is visible (X=7)" in hidden.reason
    assert C.check_busy_cards("npu", listing, 2, visible=None).verdict == "PASS"


def test_port_check_sees_a_listening_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert C.port_taken(port)
        env = {"HCCL_IF_BASE_PORT": str(port)}
        assert C.hccl_ports(2, env) == [port, port + 1, 16666]
        check = C.check_hccl_ports("npu", 1, env, probe=lambda p: p == port)
        assert check.verdict == "FAIL" and str(port) in check.reason
    assert C.check_hccl_ports("npu", 2, {}, probe=lambda p: False).verdict == "PASS"
    assert C.check_hccl_ports("cpu", 2, {}, probe=lambda p: p == 16666).reason.endswith("taken: [16666])")


def test_flash_attn_on_npu_is_a_warning():
    assert C.check_flash_attn("npu", True, "2.7.4").verdict == "WARN"
    assert C.check_flash_attn("npu", False, None).verdict == "PASS"
    assert C.check_flash_attn("cuda", True, "2.7.4").verdict == "PASS"
    assert C.check_flash_attn("cpu", False, None).verdict == "SKIP"


def test_hccl_env():
    assert C.check_hccl_env("npu", {"HCCL_CONNECT_TIMEOUT": "60"}).verdict == "WARN"
    assert C.check_hccl_env("npu", {"ASCEND_LAUNCH_BLOCKING": "1"}).verdict == "WARN"
    ok = C.check_hccl_env("npu", {"HCCL_CONNECT_TIMEOUT": "1200"})
    assert ok.verdict == "PASS" and "1200" in ok.reason and "1836" in ok.reason
    assert C.check_hccl_env("cpu", {}).verdict == "SKIP"


def test_packages_check():
    versions = {p: "1.0" for p in C.REQUIRED_PACKAGES + C.OPTIONAL_PACKAGES}
    versions["transformers"] = "4.57.0"
    assert C.check_packages(versions).verdict == "PASS"
    assert C.check_packages({**versions, "transformers": "4.40.0"}).verdict == "WARN"
    missing = C.check_packages({**versions, "deepspeed": None})
    assert missing.verdict == "FAIL" and "deepspeed" in missing.reason


def test_video_processors_check_warns_for_a_model_whose_processor_has_a_video_part():
    warn = C.check_video_processors("5.24.0", "torchvision is not installed", "qwen2_vl", True)
    assert warn.verdict == "WARN" and "image processor and tokenizer alone" in warn.reason
    assert "(qwen2_vl) has a video part" in warn.reason and "5.24.0" in warn.reason
    unknown = C.check_video_processors("5.24.0", "torchvision is not installed", "", None)
    assert unknown.verdict == "WARN"
    fine = C.check_video_processors("5.24.0", "torchvision is not installed", "llava", False)
    assert fine.verdict == "PASS" and "nothing is missing" in fine.reason
    assert C.check_video_processors("5.24.0", None, "qwen2_vl", True).verdict == "PASS"


def test_the_printed_torch_npu_command_keeps_the_installed_torch():
    command = C.torch_npu_install_command("2.8.0")
    assert '"torch-npu==2.8.0.*"' in command and '"torch==2.8.0"' in command
    assert C.torch_npu_install_command("2.13.0+cpu").count("2.13.0") == 2
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "npu" not in project.get("optional-dependencies", {})  # no open-ended extra
    texts = [REPO / "README.md", REPO / "environment.yml", *sorted((REPO / "parameters").glob("*.yaml")),
             *sorted((REPO / "docs").glob("*.md"))]
    assert not [p.name for p in texts if ".[npu]" in p.read_text()]  # nothing tells users to use it


def test_a_torch_pre_release_pairs_with_its_release():
    assert C.torch_npu_install_command("2.6.0a0+git1234") == 'pip install "torch-npu==2.6.0.*" "torch==2.6.0"'


def test_env_prints_the_command_when_torch_npu_is_missing_on_a_cann_host():
    check = C.check_torch_npu_import("cpu", None, None, "auto", cann_found=True, torch_version="2.8.0")
    assert check.verdict == "WARN"
    assert 'pip install "torch-npu==2.8.0.*" "torch==2.8.0"' in check.reason


def test_install_hints_follow_the_backend():
    """On a GPU host the packages check once said `pip install -e . -c constraints/cpu.txt`,
    which would replace its CUDA torch with the CPU one."""
    versions = {"torch": "2.11.0", "transformers": "5.17.0"}
    assert "constraints/cpu.txt" in C.check_packages(versions, "cpu").reason
    for kind in ("cuda", "npu"):
        reason = C.check_packages(versions, kind).reason
        assert "pip install deepspeed" in reason.replace("accelerate ", "") or "deepspeed" in reason
        assert "-c constraints/cpu.txt" not in reason and "never with constraints/cpu.txt" in reason
