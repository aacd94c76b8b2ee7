"""A checkpoint folder from its headers (:mod:`hyport_lib.weights.layout`): tied weights
counted once, a model.safetensors that is no file named for what it is. Every finding class
planted into a real checkpoint is in test_verify.py, through ``hyport verify``."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from hyport_lib.models.preflight import ModelPathError, check_model_path
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights.layout import inspect_checkpoint


def test_tied_duplicate_is_counted_once(tmp_path):
    """A tied model saved the DeepSpeed way (both names) counts its parameters once."""
    folder = tmp_path / "tied"
    shutil.copytree(ensure_tiny_model(), folder)
    config = json.loads((folder / "config.json").read_text())
    # transformers 5 ties LLaVA through the top-level flag only, 4.57 through the text
    # config's: the model class decides, so set both.
    config["tie_word_embeddings"] = True
    config.setdefault("text_config", {})["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(config))
    untied = inspect_checkpoint(ensure_tiny_model())
    tied = inspect_checkpoint(folder)
    embed = tied.tensors["language_model.model.embed_tokens.weight"][1].numel
    assert tied.tied_duplicates == ["language_model.lm_head.weight"]
    assert tied.parameters == untied.parameters
    assert tied.unique_parameters == untied.parameters - embed == tied.names.parameters
    assert any(f.cls == "tied_duplicate" for f in tied.findings)


@pytest.mark.parametrize("kind", ["folder", "fifo", "device link"])
def test_a_model_safetensors_that_is_no_file_is_named_for_what_it_is(tmp_path, kind):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    target = folder / "model.safetensors"
    {"folder": target.mkdir, "fifo": lambda: os.mkfifo(target),
     "device link": lambda: target.symlink_to("/dev/zero")}[kind]()
    expected = {"folder": "a folder", "fifo": "a FIFO (named pipe)", "device link": "a device node (through a link)"}
    messages = [f.message for f in inspect_checkpoint(folder).findings if f.cls == "no_weights"]
    assert messages == [f"{target} is {expected[kind]}, not a safetensors file"]
    with pytest.raises(ModelPathError, match="model.safetensors is not a regular file"):
        check_model_path(str(folder))
