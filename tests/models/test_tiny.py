"""The embedded tiny checkpoint (models/tiny.py): built offline, cached by version, loadable like a
real one; answers on random weights are said to mean nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyport_lib.models import tiny
from hyport_lib.models.prompts import sample_image
from hyport_lib.models.tiny import (FLAT_TOP1, MARKER_FILE, RANDOM_WEIGHTS, ensure_tiny_model, random_weights_reason,
                                    resolve_model_path)


def read_marker(folder: Path) -> dict:
    return json.loads((Path(folder) / MARKER_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-cache")


@pytest.fixture(scope="module")
def tiny_dir(cache_root):
    return ensure_tiny_model(cache_root)


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_dir, local_files_only=True)
    model = AutoModelForImageTextToText.from_pretrained(tiny_dir, local_files_only=True).eval()
    return model, processor


def _count_builds(monkeypatch):
    calls = []
    real = tiny._build

    def counting(out_dir, **kwargs):
        calls.append(out_dir)
        return real(out_dir, **kwargs)

    monkeypatch.setattr(tiny, "_build", counting)
    return calls


def test_loads_through_auto_classes_and_generates(loaded, tiny_dir):
    model, processor = loaded
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert type(processor).__name__ == "LlavaProcessor"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[sample_image()], return_tensors="pt")
    image_id = model.config.image_token_index
    # The processor expanded <image> to one token per patch (CLS dropped).
    assert int((inputs["input_ids"] == image_id).sum()) == (32 // 8) ** 2
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    new = out[:, inputs["input_ids"].shape[1]:]
    assert new.shape[1] == 8, "eos is suppressed: random weights must not stop early"
    decoded = processor.batch_decode(new, skip_special_tokens=True)[0]
    assert decoded.strip() and "\ufffd" not in decoded
    assert read_marker(tiny_dir)["num_parameters"] == model.num_parameters()


def test_every_generatable_token_decodes_to_visible_text(loaded):
    model, processor = loaded
    suppressed = set(model.generation_config.suppress_tokens)
    tok = processor.tokenizer
    assert tok.eos_token_id in suppressed and tok.pad_token_id in suppressed
    allowed = [i for i in range(len(tok)) if i not in suppressed]
    assert len(allowed) > 100, "too few tokens left to generate from"
    for token_id in allowed:
        text = tok.decode([token_id])
        assert text.strip() and "\ufffd" not in text, (token_id, text)


def test_byte_level_tokenizer_round_trips_any_script(loaded):
    _, processor = loaded
    tok = processor.tokenizer
    text = "如何打开冰箱？ Open the fridge — ✓"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.padding_side == "left"


def test_chat_template_accepts_enable_thinking(loaded):
    _, processor = loaded
    messages = [{"role": "user", "content": [{"type": "text", "text": "How do I open a fridge?"}]}]
    off = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                        enable_thinking=False)
    on = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                       enable_thinking=True)
    assert off != on
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")
    assert "How do I open a fridge?" in on
    # Thinking tags are single tokens, so a real template's prefill costs 2 + newlines.
    ids = processor.tokenizer.encode("<think></think>", add_special_tokens=False)
    assert len(ids) == 2


def test_second_call_reuses_the_cache(tiny_dir, cache_root, monkeypatch):
    calls = _count_builds(monkeypatch)
    mtime = (tiny_dir / MARKER_FILE).stat().st_mtime_ns
    assert ensure_tiny_model(cache_root) == tiny_dir
    assert calls == []
    assert (tiny_dir / MARKER_FILE).stat().st_mtime_ns == mtime


def test_version_change_regenerates(tiny_dir, cache_root, monkeypatch):
    calls = _count_builds(monkeypatch)
    monkeypatch.setattr(tiny, "TINY_MODEL_VERSION", tiny.TINY_MODEL_VERSION + 100)
    new_dir = ensure_tiny_model(cache_root)
    assert new_dir != tiny_dir and f"v{tiny.TINY_MODEL_VERSION}-tf" in new_dir.name
    assert len(calls) == 1
    assert read_marker(new_dir)["version"] == tiny.TINY_MODEL_VERSION
    assert tiny_dir.is_dir(), "the old version's cache is left alone"


def test_incomplete_folder_is_rebuilt(tmp_path, monkeypatch):
    calls = _count_builds(monkeypatch)
    broken = tiny.tiny_model_dir(tmp_path)
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")
    assert ensure_tiny_model(tmp_path) == broken
    assert len(calls) == 1 and (broken / MARKER_FILE).is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_sharded_save_has_index_and_same_weights(tiny_dir, cache_root):
    from safetensors.torch import load_file

    sharded = ensure_tiny_model(cache_root, max_shard_size="100KB")
    assert sharded != tiny_dir
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((sharded / name).is_file() for name in shards)
    merged = {}
    for name in shards:
        merged.update(load_file(sharded / name))
    whole = load_file(tiny_dir / "model.safetensors")
    assert merged.keys() == whole.keys()
    # Fixed seed: an independent build has bit-identical weights.
    assert all((merged[k] == whole[k]).all() for k in whole)


@pytest.mark.parametrize("bad", ["", "lots", "-5KB", 0, 1.5])
def test_bad_shard_size_is_rejected(bad, tmp_path):
    with pytest.raises(ValueError, match="max_shard_size"):
        ensure_tiny_model(tmp_path, max_shard_size=bad)


def test_resolve_model_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path))
    resolved = resolve_model_path("tiny")
    assert Path(resolved) == tiny.tiny_model_dir(tmp_path) and Path(resolved).is_dir()
    assert resolve_model_path("tencent/HY-Embodied-0.5") == "tencent/HY-Embodied-0.5"
    assert resolve_model_path("/data/models/x") == "/data/models/x"
    with pytest.raises(ValueError, match="model_path"):
        resolve_model_path("  ")


def test_answers_of_random_weights_are_said_to_mean_nothing(tmp_path):
    assert random_weights_reason("tiny") == f"{RANDOM_WEIGHTS} (the embedded tiny model)"
    (tmp_path / MARKER_FILE).write_text("{}")  # the tiny model's folder, by its marker
    assert random_weights_reason(str(tmp_path)) == f"{RANDOM_WEIGHTS} (the embedded tiny model)"
    real = str(tmp_path / "real")
    assert random_weights_reason(real) is None and random_weights_reason(real, FLAT_TOP1 + 0.5) is None
    flat = random_weights_reason(real, FLAT_TOP1 / 2)
    assert flat.startswith(RANDOM_WEIGHTS) and "mean probability is 0.10: flat logits" in flat
