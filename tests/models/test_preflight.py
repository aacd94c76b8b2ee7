"""Is ``model_path`` a model hyport can load (models/preflight.py)? Named, with its file, before
any worker starts: never a hub download attempt per worker, never a traceback per card."""

from __future__ import annotations

import json
import shutil

import pytest

from hyport_lib import processes
from hyport_lib.commands import main
from hyport_lib.models.families import MAX_CONFIG_BYTES
from hyport_lib.models.preflight import ModelPathError, check_model_path
from hyport_lib.models.tiny import ensure_tiny_model


def _tiny_copy(tmp_path, shards="300KB"):
    target = tmp_path / "model"
    shutil.copytree(ensure_tiny_model(max_shard_size=shards), target)
    return target


def test_model_path_problems_are_named_before_any_worker_starts(tmp_path, monkeypatch):
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


def test_a_hub_id_where_a_stage_loads_local_folders_only_says_so():
    # not "allow downloads": downloading would not help that stage
    with pytest.raises(ValueError, match="stage 04 .training. loads local folders only") as info:
        check_model_path("Qwen/Qwen2-0.5B", allow_download=True, local_only="stage 04 (training)")
    assert "allow_download" not in str(info.value)


@pytest.mark.parametrize("config, says", [
    ("[1, 2]", "config.json holds a JSON list, not an object"),
    (json.dumps({"architectures": ["X"]}), "config.json names no model_type"),
    (" " * (MAX_CONFIG_BYTES + 1) + "{}", "cannot read"),  # read within a bound, as every config is
])
def test_a_config_that_names_no_model_is_refused_with_its_file(tmp_path, config, says):
    model = _tiny_copy(tmp_path)
    (model / "config.json").write_text(config)
    with pytest.raises(ModelPathError, match=f"^model_path='{model}': .*{says}") as refused:
        check_model_path(str(model))
    assert "\n" not in str(refused.value)
