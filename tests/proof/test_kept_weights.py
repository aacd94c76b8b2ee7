"""The shrunk model of the proof holds the checkpoint's own weights (proof/kept_weights.py):
the values of the layers it keeps, the first rows of a slimmed MLP, the embedding rows of the
batch's tokens, read slice by slice; never a layer it cut, never a file outside the folder."""

from __future__ import annotations

import json
import os

import pytest
import safetensors
import safetensors.torch
import torch

from hyport_lib.checkpoint_files.weight_files import INDEX_FILE, SINGLE_FILE, UnsafeCheckpoint, checkpoint_files
from hyport_lib.proof.kept_weights import keep_checkpoint_weights
from hyport_lib.proof.shrunk import compact_vocabulary, shrunk_config


def _write_llama(folder, **save):
    """A real Llama checkpoint of 4 layers whose MLP is wider than a slim one: the shrink
    keeps 2 layers and the first 128 of 256 MLP rows."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder, **save)
    return folder


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    return _write_llama(tmp_path_factory.mktemp("llama4"))


@pytest.fixture(scope="module")
def llama4_shards(tmp_path_factory):
    return _write_llama(tmp_path_factory.mktemp("llama4-shards"), max_shard_size="200KB")


def _shrunk(folder, ids):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    small, _ = shrunk_config(config, slim=True)
    small, _, order = compact_vocabulary(small, [ids])
    torch.manual_seed(0)
    return config, small, order, AutoModelForCausalLM.from_config(small).float()


@pytest.fixture
def requested(monkeypatch):
    """Every tensor name asked of safe_open, and every file it opened."""
    seen = {"tensors": [], "files": []}
    real = safetensors.safe_open

    class Counting:
        def __init__(self, path, framework, **kwargs):
            seen["files"].append(os.path.basename(path))
            self._handle = real(path, framework, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._handle.__exit__(*exc)

        def keys(self):
            return self._handle.keys()

        def get_tensor(self, name):
            seen["tensors"].append(name)
            return self._handle.get_tensor(name)

        def get_slice(self, name):
            seen["tensors"].append(name)
            return self._handle.get_slice(name)

    monkeypatch.setattr(safetensors, "safe_open", Counting)
    return seen


def test_the_kept_tensors_are_the_checkpoints_sliced_and_gathered_by_id(llama4, requested):
    from safetensors.torch import load_file

    ids = torch.tensor([[7, 3, 500, 501, 502, 999, 7]])
    config, small, order, model = _shrunk(llama4, ids)
    kept = keep_checkpoint_weights(model, checkpoint_files(str(llama4)), config, small, order)
    full = load_file(llama4 / SINGLE_FILE)
    state = model.state_dict()
    assert (kept.from_checkpoint, kept.total) == (len(state), len(state)) and kept.total > 10
    assert kept.line() == f"checkpoint weights for {kept.total} of {kept.total} tensors"
    assert order == [1, 2, 3, 7, 500, 501, 502, 999]  # bos/eos 1, 2 kept beside the batch's ids
    mlp = "model.layers.1.mlp."
    assert torch.equal(state[mlp + "gate_proj.weight"], full[mlp + "gate_proj.weight"][:128])
    assert torch.equal(state[mlp + "up_proj.weight"], full[mlp + "up_proj.weight"][:128])
    assert torch.equal(state[mlp + "down_proj.weight"], full[mlp + "down_proj.weight"][:, :128])
    assert torch.equal(state["model.layers.0.self_attn.q_proj.weight"], full["model.layers.0.self_attn.q_proj.weight"])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(state[name], full[name][order])
    # only what the model keeps was read: the vocabulary rows by runs, never a cut layer
    assert kept.bytes_read == sum(t.numel() * 4 for t in state.values())
    assert requested["tensors"] and not [n for n in requested["tensors"] if ".layers.2." in n or ".layers.3." in n]


def test_a_shard_holding_only_layers_never_kept_is_never_opened(llama4_shards, requested):
    index = json.loads((llama4_shards / INDEX_FILE).read_text())["weight_map"]
    cut_only = {shard for shard in index.values()
                if all(".layers.2." in n or ".layers.3." in n for n, s in index.items() if s == shard)}
    assert cut_only  # the save put a cut layer alone in a shard
    config, small, order, model = _shrunk(llama4_shards, torch.tensor([[5, 6, 7]]))
    kept = keep_checkpoint_weights(model, checkpoint_files(str(llama4_shards)), config, small, order)
    assert kept.from_checkpoint == kept.total
    assert requested["files"] and not cut_only & set(requested["files"])


def test_a_shard_name_or_link_out_of_the_folder_is_refused_in_one_line(llama4, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / INDEX_FILE).write_text(json.dumps({"weight_map": {"a.weight": "../outside.safetensors"}}))
    with pytest.raises(UnsafeCheckpoint, match="names the shard '../outside.safetensors'") as refused:
        checkpoint_files(str(folder))
    assert "\n" not in str(refused.value) and INDEX_FILE in str(refused.value)
    (folder / INDEX_FILE).unlink()
    (folder / SINGLE_FILE).symlink_to(llama4 / SINGLE_FILE)
    with pytest.raises(UnsafeCheckpoint, match="a link out of"):
        checkpoint_files(str(folder))
    (folder / SINGLE_FILE).unlink()
    os.mkfifo(folder / SINGLE_FILE)
    with pytest.raises(UnsafeCheckpoint, match="FIFO"):
        checkpoint_files(str(folder))


def test_a_folder_without_safetensors_weights_leaves_them_random_and_says_so(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    files = checkpoint_files(str(tmp_path))
    assert files.unused.endswith(f"holds no safetensors weights ({SINGLE_FILE} or {INDEX_FILE})")
    assert files.fingerprint() == [files.unused]


def test_a_hugging_face_cache_snapshot_linking_to_its_blobs_is_read(llama4, tmp_path):
    """The hub cache's layout: ``<repo>/snapshots/<rev>/model.safetensors`` links to
    ``<repo>/blobs/<hash>``; that is the checkpoint, not a way out of it."""
    import shutil

    blobs, snapshot = tmp_path / "repo" / "blobs", tmp_path / "repo" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    shutil.copy(llama4 / SINGLE_FILE, blobs / "0123")
    (snapshot / SINGLE_FILE).symlink_to(os.path.join("..", "..", "blobs", "0123"))
    files = checkpoint_files(str(snapshot))
    assert files.shards == (SINGLE_FILE,) and not files.unused


def test_a_sharded_hugging_face_cache_snapshot_is_read(llama4_shards, tmp_path):
    """Every file of a hub snapshot links into its blobs, the index too."""
    blobs, snapshot = tmp_path / "repo" / "blobs", tmp_path / "repo" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    names = [INDEX_FILE, *sorted(set(json.loads((llama4_shards / INDEX_FILE).read_text())["weight_map"].values()))]
    assert len(names) > 2
    for i, name in enumerate(names):
        (blobs / f"blob{i}").write_bytes((llama4_shards / name).read_bytes())
        (snapshot / name).symlink_to(os.path.join("..", "..", "blobs", f"blob{i}"))
    files = checkpoint_files(str(snapshot))
    assert files.shards == tuple(names[1:]) and not files.unused


def test_an_index_linking_out_of_a_folder_that_is_no_snapshot_is_refused(llama4_shards, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / INDEX_FILE).symlink_to(llama4_shards / INDEX_FILE)
    with pytest.raises(UnsafeCheckpoint, match="a link out of"):
        checkpoint_files(str(folder))


def test_a_second_table_looked_up_by_token_id_is_never_copied_under_other_ids(zoo, tmp_path):
    """Gemma 3n's per-layer embedding is looked up by token id but sized by its own
    ``vocab_size_per_layer_input``, which the compact vocabulary does not cut: its checkpoint
    rows would sit under the renumbered ids, so it stays random, and the proof says so."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(zoo["gemma3n_text"])
    config.num_hidden_layers, config.num_kv_shared_layers = 2, 0  # the shrink keeps every layer
    config.layer_types, config.activation_sparsity_pattern = ["sliding_attention", "full_attention"], [0.95, 0.0]
    config.intermediate_size = config.intermediate_size[:2]
    torch.manual_seed(3)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    small, _ = shrunk_config(config, slim=True)
    small, _, order = compact_vocabulary(small, [torch.tensor([[40, 41, 300, 301, 302]])])
    model = AutoModelForCausalLM.from_config(small).float()
    kept = keep_checkpoint_weights(model, checkpoint_files(str(tmp_path)), config, small, order)
    assert kept.left_random == ["model.embed_tokens_per_layer.weight"] and kept.from_checkpoint == kept.total - 1
    assert "looked up by token id, and the compact vocabulary renumbers the ids" in kept.line()
    checkpoint = safetensors.torch.load_file(tmp_path / SINGLE_FILE)
    embedding = model.get_input_embeddings().weight
    assert torch.equal(embedding[order.index(300)], checkpoint["model.embed_tokens.weight"][300].float())
