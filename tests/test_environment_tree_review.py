"""Review of ``hyport env --host-root`` (issue 29): what a tree's files (and the model's
and accelerate's configs) put in the report is shown without terminal escapes or secrets,
and a config nested without end, or expanding through YAML aliases, is named, not a crash
or an endless walk."""

from __future__ import annotations

import json

from test_container_checks import _run, build_tree

from hyport_lib.environment import facts
from hyport_lib.environment.container import ascend_signs
from hyport_lib.utils.files import dumps_json

ESCAPES = "\x1b]0;PWNED\x07\x1b[2J"
DRIVER = "usr/local/Ascend/driver/version.info"


def _report_texts(report) -> tuple[str, str]:
    return report.to_text(), dumps_json(report.to_dict())


def test_a_version_file_with_escapes_and_secrets_shows_neither(tmp_path):
    root = build_tree(tmp_path)
    (root / DRIVER).write_text(
        f"Version=25.0.rc1.1{ESCAPES}\npackage_version=ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
        "Innerversion=password=hunter2xyz\n"
        "compatible_version_fw=Authorization: Bearer sk-abcdef0123456789abcdef\n")
    text, data = _report_texts(_run(root))
    for shown in (text, data, json.loads(data)["container"]["versions"]["driver"]):
        assert "\x1b" not in shown and "\x07" not in shown
    for secret in ("ghp_abcdefghijklmnopqrstuvwxyz", "hunter2xyz", "sk-abcdef0123456789"):
        assert secret not in text and secret not in data, secret


def test_a_card_node_named_with_escapes_is_shown_without_them(tmp_path):
    root = build_tree(tmp_path, cards=0, omit=("/usr/local/Ascend", "/dev/davinci_manager"))
    (root / f"dev/davinci0{ESCAPES}").write_text("")
    assert all("\x1b" not in sign for sign in ascend_signs(root))
    text, data = _report_texts(_run(root))
    assert "\x1b" not in text and "\\u001b" not in data


def test_a_refused_path_with_escapes_is_named_without_them(tmp_path):
    root = build_tree(tmp_path)
    (root / DRIVER).unlink()
    (root / DRIVER).symlink_to(f"loop{ESCAPES}")
    (root / f"usr/local/Ascend/driver/loop{ESCAPES}").symlink_to(f"loop{ESCAPES}")
    text, data = _report_texts(_run(root))
    assert "a link loop" in text
    assert "\x1b" not in text and "\\u001b" not in data


def test_a_model_config_nested_without_end_is_no_traceback(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    report = _run(build_tree(tmp_path), model_path=str(model))
    assert report.check("video_processors") is not None


def test_a_model_type_with_escapes_is_shown_without_them(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": f"llava{ESCAPES}"}))
    text, data = _report_texts(_run(build_tree(tmp_path), model_path=str(model)))
    assert "\x1b" not in text and "\\u001b" not in data


def _accelerate(tmp_path, monkeypatch, text: str):
    path = tmp_path / "default_config.yaml"
    path.write_text(text)
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(path))
    return facts._accelerate_config()


def test_an_accelerate_config_keeps_no_nested_secret_nor_escape(tmp_path, monkeypatch):
    config = _accelerate(tmp_path, monkeypatch,
                         "compute_environment: LOCAL_MACHINE\nfsdp_config:\n"
                         "  hub_token: hf_abcdefghijklmnopqrstuvwxyzABCD\n  note: \"\\e]0;PWNED\\a\"\n"
                         "extra: password=hunter2xyz\nmain_process_ip: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n")
    shown = dumps_json(config)
    assert config["compute_environment"] == "LOCAL_MACHINE"
    assert "hub_token" not in config["fsdp_config"]
    for secret in ("hf_abcdefghijklmnopqrstuvwxyz", "hunter2xyz", "ghp_abcdefghijklmnopqrstuvwxyz", "\\u001b"):
        assert secret not in shown, secret


def test_an_accelerate_config_of_nested_aliases_is_refused_not_expanded(tmp_path, monkeypatch):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    config = _accelerate(tmp_path, monkeypatch, "\n".join(lines) + "\n")
    assert set(config) == {"path", "error"} and "default_config.yaml" in config["error"]


def test_an_accelerate_config_nested_without_end_is_refused(tmp_path, monkeypatch):
    config = _accelerate(tmp_path, monkeypatch, "[" * 200_000 + "]" * 200_000)
    assert set(config) == {"path", "error"} and "default_config.yaml" in config["error"]
