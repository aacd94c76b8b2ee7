"""Regression tests of the hardening round: each defect a new user found, reproduced.

Secrets in escaped forms and URL credentials; model paths checked before any process
starts; configuration refused before the run; a garbled npu-smi; one-line errors instead
of tracebacks; the torch-npu install hint that keeps the host's torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.commands import main

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- 1. secrets
@pytest.mark.parametrize("secret", ['pa"ss\\word-1', "密码-秘密-42", "it's <b>&amp;</b> x"])
def test_every_encoded_form_of_a_secret_is_scrubbed(secret):
    import html

    from hyport_lib.utils.redact import scrub_obj, scrub_text

    env = {"MY_SERVICE_TOKEN": secret}
    forms = [secret, json.dumps(secret), json.dumps(secret, ensure_ascii=False),
             json.dumps(json.dumps(secret)), json.dumps(f"prompt = {json.dumps(secret)}"),
             repr(secret), ascii(secret), html.escape(secret), html.escape(json.dumps(secret)),
             html.escape(secret).encode("ascii", "xmlcharrefreplace").decode(),
             json.dumps(f"prompt = {secret!r}")]
    for form in forms:
        out = scrub_text(f"before {form} after", env)
        assert "[redacted]" in out, form
        for leak in (secret, json.dumps(secret)[1:-1], ascii(secret)[1:-1]):
            assert leak not in out, (form, out)
    assert scrub_obj({"k": [f"x{json.dumps(secret)}"]}, env) == {"k": ["x\"[redacted]\""]}


def test_url_credentials_are_redacted_wherever_environment_values_are_shown():
    from hyport_lib.environment.facts import collect_env_vars
    from hyport_lib.utils.redact import scrub_text

    env = {"MASTER_ADDR": "http://admin:hunter2@10.0.0.1:29500", "HF_ENDPOINT": "https://hf-mirror.com",
           "NCCL_X": "ssh://deploy@host/x"}
    shown = collect_env_vars(env)
    assert shown["MASTER_ADDR"] == "http://[redacted]@10.0.0.1:29500"
    assert shown["HF_ENDPOINT"] == "https://hf-mirror.com"
    assert "hunter2" not in scrub_text("connect to https://u:hunter2@x/y failed", {})


# --------------------------------------------------------------------------- 3. model_path
def _tiny_copy(tmp_path, shards="300KB"):
    import shutil

    from hyport_lib.models.tiny import ensure_tiny_model

    target = tmp_path / "model"
    shutil.copytree(ensure_tiny_model(max_shard_size=shards), target)
    return target


def test_model_path_problems_are_named_before_any_worker_starts(tmp_path, monkeypatch):
    from hyport_lib import processes
    from hyport_lib.models.preflight import ModelPathError, check_model_path

    started = []
    monkeypatch.setattr(processes, "start_child", lambda *a, **k: started.append(a))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelPathError, match=r"model_path='ckpt-typo': no such folder \(.*ckpt-typo\)"):
        check_model_path("ckpt-typo")
    with pytest.raises(ModelPathError, match="looks like a hub id: downloads are off"):
        check_model_path("some-org/some-model")
    assert check_model_path("some-org/some-model", allow_download=True) == "some-org/some-model"
    model = _tiny_copy(tmp_path)
    assert check_model_path(str(model)) == str(model.absolute())
    (model / "config.json").write_text('{"model_type": "llava",\n  "oops"\n}')
    with pytest.raises(ModelPathError, match=r"config.json is not valid JSON \(line 3, column 1"):
        check_model_path(str(model))
    model = _tiny_copy(tmp_path / "b")
    shard = sorted(model.glob("*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ModelPathError, match=f"bad safetensors file .*{shard.name}"):
        check_model_path(str(model))
    (model / "config.json").unlink()
    with pytest.raises(ModelPathError, match="not a model folder: no config.json"):
        check_model_path(str(model))
    rc = main(["infer", "--model-path", "ckpt-typo", "--no-record", "--num-cards", "1"])
    assert rc == 2 and not started  # no worker, no download attempt


def test_a_readonly_cache_is_named(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("HYPORT_CACHE", str(blocker))
    assert main(["infer", "--no-record", "--num-cards", "1"]) == 2
    err = capsys.readouterr().err
    assert "HYPORT_CACHE" in err and "not writable" in err and "Traceback" not in err


# --------------------------------------------------------------------------- 4. configuration
def test_too_many_cpu_workers_are_refused_with_the_figure(capsys):
    assert main(["infer", "--num-cards", "4096", "--no-record"]) == 2
    err = capsys.readouterr().err
    assert "num_cards=4096: too many cpu workers" in err and "GB needed for 4096 cards" in err


#: Cases that reach the stages' pre-run plans, which run in a child process.
SLOW_PRECHECK = pytest.mark.slow


@pytest.mark.parametrize("argv, words", [
    (["infer", "--infer-timeout-s", "nan", "--no-record"], "infer_timeout_s='nan': expected a finite number"),
    (["report", "--only", ","], "--only ','"),
    (["report", "-p", "num_cards=abc"], "num_cards='abc': expected an integer >= 1"),
    (["report", "-p", "device=tpu"], "device='tpu': expected one of"),
    (["report", "-p", "infer_timeout_s=nan"], "infer_timeout_s"),
    (["report", "-p", "max_steps=-3"], "max_steps=-3"),
    (["report", "--only", "05", "-p", "checksum=md5"], "checksum='md5': expected one of 'xxh3', 'crc32', 'sha256'"),
    (["report", "--only", "05", "-p", "reload_timeout_s=-5"], "reload_timeout_s=-5: expected a number > 0"),
    pytest.param(["report", "--only", "05", "-p", "weights_path=/nonexistent/x", "-p", "logits_parity=false"], "weights_path='/nonexistent/x': no such", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "05", "-p", "base_path=/nope"], "base_path='/nope': no such file or folder", marks=SLOW_PRECHECK),
    (["verify", "/nonexistent", "--reload-timeout-s", "nan"], "reload_timeout_s='nan': expected a finite number"),
    (["report", "--only", "04", "-p", "lora_rank=0"], "lora_rank=0: expected an integer >= 1"),
    (["report", "--only", "04", "-p", "overflow=cut"], "overflow='cut': expected one of"),
    (["report", "--only", "04", "-p", "lr_scheduler_type=foo"], "lr_scheduler_type='foo'"),
    pytest.param(["report", "--only", "04", "-p", "run_name=a/b"], "run_name='a/b'", marks=SLOW_PRECHECK),
    (["report", "--only", "04", "-p", "warmup_steps=-1"], "warmup_steps=-1: expected an integer >= 0"),
    (["report", "--only", "04", "-p", "loss_scale=-1"], "loss_scale=-1: expected a number >= 0"),
    (["report", "--only", "04", "-p", "master_port=70000"], "master_port=70000: expected an integer"),
    pytest.param(["report", "--only", "04", "-p", "packing=false", "-p", "attn_implementation=foo"],
         "attn_implementation='foo': not an attention transformers knows", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "02", "-p", "dtypes=[float99]"], "02_attention: dtypes=['float99']", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "02", "-p", "code_path=/nope"], "code_path='/nope': no such", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "04", "-p", "dataset_path=/nope.json"], "dataset_path='/nope.json': no such file", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "04", "-p", "deepspeed_config=/nope/ds.json"], "deepspeed_config='/nope/ds.json'", marks=SLOW_PRECHECK),
    pytest.param(["report", "--only", "01", "--kernel", "nosuch"], "--kernel 'nosuch': no such Jupyter kernel", marks=SLOW_PRECHECK),
    (["train", "--max-steps", "1", "--master-port", "70000", "--no-record"], "master_port=70000"),
    (["train", "--max-steps", "1", "--packing", "false", "--attn-implementation", "foo", "--no-record"],
     "attn_implementation='foo'"),
])
def test_bad_values_are_refused_before_the_run(argv, words, capsys, tmp_path):
    if argv[0] == "report":
        argv = argv + ["--output-dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_typo_in_a_profile_stops_the_run_and_names_the_key(tmp_path, capsys):
    profile = tmp_path / "typo.yaml"
    profile.write_text("# hyport report --profile typo.yaml\nnum_card: 1\n")
    assert main(["report", "--profile", str(profile), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown parameter 'num_card'" in err and "did you mean 'num_cards'" in err


# --------------------------------------------------------------------------- 5. npu-smi
@pytest.mark.slow
def test_env_survives_a_garbled_npu_smi_and_warns(fake_npu, npu_smi_sample, monkeypatch, capsys,
                                                   tmp_path):
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path))
    path = npu_smi_sample("")
    path.write_bytes((DATA / "npu_smi" / "910b_24x_classic.txt").read_bytes().replace(b"OK", b"O\xff\xfeK", 1))
    assert main(["env", "--device", "npu", "--json", "--no-record"]) in (0, 1)
    capsys.readouterr()
    # A listing cut short by a wedged driver: one card shown on an 8-card host.
    cut = b"".join((DATA / "npu_smi" / "910b_24x_classic.txt").read_bytes().splitlines(True)[:9])
    path.write_bytes(cut + b"\xff\xfe stray bytes\n")
    rc = main(["env", "--device", "npu", "--no-record"])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    lines = {line.split("]")[1].split(":")[0].strip(): line for line in out.splitlines()
             if line.startswith("- [")}
    assert lines["busy_cards"].startswith("- [WARN]") and "lists 1 card(s) but torch_npu sees 8" \
        in lines["busy_cards"]
    assert lines["card_health"].startswith("- [WARN]") and "cannot be trusted" in lines["card_health"]
    assert "npu-smi output, as printed" in out and "stray bytes" in out
    path.write_bytes(b"garbage only\n\xff\n")  # nothing recognisable at all
    main(["env", "--device", "npu", "--no-record"])
    out = capsys.readouterr().out
    assert "no chip table" in out and "garbage only" in out
    health = next(line for line in out.splitlines() if line.startswith("- [") and "card_health" in line)
    assert health.startswith("- [WARN]") and "health not reported by npu-smi" in health


# --------------------------------------------------------------------------- 6. sentences
@pytest.mark.slow  # the report's pre-run plans run in a child process
def test_output_dir_that_is_a_file_or_readonly_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["report", "--only", "01", "--output-dir", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err
    if os.geteuid() != 0:  # root writes anywhere
        readonly = tmp_path / "ro"
        readonly.mkdir(mode=0o500)
        assert main(["report", "--only", "01", "--output-dir", str(readonly)]) == 2


def test_an_empty_notebooks_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "nbs").mkdir()
    assert main(["report", "--notebooks", str(tmp_path / "nbs"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "no stage notebooks" in capsys.readouterr().err


@pytest.mark.slow
def test_scan_skips_fifos_and_names_symlink_loops(tmp_path, capsys):
    (tmp_path / "ok.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    out = subprocess.run([sys.executable, "-m", "hyport_lib", "scan", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)  # would hang on the FIFO
    assert out.returncode == 1 and "ok.py" in out.stdout
    assert "symlink loop" in out.stdout + out.stderr and "does not exist" not in out.stdout


# --------------------------------------------------------------------------- 7. torch-npu install
def test_the_printed_torch_npu_command_keeps_the_installed_torch(monkeypatch):
    import tomllib

    from hyport_lib.environment.checks import torch_npu_install_command

    command = torch_npu_install_command("2.8.0")
    assert '"torch-npu==2.8.0.*"' in command and '"torch==2.8.0"' in command
    assert torch_npu_install_command("2.13.0+cpu").count("2.13.0") == 2
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "npu" not in project.get("optional-dependencies", {})  # no open-ended extra
    texts = [REPO / "README.md", REPO / "environment.yml", *sorted((REPO / "parameters").glob("*.yaml")),
             *sorted((REPO / "docs").glob("*.md"))]
    assert not [p.name for p in texts if ".[npu]" in p.read_text()]  # nothing tells users to use it


def test_env_prints_the_command_when_torch_npu_is_missing_on_a_cann_host(tmp_path):
    from hyport_lib.environment.checks import check_torch_npu_import

    check = check_torch_npu_import("cpu", None, None, "auto", cann_found=True, torch_version="2.8.0")
    assert check.verdict == "WARN"
    assert 'pip install "torch-npu==2.8.0.*" "torch==2.8.0"' in check.reason


def test_an_unwritable_results_folder_is_named_before_any_work(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "results-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(blocker / "sub"))
    for argv in (["env"], ["infer", "--num-cards", "1"], ["attention", "--model-path", "none"],
                 ["train", "--max-steps", "1"], ["verify", str(tmp_path)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "results folder" in err and "HYPORT_RESULTS_DIR" in err and "Traceback" not in err


def test_install_hints_follow_the_backend():
    """On a GPU host the packages check once said `pip install -e . -c constraints/cpu.txt`,
    which would replace its CUDA torch with the CPU one."""
    from hyport_lib.environment.checks import check_packages

    versions = {"torch": "2.11.0", "transformers": "5.17.0"}
    assert "constraints/cpu.txt" in check_packages(versions, "cpu").reason
    for kind in ("cuda", "npu"):
        reason = check_packages(versions, kind).reason
        assert "pip install deepspeed" in reason.replace("accelerate ", "") or "deepspeed" in reason
        assert "-c constraints/cpu.txt" not in reason and "never with constraints/cpu.txt" in reason


def test_review_round_regressions(tmp_path, capsys):
    """Found by the review of the hardening round, each reproduced first."""
    from hyport_lib.environment.checks import torch_npu_install_command
    from hyport_lib.params import ParameterError
    from hyport_lib.report.params import resolve_parameters
    from hyport_lib.scan.scanner import scan_path
    from hyport_lib.stages import discover_stages
    from hyport_lib.utils.redact import (
        redact_url_credentials,
        scrub_json_text,
        scrub_text,
    )

    # a setting in a secret-named variable is not a secret, and JSON stays JSON
    assert scrub_text("x false y", {"TOKENIZERS_PARALLELISM": "false"}) == "x false y"
    doc = json.dumps({"flag": False, "text": "code says 12345678 here", "n": 12345678})
    clean = json.loads(scrub_json_text(doc, environ={"MY_KEY": "12345678"}))
    assert clean == {"flag": False, "text": "code says [redacted] here", "n": 12345678}
    # a password holding "@" or a quote
    assert redact_url_credentials("https://alice:p@ssw0rd@hf-mirror.internal/x") == \
        "https://[redacted]@hf-mirror.internal/x"
    assert "pa" not in redact_url_credentials('http://bob:pa"ss@10.0.0.1')
    # 2.0 is the ZeRO stage 2; 2.5 and True are not stages
    stages = discover_stages()
    assert resolve_parameters({"zero_stage": 2.0}, {}, stages).merged["zero_stage"] == 2
    for bad in (2.5, True):
        with pytest.raises(ParameterError):
            resolve_parameters({"zero_stage": bad}, {}, stages)
    for key, value in (("per_device_train_batch_size", 0), ("nnodes", 0), ("master_port", 99999),
                       ("seed", -1)):
        with pytest.raises(ParameterError, match=key):
            resolve_parameters({key: value}, {}, stages)
    # whether a file exists is the selected stage's question, not the namespace's
    assert resolve_parameters({"image": "/nonexistent.png"}, {}, stages).merged["image"] == "/nonexistent.png"
    # pre- and post-releases of torch pair with the release
    assert torch_npu_install_command("2.6.0a0+git1234") == 'pip install "torch-npu==2.6.0.*" "torch==2.6.0"'
    # a link out of the scanned folder is named, never read; a FIFO named directly is refused
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bashrc").write_text("export HF_TOKEN=hf_FAKEsecret123456\nimport flash_attn\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "modeling_helpers.py").symlink_to(outside / "bashrc")
    report = scan_path(model)
    assert report.files_scanned == 0 and not report.hits
    assert report.skipped == [("modeling_helpers.py", "symlink out of the scanned folder: not read")]
    os.mkfifo(tmp_path / "fifo.py")
    assert main(["scan", str(tmp_path / "fifo.py")]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main(["report", "--cell-timeout", "0", "--output-dir", str(tmp_path / "o")]) == 2


def test_the_ram_check_follows_the_container_limit(tmp_path):
    from hyport_lib.devices.host_memory import cgroup_memory_limit_gb

    (tmp_path / "memory.max").write_text("536870912\n")  # 512 MiB, cgroup v2
    assert cgroup_memory_limit_gb(tmp_path) == 0.5
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_memory_limit_gb(tmp_path) is None
    (tmp_path / "memory.max").unlink()
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 ** 63 - 4096))  # v1: none
    assert cgroup_memory_limit_gb(tmp_path) is None


def test_stage_05_paths_may_be_written_by_the_training_stage_of_the_same_run(tmp_path):
    """A weights_path that does not exist yet is fine when stage 04 runs first and it lies
    inside 04's output_dir; a fractional reload_timeout_s is a number, not a type error."""
    from hyport_lib.report.params import make_plans, plan_requests, resolve_parameters
    from hyport_lib.stages import discover_stages, select_stages

    stages = discover_stages()
    out = tmp_path / "train-out"
    params = resolve_parameters({}, {"weights_path": str(out), "checkpoint_path": str(out / "checkpoint-20"),
                                     "output_dir": str(out), "reload_timeout_s": "0.5"}, stages)
    assert params.merged["reload_timeout_s"] == 0.5
    after_04 = {r.stage: r for r in plan_requests(params, select_stages(stages, ["04", "05"]))}
    assert sorted(after_04["weights"].left_to_the_run) == ["checkpoint_path", "weights_path"]
    assert make_plans([after_04["weights"]]).refused == []  # left to 05's own plan
    alone = {r.stage: r for r in plan_requests(params, select_stages(stages, ["05"]))}
    assert alone["weights"].left_to_the_run == []  # no stage 04: 05's plan sees them, and refuses
    assert any("weights_path=" in line and "no such" in line for line in make_plans([alone["weights"]]).refused)
    # the model before fine-tuning is never written by stage 04; nor is a folder outside its
    # output_dir, and without an output_dir no given path can be 04's (a new run folder)
    for given in ({"base_path": str(tmp_path / "bsae")},
                  {"weights_path": str(tmp_path / "elsewhere"), "checkpoint_path": str(tmp_path / "c"),
                   "output_dir": str(out)},
                  {"weights_path": str(tmp_path / "later"), "checkpoint_path": str(tmp_path / "c")}):
        requests = {r.stage: r for r in plan_requests(resolve_parameters({}, given, stages), stages)}
        assert requests["weights"].left_to_the_run == []
        key = next(iter(given))
        refused = make_plans([requests["weights"]]).refused
        assert any(f"{key}=" in line and "no such" in line for line in refused), refused


