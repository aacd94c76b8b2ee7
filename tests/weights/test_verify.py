"""Stage 05's header checks: every finding class planted into a real checkpoint of the
tiny model (two shards with an index, and one file), reported with its class and its
file through ``hyport verify --json``, never as a traceback; a clean checkpoint has no
finding and the counts safetensors itself reports."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from hyport_lib.commands import main as hyport
from hyport_lib.models.tiny import MARKER_FILE, ensure_tiny_model

INDEX = "model.safetensors.index.json"
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def sources():
    return {"sharded": ensure_tiny_model(max_shard_size="500KB"), "single": ensure_tiny_model()}


def copy_of(sources, layout, tmp_path) -> Path:
    """A private copy of the tiny checkpoint in the requested layout."""
    folder = tmp_path / layout
    shutil.copytree(sources[layout], folder)
    return folder


def weight_file(folder: Path, which: int = -1) -> Path:
    """A weight file of the checkpoint: the single file, or shard ``which``."""
    files = sorted(folder.glob("model*.safetensors"))
    return files[which]


# --------------------------------------------------------------------------- planting
def read_raw(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(path: Path, header: dict, data: bytes, pad_to: int | None = None) -> None:
    text = json.dumps(header, separators=(",", ":")).encode()
    size = pad_to if pad_to is not None else len(text) + (-len(text)) % 8
    text = text.ljust(size, b" ")
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def tensors_of(header: dict) -> list[tuple[str, dict]]:
    """Tensor entries in offset order."""
    return sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                  key=lambda kv: kv[1]["data_offsets"][0])


def biggest(header: dict) -> str:
    return max(tensors_of(header), key=lambda kv: kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0])[0]


def rewrite(path: Path, change) -> str:
    """Apply ``change(header, data) -> data`` to a file's header; returns the file name."""
    header, data = read_raw(path)
    data = change(header, data) or data
    write_raw(path, header, data)
    return path.name


