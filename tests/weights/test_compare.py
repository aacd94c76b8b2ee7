"""Two checkpoints tensor by tensor (:mod:`hyport_lib.weights.compare`): exactly the tensors
a test changed are found, rounding to the saved dtype is no change, and keys line up by the
model's names across layouts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.weights import compare, scan
from hyport_lib.weights.compare import compare_weights
from hyport_lib.weights.layout import inspect_checkpoint


@pytest.fixture(scope="module")
def tiny():
    return ensure_tiny_model()


def _copy_with(tiny: Path, folder: Path, change) -> Path:
    shutil.copytree(tiny, folder)
    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})
    return folder


def _key(folder: Path, suffix: str) -> str:
    """The on-disk key ending in ``suffix`` (transformers 4 and 5 save LLaVA differently)."""
    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        (key,) = [k for k in fh.keys() if k.endswith(suffix)]
    return key


def test_the_comparison_keeps_its_own_chunk_size():
    """compare_weights reads 16 MiB per side and step as it did before the scan's buffers
    became 2 MiB; the scan's constant is not shared."""
    import inspect

    default = inspect.signature(compare_weights).parameters["chunk_bytes"].default
    assert default == compare.CHUNK_BYTES == 16 << 20 != scan.CHUNK_BYTES


def test_comparison_finds_exactly_the_changed_tensors(tiny, tmp_path):
    names = [_key(tiny, s) for s in ("layers.1.mlp.up_proj.weight", "multi_modal_projector.linear_1.bias",
                                      "embeddings.patch_embedding.weight")]
    removed = _key(tiny, "post_layernorm.bias")

    def change(t):
        t[names[0]] = t[names[0]] * 1.5
        t[names[1]] = t[names[1]] + 0.25  # a bias of zeros: no relative change, max |Δ| says it
        t[names[2]][0, 0, 0, 0] += 1.0  # one element
        t["bogus.weight"] = torch.ones(3)
        del t[removed]

    trained = _copy_with(tiny, tmp_path / "trained", change)
    result = compare_weights(inspect_checkpoint(trained), inspect_checkpoint(tiny), role="base", chunk_bytes=256)
    status = {r["tensor"]: r for r in result.rows}
    assert sorted(k for k, r in status.items() if r["status"] == "changed") == sorted(names)
    assert result.changed == 3 and result.compared == 63  # 64 less the removed one
    assert status["bogus.weight"]["status"] == "added"
    assert status[removed]["status"] == "removed"
    assert status[names[0]]["relative change"] == pytest.approx(0.5, rel=1e-6)
    assert status[names[1]]["relative change"] is None and status[names[1]]["max |Δ|"] == pytest.approx(0.25)
    assert status[names[2]]["max |Δ|"] == pytest.approx(1.0)
    assert {f.cls for f in result.findings} == {"key_added", "key_removed"}


def test_rounding_to_the_saved_dtype_is_not_training(tiny, tmp_path):
    """A bf16 copy of a float32 base holds the same model: nothing changed."""
    rounded = _copy_with(tiny, tmp_path / "bf16", lambda t: t.update(
        {k: v.to(torch.bfloat16) for k, v in t.items()}))
    result = compare_weights(inspect_checkpoint(rounded), inspect_checkpoint(tiny), role="base")
    assert result.changed == 0 and result.compared == 64
    assert {f.cls for f in result.findings} == {"dtype_changed", "weights_unchanged"}


def test_checkpoint_comparison_matches_names_across_layouts(tiny, tmp_path):
    """Keys saved under the model's own names (as some tools do) still line up."""
    from hyport_lib.weights.names import model_names

    names = model_names(tiny)

    def rename(t):
        for key in list(t):
            t[names.to_model(key)] = t.pop(key)

    renamed = _copy_with(tiny, tmp_path / "renamed", rename)
    assert set(inspect_checkpoint(renamed).tensors) == set(names.expected)
    sharded = ensure_tiny_model(max_shard_size="500KB")
    for other in (renamed, sharded):
        result = compare_weights(inspect_checkpoint(tiny), inspect_checkpoint(other), role="checkpoint")
        assert result.count("same") == 64 and not result.findings
    norm = _key(tiny, "model.norm.weight")
    changed = _copy_with(tiny, tmp_path / "changed", lambda t: t.update({norm: t[norm] * 2}))
    result = compare_weights(inspect_checkpoint(tiny), inspect_checkpoint(changed), role="checkpoint")
    assert [f.cls for f in result.findings] == ["checkpoint_differs"]
    assert result.findings[0].tensors == [norm]


def test_a_lone_safetensors_file_compares_by_the_other_sides_names(tiny, tmp_path):
    """A file given on its own (no config, so no model class) against its folder: the
    folder's name mapping serves both sides, so every tensor is compared, not 64 added
    and 64 removed."""
    name = _key(tiny, "layers.1.mlp.up_proj.weight")
    trained = _copy_with(tiny, tmp_path / "trained", lambda t: t.update({name: t[name] * 1.5}))
    lone = trained / "model.safetensors"
    for a, b in ((lone, tiny), (tiny, lone)):
        result = compare_weights(inspect_checkpoint(a), inspect_checkpoint(b), role="base")
        assert result.compared == 64 and result.changed == 1, [f.cls for f in result.findings]
        assert not {f.cls for f in result.findings} & {"key_added", "key_removed"}