@pytest.mark.slow  # the report's pre-run plans run in a child process
def test_inference_inputs_are_refused_before_any_worker_starts(tmp_path, capsys):
    """Found by the second review: each used to start every worker, load the model and fail
    per card; now one line and exit 2 before anything starts."""
    import shutil

    from hyport_lib.models.tiny import ensure_tiny_model

    listed = tmp_path / "listed"
    shutil.copytree(ensure_tiny_model(), listed)
    (listed / "config.json").write_text("[]")
    untyped = tmp_path / "untyped"
    shutil.copytree(ensure_tiny_model(), untyped)
    config = json.loads((untyped / "config.json").read_text())
    config.pop("model_type")
    (untyped / "config.json").write_text(json.dumps(config))
    for extra, words in ((["--attn-implementation", "bogus"], "attn_implementation='bogus'"),
                         (["--image", str(tmp_path / "none.png")], "none.png"),
                         (["--model-path", str(listed)], "holds a JSON list, not an object"),
                         (["--model-path", str(untyped)], "names no model_type")):
        assert main(["infer", "--num-cards", "1", "--no-record", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    # hyport report: a model_path that stage 03 (or 04) would refuse stops the run at once
    assert main(["report", "--only", "01,03", "-p", f"model_path={tmp_path / 'nope'}",
                 "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "03_inference: model_path=" in err and not (tmp_path / "out").exists()


def test_a_broken_torch_npu_of_any_kind_is_reported_not_raised(tmp_path, monkeypatch, capsys):
    """A torch_npu built for another torch raises AttributeError from its import."""
    from hyport_lib.utils.imports import clear_import_caches

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


def test_third_review_regressions(tmp_path, monkeypatch):
    """Found by the third review of the pre-run checks, each reproduced first."""
    from hyport_lib.models.preflight import check_model_path
    from hyport_lib.params import Field, Spec
    from hyport_lib.report.params import (
        absolutize_paths,
        coerce_overrides,
        safe_parameters,
    )
    from hyport_lib.utils.versions import pinned_version

    # secret parameter names in any spelling are dropped; counting tokens is no secret
    assert safe_parameters({"hfToken": "a", "wandbApiKey": "b", "secretKey": "c", "max_new_tokens": 8}) \
        == {"max_new_tokens": 8}
    # ~ is the home folder, not a folder under the working directory
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = Spec(doc="", path="any")
    fields = {k: Field(k, "str", True, None, path) for k in ("model_path", "output_dir", "weights_path", "log_dir")}
    assert absolutize_paths({"model_path": "~/mymodel"}, fields, tmp_path / "cwd") == \
        {"model_path": str(tmp_path / "home" / "mymodel")}
    # -p key=null still means None for a path (the way to undo a profile's output_dir)
    assert coerce_overrides({"output_dir": "null", "weights_path": "~", "log_dir": "2024"}, fields) == \
        {"output_dir": None, "weights_path": None, "log_dir": "2024"}
    # conda's =X and local build tags pin X
    assert pinned_version("=2.6.3 (environment.yml:3)") == "2.6.3"
    assert pinned_version("==2.6.3+cu122 (requirements.txt:1)") == "2.6.3"
    # a hub id where a stage loads local folders only says so, not "allow downloads"
    with pytest.raises(ValueError, match="stage 04 .training. loads local folders only") as info:
        check_model_path("Qwen/Qwen2-0.5B", allow_download=True, local_only="stage 04 (training)")
    assert "allow_download" not in str(info.value)