def rewrite_tensors(path: Path, change) -> str:
    """Re-save a file through safetensors after ``change(tensors)`` (a dict of torch tensors)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), "pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        meta = fh.metadata()
    change(tensors)
    save_file(tensors, str(path), metadata=meta)
    return path.name


def edit_index(folder: Path, change) -> None:
    index = json.loads((folder / INDEX).read_text())
    change(index)
    (folder / INDEX).write_text(json.dumps(index))


def plant_truncated(folder):
    path = weight_file(folder)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    return path.name


def plant_header_length(folder):
    path = weight_file(folder)
    raw = bytearray(path.read_bytes())
    raw[:8] = struct.pack("<Q", len(raw) * 2)
    path.write_bytes(bytes(raw))
    return path.name


def plant_not_json(folder):
    path = weight_file(folder)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    path.write_bytes(raw[:8] + b"{not json".ljust(n, b" ") + raw[8 + n:])
    return path.name


def plant_bad_entry(folder):
    def change(header, data):
        header[biggest(header)]["dtype"] = "F33"
    return rewrite(weight_file(folder), change)


def plant_overlap(folder):
    def change(header, data):
        (_, a), (_, b) = tensors_of(header)[:2]
        b["data_offsets"] = [b["data_offsets"][0] - 4, b["data_offsets"][1] - 4]
    return rewrite(weight_file(folder), change)


def plant_out_of_bounds(folder):
    def change(header, data):
        name, entry = tensors_of(header)[0]
        begin, end = entry["data_offsets"]
        entry["data_offsets"] = [len(data) + 64, len(data) + 64 + end - begin]
    return rewrite(weight_file(folder), change)


def plant_not_covering(folder):
    path = weight_file(folder)
    path.write_bytes(path.read_bytes() + b"\0" * 16)  # trailing bytes no tensor owns
    return path.name


def plant_size_mismatch(folder):
    def change(header, data):
        entry = header[biggest(header)]
        entry["shape"] = [entry["shape"][0] - 1] + entry["shape"][1:]
    return rewrite(weight_file(folder), change)


def plant_placeholder(folder):
    import torch

    def change(tensors):
        name = max(tensors, key=lambda k: tensors[k].numel())
        tensors[name] = torch.empty(0, dtype=tensors[name].dtype)
    return rewrite_tensors(weight_file(folder), change)


def plant_config_missing(folder):
    (folder / "config.json").unlink()
    return "config.json"


def plant_config_unreadable(folder):
    (folder / "config.json").write_text("{ not json")
    return "config.json"


def plant_model_class_unknown(folder):
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "nosuchmodel"
    (folder / "config.json").write_text(json.dumps(config))
    return "config.json"


def plant_config_suspect(folder):
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = config["architectures"][0]  # one string, not a list
    (folder / "config.json").write_text(json.dumps(config))
    return "config.json"


def plant_no_weights(folder):
    for path in folder.glob("*.safetensors*"):
        path.unlink()
    return folder.name


def plant_shard_missing(folder):
    (folder / SHARD1).unlink()
    return SHARD1


def plant_key_missing_from_shard(folder):
    # The index sends a key of shard 2 to shard 1 (the key is where it was).
    def change(index):
        key = next(k for k, v in index["weight_map"].items() if v == SHARD2)
        index["weight_map"][key] = SHARD1
    edit_index(folder, change)
    return SHARD1


def plant_key_not_in_index(folder):
    def change(index):
        key = next(k for k, v in index["weight_map"].items() if v == SHARD2)
        del index["weight_map"][key]
    edit_index(folder, change)
    return SHARD2


def plant_key_in_two_shards(folder):
    from safetensors import safe_open

    with safe_open(str(folder / SHARD2), "pt") as fh:
        key = next(iter(fh.keys()))
        tensor = fh.get_tensor(key)
    rewrite_tensors(folder / SHARD1, lambda t: t.__setitem__(key, tensor.clone()))
    return SHARD1


def plant_total_size(folder):
    edit_index(folder, lambda index: index["metadata"].__setitem__(
        "total_size", index["metadata"]["total_size"] + 8))
    return INDEX


def plant_extra_shard(folder):
    shutil.copy(folder / SHARD2, folder / "model-00003-of-00003.safetensors")
    return "model-00003-of-00003.safetensors"


def plant_index_missing(folder):
    (folder / INDEX).unlink()
    return INDEX


def plant_index_unreadable(folder):
    (folder / INDEX).write_text("[1, 2]")
    return INDEX


def plant_non_finite(folder):
    path = weight_file(folder)
    header, data = read_raw(path)
    name, entry = next((k, v) for k, v in tensors_of(header) if v["dtype"] == "F32" and
                       v["data_offsets"][1] - v["data_offsets"][0] >= 64)
    begin = entry["data_offsets"][0]
    data = bytearray(data)
    data[begin + 8:begin + 12] = struct.pack("<f", float("nan"))
    data[begin + 16:begin + 20] = struct.pack("<f", float("-inf"))
    write_raw(path, header, bytes(data), pad_to=len(json.dumps(header, separators=(",", ":"))) + 100)
    return path.name


def plant_weight_missing(folder):
    # A weight dropped from its file and from the index alike: every cross-check agrees,
    # only the model class knows it is missing.
    path = next(p for p in sorted(folder.glob("model*.safetensors")) if _dropped_key(p))
    key = _dropped_key(path)
    rewrite_tensors(path, lambda tensors: tensors.pop(key))
    if (folder / INDEX).exists():
        edit_index(folder, lambda index: index["weight_map"].pop(key))
    return INDEX if (folder / INDEX).exists() else path.name


def _dropped_key(path: Path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as fh:
        return next((k for k in fh.keys() if "layers.0." in k and "proj.weight" in k), None)


def plant_index_ignored(folder):
    # model.safetensors beside the index and shards: transformers loads the single file.
    shutil.copy(ensure_tiny_model() / "model.safetensors", folder / "model.safetensors")
    return INDEX


BOTH = ("sharded", "single")
PLANTS = {
    # class: (plant, layouts, extra CLI flags)
    "truncated_shard": (plant_truncated, BOTH, []),
    "header_length_beyond_file": (plant_header_length, BOTH, []),
    "header_not_json": (plant_not_json, BOTH, []),
    "header_bad_entry": (plant_bad_entry, BOTH, []),
    "offsets_overlap": (plant_overlap, BOTH, []),
    "offsets_out_of_bounds": (plant_out_of_bounds, BOTH, []),
    "offsets_not_covering": (plant_not_covering, BOTH, []),
    "size_mismatch": (plant_size_mismatch, BOTH, []),
    "zero3_placeholder": (plant_placeholder, BOTH, []),
    "non_finite": (plant_non_finite, BOTH, ["--full-scan"]),
    "config_missing": (plant_config_missing, BOTH, []),
    "config_unreadable": (plant_config_unreadable, BOTH, []),
    "no_weights": (plant_no_weights, BOTH, []),
    "shard_missing": (plant_shard_missing, ("sharded",), []),
    "key_missing_from_shard": (plant_key_missing_from_shard, ("sharded",), []),
    "key_not_in_index": (plant_key_not_in_index, ("sharded",), []),
    "key_in_two_shards": (plant_key_in_two_shards, ("sharded",), []),
    "total_size_mismatch": (plant_total_size, ("sharded",), []),
    "extra_shard": (plant_extra_shard, ("sharded",), []),
    "index_missing": (plant_index_missing, ("sharded",), []),
    "index_unreadable": (plant_index_unreadable, ("sharded",), []),
    "index_ignored": (plant_index_ignored, ("sharded",), []),
    "weight_missing": (plant_weight_missing, BOTH, []),
    "model_class_unknown": (plant_model_class_unknown, BOTH, []),
    "config_suspect": (plant_config_suspect, ("single",), []),
}


def verify_json(folder: Path, capsys, *flags) -> tuple[int, dict, str]:
    rc = hyport(["verify", str(folder), "--json", "--no-record", *flags])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("cls,layout", [(c, lay) for c in sorted(PLANTS) for lay in PLANTS[c][1]])
def test_planted_defect_is_reported_with_its_class_and_file(cls, layout, sources, tmp_path, capsys):
    from hyport_lib.checkpoint_files.findings import CLASSES

    plant, _, flags = PLANTS[cls]
    ckpt = copy_of(sources, layout, tmp_path)
    file = plant(ckpt)
    rc, result, err = verify_json(ckpt, capsys, *flags)
    hits = [f for f in result["findings"] if f["class"] == cls]
    assert hits, f"{cls} not reported; got {[(f['class'], f['file']) for f in result['findings']]}"
    assert any(f["file"] == file for f in hits), [f["file"] for f in hits]
    assert all(f["severity"] == CLASSES[cls][0] and f["message"] for f in hits)
    assert "Traceback" not in err
    # any error finding (planted or consequential) fails the command
    assert rc == (1 if result["counts"]["error"] else 0)
    assert rc == 1 or CLASSES[cls][0] != "error"
    assert result["verdict"] == ("FAIL" if rc else "WARN")


@pytest.mark.parametrize("layout", BOTH)
def test_clean_checkpoint_has_no_finding_and_safetensors_counts(layout, sources, capsys):
    from safetensors import safe_open

    folder = sources[layout]
    rc, result, err = verify_json(folder, capsys, "--full-scan")
    assert rc == 0 and result["verdict"] == "PASS", result["findings"]
    assert result["findings"] == []
    keys, numel, files = 0, 0, sorted(folder.glob("model*.safetensors"))
    for path in files:
        with safe_open(str(path), "pt") as fh:
            for key in fh.keys():
                keys += 1
                shape = fh.get_slice(key).get_shape()
                n = 1
                for d in shape:
                    n *= d
                numel += n
        row = next(r for r in result["shards"] if r["file"] == path.name)
        with safe_open(str(path), "pt") as fh:
            assert row["tensors"] == len(list(fh.keys()))
        assert row["bytes"] == path.stat().st_size
    assert len(result["shards"]) == len(files) == (2 if layout == "sharded" else 1)
    assert result["tensor_count"] == keys
    assert result["parameters"] == numel == result["parameters_without_tied"]
    marker = json.loads((folder / MARKER_FILE).read_text())
    assert result["parameters"] == marker["num_parameters"]
    assert len(result["scan"]["tensors"]) == keys and not result["scan"]["nonfinite_tensors"]
    if layout == "sharded":
        index = json.loads((folder / INDEX).read_text())
        assert result["index"]["tensors"] == len(index["weight_map"]) == keys


def test_text_output_names_tensor_and_parameter_counts(sources, capsys):
    folder = sources["sharded"]
    index = json.loads((folder / INDEX).read_text())
    marker = json.loads((folder / MARKER_FILE).read_text())
    rc = hyport(["verify", str(folder), "--no-record"])
    out, err = capsys.readouterr()
    assert rc == 0
    first = out.splitlines()[0]
    assert first.startswith(f"2 shards, {len(index['weight_map'])} tensors in the index, shards of "
                            f"{(folder / SHARD1).stat().st_size:,} and {(folder / SHARD2).stat().st_size:,} bytes")
    assert f"{marker['num_parameters']:,} parameters" in first and "model type llava" in first
    assert out.splitlines()[-1].startswith("PASS")


@pytest.mark.parametrize("args,words", [
    (["{missing}"], "weights_path="),
    (["{single}", "--base-path", "{missing}"], "base_path="),
    (["{single}", "--checkpoint-path", "{missing}"], "checkpoint_path="),
    (["{single}", "--logits-parity"], "logits_parity=True compares the logits with a checkpoint's"),
    (["{single}", "--consolidate-zero"], "consolidate_zero=True consolidates a checkpoint's ZeRO states"),
    (["{single}", "--reload-timeout-s", "0"], "reload_timeout_s"),
])
def test_usage_errors_exit_2_with_one_line(args, words, sources, tmp_path, capsys):
    argv = [a.format(missing=tmp_path / "nowhere", single=sources["single"]) for a in args]
    rc = hyport(["verify", *argv, "--no-record"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("hyport verify: ") and words in err
    assert len(err.strip().splitlines()) == 1


def test_one_file_given_directly(sources, tmp_path, capsys):
    path = tmp_path / "lone.safetensors"
    shutil.copy(sources["single"] / "model.safetensors", path)
    rc, result, err = verify_json(path, capsys)
    assert rc == 0 and result["kind"] == "file" and result["tensor_count"] == 64
    path.write_bytes(path.read_bytes()[:-1])
    rc, result, err = verify_json(path, capsys)
    assert rc == 1 and [f["class"] for f in result["findings"]] == ["truncated_shard"]


def test_one_file_with_reload_is_checked_and_the_reload_skipped_with_a_note(sources, capsys):
    # The notebook's defaults ask for a reload; given one file, the headers are still checked.
    rc, result, err = verify_json(sources["single"] / "model.safetensors", capsys, "--reload")
    assert rc == 0 and result["verdict"] == "PASS" and result["tensor_count"] == 64
    [note] = result["findings"]
    assert note["class"] == "reload_skipped" and note["severity"] == "info"
    assert "needs the model folder" in note["message"]
    assert result["reload"] is None


def _odd_length(folder):
    # The last tensor one byte short of dtype x shape, and the file one byte shorter.
    path = weight_file(folder)
    header, data = read_raw(path)
    name, entry = tensors_of(header)[-1]
    entry["data_offsets"][1] -= 1
    write_raw(path, header, data[:-1])
    return path.name, "size_mismatch"


def _dtype_list(folder):
    return rewrite(weight_file(folder), lambda h, d: h[biggest(h)].__setitem__("dtype", ["BF16"])), \
        "header_bad_entry"


def _total_size(value):
    def plant(folder):
        edit_index(folder, lambda index: index["metadata"].__setitem__("total_size", value))
        return INDEX, "total_size_mismatch"
    return plant


def _empty_weight_map(folder):
    edit_index(folder, lambda index: index.__setitem__("weight_map", {}))
    return INDEX, "index_unreadable"


def _zero_states(states):
    def plant(folder):
        import torch

        (folder / "global_step1").mkdir()
        torch.save(states, folder / "global_step1" / "mp_rank_00_model_states.pt")
        return "global_step1/", "zero_unreadable"
    return plant


@pytest.mark.parametrize("plant", [
    _odd_length, _dtype_list, _total_size(float("inf")), _total_size("abc"), _total_size([1]),
    _empty_weight_map, _zero_states([1, 2, 3]), _zero_states({"dp_world_size": 10 ** 12}),
], ids=["odd-length-full-scan", "dtype-list", "total-size-inf", "total-size-text", "total-size-list",
        "empty-weight-map", "zero-states-list", "zero-states-huge-world"])
def test_malformed_input_is_a_finding_never_a_crash(plant, sources, tmp_path, capsys):
    """Types and values a well-formed writer never produces: each one a finding, no traceback."""
    ckpt = copy_of(sources, "sharded", tmp_path)
    file, cls = plant(ckpt)
    rc, result, err = verify_json(ckpt, capsys, "--full-scan")
    assert "Traceback" not in err and "internal error" not in err, err
    hits = [f for f in result["findings"] if f["class"] == cls]
    assert hits and any(f["file"] == file for f in hits), result["findings"]
    assert rc == (1 if result["counts"]["error"] else 0)
    if cls == "size_mismatch":  # read neither short nor into its neighbour: left out of the scan
        assert result["scan"]["skipped"] and len(result["scan"]["tensors"]) == 63


def test_json_output_and_record_are_strict_json_with_nan_weights(sources, tmp_path, capsys, monkeypatch):
    """NaN weights compared with the base give NaN differences: written as null, never NaN."""
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    ckpt = copy_of(sources, "single", tmp_path)
    plant_non_finite(ckpt)
    rc = hyport(["verify", str(ckpt), "--json", "--full-scan", "--base-path", str(sources["single"])])
    out, err = capsys.readouterr()

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    result = json.loads(out, parse_constant=refuse)
    assert rc == 1 and any(f["class"] == "non_finite" for f in result["findings"])
    changed = [r for c in result["comparisons"] for r in c["rows"] if r["status"] == "changed"]
    assert changed and any(r["max |Δ|"] is None for r in changed), changed
    record = tmp_path / "results" / "05_weights.json"
    json.loads(record.read_text(), parse_constant=refuse)


@pytest.mark.slow
def test_nan_logits_are_reported_not_a_crash(sources, tmp_path, capsys):
    """The logits check exists for NaN weights: its NaN figures come back from the child
    as JSON null and must still read as NaN."""
    import torch

    ckpt = copy_of(sources, "single", tmp_path)
    rewrite_tensors(ckpt / "model.safetensors",
                    lambda t: t.__setitem__("language_model.lm_head.weight",
                                            torch.full_like(t["language_model.lm_head.weight"], float("nan"))))
    rc, result, err = verify_json(sources["single"], capsys, "--checkpoint-path", str(ckpt), "--logits-parity")
    assert "internal error" not in err and "Traceback" not in err, err
    [hit] = [f for f in result["findings"] if f["class"] == "logits_differ"]
    assert "max |Δ| nan" in hit["message"] and rc == (1 if result["counts"]["error"] else 0)



def test_a_fifo_among_the_weights_is_named_not_opened(sources, tmp_path, capsys):
    """A FIFO named like a shard (no index): reported as unreadable at once, never opened
    (open() on a FIFO waits for a writer forever)."""
    import os

    folder = tmp_path / "fifo"
    folder.mkdir()
    shutil.copy(sources["single"] / "config.json", folder / "config.json")
    os.mkfifo(folder / "model-00001-of-00001.safetensors")
    rc, result, err = verify_json(folder, capsys)
    hits = [f for f in result["findings"] if f["class"] == "file_unreadable"]
    assert rc == 1 and hits and "not a regular file" in hits[0]["message"]


def test_reversed_offsets_count_the_tensors_size_not_a_negative_span(sources, tmp_path, capsys):
    ckpt = copy_of(sources, "sharded", tmp_path)

    def change(header, data):
        name, entry = tensors_of(header)[0]
        entry["data_offsets"] = entry["data_offsets"][::-1]
    rewrite(weight_file(ckpt), change)
    rc, result, err = verify_json(ckpt, capsys)
    classes = {f["class"] for f in result["findings"]}
    assert "offsets_out_of_bounds" in classes and "total_size_mismatch" not in classes, classes
