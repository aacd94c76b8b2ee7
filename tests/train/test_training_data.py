"""Stage 04's data path: validation of every malformed record, encoding, packing, collation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from hyport_lib.train.dataset import DatasetError, load_dataset
from hyport_lib.train.packing import (COUNT_KEYS, PackedCollator, PaddedCollator,
                                         pack_samples)
from hyport_lib.train.samples import IGNORE_INDEX, Encoder, encode_records
from hyport_lib.train.smoke_data import write_smoke_dataset


@pytest.fixture(scope="module")
def processor():
    from hyport_lib.models.loading import load_processor
    from hyport_lib.models.tiny import ensure_tiny_model

    return load_processor(ensure_tiny_model())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return write_smoke_dataset(tmp_path_factory.mktemp("smoke"))


def _turns(*pairs):
    return [{"from": who, "value": text} for who, text in pairs]


GOOD = _turns(("human", "<image>\nDescribe the image."), ("gpt", "A red circle."))


def _write(folder: Path, records) -> Path:
    (folder / "images").mkdir(exist_ok=True)
    from PIL import Image

    Image.new("RGB", (32, 32), (200, 10, 10)).save(folder / "images" / "ok.png")
    (folder / "images" / "broken.png").write_bytes(b"not a png at all")
    path = folder / "data.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


BAD_RECORDS = {
    "missing_id": {"image": "images/ok.png", "conversations": GOOD},
    "duplicate_id": {"id": "r-good", "image": "images/ok.png", "conversations": GOOD},
    "missing_conversations": {"id": "r-noconv", "image": "images/ok.png"},
    "empty_conversations": {"id": "r-empty", "conversations": []},
    "unknown_role": {"id": "r-role", "conversations": _turns(("human", "hi"), ("robot", "hello"))},
    "first_turn_not_human": {"id": "r-first", "conversations": _turns(("gpt", "hi"), ("human", "yo"),
                                                                      ("gpt", "ok"))},
    "roles_not_alternating": {"id": "r-alt", "conversations": _turns(("human", "a"), ("human", "b"),
                                                                     ("gpt", "c"))},
    "empty_value": {"id": "r-value", "conversations": _turns(("human", "question"), ("gpt", "  "))},
    "image_count": {"id": "r-count", "image": ["images/ok.png", "images/ok.png"],
                    "conversations": GOOD},
    "image_missing": {"id": "r-missing", "image": "images/nope.png", "conversations": GOOD},
    "image_unreadable": {"id": "r-broken", "image": "images/broken.png", "conversations": GOOD},
    "not_object": ["just", "a", "list"],
}


def test_every_malformed_record_kind_is_named_with_its_record(tmp_path):
    records = [{"id": "r-good", "image": "images/ok.png", "conversations": GOOD}]
    records += list(BAD_RECORDS.values())
    report = load_dataset(_write(tmp_path, records))
    kinds = {p.kind for p in report.problems}
    assert set(BAD_RECORDS) <= kinds, set(BAD_RECORDS) - kinds
    assert [r.record_id for r in report.records] == ["r-good"]
    by_kind = {p.kind: p for p in report.problems}
    for kind, record in BAD_RECORDS.items():
        problem = by_kind[kind]
        assert problem.index == next(i for i, r in enumerate(records) if r is record), kind
        expected_id = record.get("id") if isinstance(record, dict) else None
        assert problem.record_id == expected_id, kind
        text = str(problem)
        assert f"record {problem.index}" in text and problem.field in text
        if expected_id:
            assert expected_id in text
    assert by_kind["unknown_role"].field == "conversations[1].from"
    # the unknown last role is that problem only, not also "no answer"
    assert [p.kind for p in report.problems if p.record_id == "r-role"] == ["unknown_role"]
    assert by_kind["duplicate_id"].message.endswith("record 0")
    assert "2 image(s)" in by_kind["image_count"].message


def test_json_lines_with_a_line_that_is_not_json(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"id": "a", "conversations": _turns(("human", "q"), ("gpt", "a"))})
                    + "\n{broken json\n\n"
                    + json.dumps({"id": "b", "conversations": _turns(("human", "q"), ("gpt", "a"))})
                    + "\n", encoding="utf-8")
    report = load_dataset(path)
    assert [r.record_id for r in report.records] == ["a", "b"]
    (problem,) = report.problems
    assert problem.kind == "not_json" and problem.index == 1 and problem.field == "line 2"


def test_a_file_that_is_not_json_at_all_names_the_file(tmp_path):
    path = tmp_path / "data.json"
    path.write_text("[{\"id\": 1,,]")
    with pytest.raises(ValueError, match="data.json: not valid JSON at line 1"):
        load_dataset(path)
    with pytest.raises(FileNotFoundError, match="dataset_path"):
        load_dataset(tmp_path / "missing.json")


def test_too_long_samples_are_truncated_or_dropped(tmp_path, processor):
    long_answer = " ".join(["The circle is red."] * 40)
    records = [{"id": "long", "conversations": _turns(("human", "Describe it."), ("gpt", long_answer))},
               {"id": "image-late", "image": "images/ok.png",
                "conversations": _turns(("human", "word " * 60 + "<image>"), ("gpt", "ok"))}]
    report = load_dataset(_write(tmp_path, records))
    samples, problems = encode_records(report.records, processor, 64, "drop")
    assert samples == [] and {p.record_id for p in problems} == {"long", "image-late"}
    assert all(p.kind == "too_long" and "max_seq_len=64" in p.message for p in problems)
    samples, problems = encode_records(report.records, processor, 64, "truncate")
    assert [s.record_id for s in samples] == ["long"] and len(samples[0]) == 64 and samples[0].truncated
    assert [p.record_id for p in problems] == ["image-late"]
    assert "cut an image" in problems[0].message


def test_the_bundled_smoke_set(smoke, processor):
    report = load_dataset(smoke)
    assert report.total == len(json.loads(Path(smoke).read_text(encoding="utf-8"))) == 14 and not report.problems
    assert any(len(r.images) == 2 for r in report.records)  # multi-image
    assert any(len(r.turns) == 4 for r in report.records)  # multi-turn
    assert any(not r.images for r in report.records)  # text-only
    samples, problems = encode_records(report.records, processor, 512)
    assert len(samples) == 14 and not problems


def test_labels_cover_exactly_the_answers(smoke, processor):
    report = load_dataset(smoke)
    record = next(r for r in report.records if len(r.turns) == 4)
    sample, _ = Encoder(processor, 512).encode(record)
    tok = processor.tokenizer
    labelled = tok.decode([t for t, l in zip(sample.input_ids, sample.labels) if l != IGNORE_INDEX])
    answers = [text for role, text in record.turns if role == "assistant"]
    assert labelled == "".join(f"{a}<|im_end|>\n" for a in answers)
    # every label that is set equals its token; the questions and headers are masked
    assert all(l in (IGNORE_INDEX, t) for t, l in zip(sample.input_ids, sample.labels))
    assert "What colour" not in labelled and "assistant" not in labelled


def test_packing_positions_cumulative_lengths_and_label_mask(smoke, processor):
    samples, _ = encode_records(load_dataset(smoke).records, processor, 256)
    rows = pack_samples(samples, 256)
    assert sum(len(r) for r in rows) == 14 and all(sum(map(len, r)) <= 256 for r in rows)
    assert [s.record_id for r in rows for s in r] == [s.record_id for s in samples]  # order kept
    collator = PackedCollator(processor.tokenizer.pad_token_id, 256)
    batch = collator(rows[:2])
    assert batch["input_ids"].shape == (2, 256)
    lengths = [len(s) for s in rows[0]] + [256 - sum(map(len, rows[0]))] + \
              [len(s) for s in rows[1]] + [256 - sum(map(len, rows[1]))]
    lengths = [n for n in lengths if n]
    expected_cu = [0]
    for n in lengths:
        expected_cu.append(expected_cu[-1] + n)
    assert batch["cu_seq_lens_q"].tolist() == expected_cu and batch["max_length_q"] == max(lengths)
    positions = batch["position_ids"][0].tolist()
    start = 0
    for sample in rows[0]:
        assert positions[start:start + len(sample)] == list(range(len(sample)))
        assert batch["labels"][0, start:start + len(sample)].tolist() == sample.labels
        start += len(sample)
    assert (batch["labels"][0, start:] == IGNORE_INDEX).all()  # padding is masked
    assert (batch["input_ids"][0, start:] == processor.tokenizer.pad_token_id).all()
    images = sum(1 for r in rows[:2] for s in r for _ in range(s.pixel_values.shape[0] if s.pixel_values is not None else 0))
    assert batch["pixel_values"].shape[0] == images
    assert batch["hyport_real_tokens"] == sum(len(s) for r in rows[:2] for s in r)
    assert batch["hyport_tokens"] == 512 and "attention_mask" not in batch


class _GridProcessor:
    """The tiny processor, also returning a per-image ``image_grid_thw`` as Qwen2-VL's does."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __call__(self, **kwargs):
        out = self._inner(**kwargs)
        if "pixel_values" in out:
            out["image_grid_thw"] = torch.tensor([[1, 2, 3]] * out["pixel_values"].shape[0])
        return out


def test_the_processors_other_image_tensors_reach_the_batch(smoke, processor):
    from dataclasses import replace

    grid = replace(processor, processor=_GridProcessor(processor.processor))
    samples, _ = encode_records(load_dataset(smoke).records, grid, 256)
    with_images = [s for s in samples if s.pixel_values is not None]
    assert with_images and all(s.image_extras["image_grid_thw"].shape[0] == s.pixel_values.shape[0]
                               for s in with_images)
    assert all(not s.image_extras for s in samples if s.pixel_values is None)
    for collate, rows in ((PackedCollator(processor.tokenizer.pad_token_id, 256), pack_samples(samples, 256)[:2]),
                          (PaddedCollator(processor.tokenizer.pad_token_id), [[s] for s in samples[:4]])):
        batch = collate(rows)
        images = sum(s.pixel_values.shape[0] for r in rows for s in r if s.pixel_values is not None)
        assert batch["pixel_values"].shape[0] == batch["image_grid_thw"].shape[0] == images


def test_a_packed_batch_has_the_loss_of_the_unpacked_batch(smoke, processor):
    """Per-sample attention through hyport's registered attention: packing changes nothing,
    with or without a KV cache. (transformers' eager attention keeps packed samples apart
    only when no cache is in use: with one it attends across them.)"""
    from transformers import AutoModelForImageTextToText

    from hyport_lib.npu_attention.hf_integration import register_hyport_attention
    from hyport_lib.models.tiny import ensure_tiny_model

    samples, _ = encode_records(load_dataset(smoke).records, processor, 256)
    row = pack_samples(samples, 256)[1]  # images and several samples
    assert len(row) >= 3
    name = register_hyport_attention("sdpa")
    model = AutoModelForImageTextToText.from_pretrained(ensure_tiny_model(), attn_implementation=name).eval()

    def loss(batch):
        for key in COUNT_KEYS:
            batch.pop(key)
        with torch.no_grad():
            return model(**batch).loss.item()

    packed = loss(PackedCollator(processor.tokenizer.pad_token_id, 256)([row]))
    padded = loss(PaddedCollator(processor.tokenizer.pad_token_id)(row))
    assert packed == pytest.approx(padded, rel=1e-5, abs=1e-6)
    batch = PackedCollator(processor.tokenizer.pad_token_id, 256)([row])
    batch.pop("cu_seq_lens_q"), batch.pop("cu_seq_lens_k")  # from position_ids alone
    assert loss(batch) == pytest.approx(padded, rel=1e-5, abs=1e-6)
    eager = AutoModelForImageTextToText.from_pretrained(ensure_tiny_model(), attn_implementation="eager").eval()
    results = {}
    for use_cache in (False, True):
        batch = PackedCollator(processor.tokenizer.pad_token_id, 256)([row])
        for key in COUNT_KEYS:
            batch.pop(key)
        with torch.no_grad():
            results[use_cache] = eager(**batch, use_cache=use_cache).loss.item()
    assert results[False] == pytest.approx(padded, rel=1e-4)
    assert abs(results[True] - padded) > 1e-4  # with a cache, eager attends across samples


def test_a_cut_image_a_turn_that_is_no_object_and_an_image_in_an_answer_are_named_in_a_bom_file(tmp_path):
    # images: a truncated JPEG, a turn that is no object, an image in an answer, a BOM
    img = tmp_path / "img"
    img.mkdir()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(img / "ok.jpg", quality=95)
    data = (img / "ok.jpg").read_bytes()
    (img / "cut.jpg").write_bytes(data[: len(data) // 2])
    records = [{"id": "cut", "image": "img/cut.jpg",
                "conversations": [{"from": "human", "value": "<image> what?"}, {"from": "gpt", "value": "x"}]},
               {"id": "str-turn", "conversations": ["hello", {"from": "gpt", "value": "a"}]},
               {"id": "img-answer", "image": "img/ok.jpg",
                "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "<image>"}]}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records), encoding="utf-8-sig")  # with a BOM
    report = load_dataset(path)
    kinds = {(p.record_id, p.kind) for p in report.problems}
    assert ("cut", "image_unreadable") in kinds and ("img-answer", "image_in_answer") in kinds
    assert ("str-turn", "unknown_role") in kinds and report.total == 3


def test_a_list_as_role_a_too_long_image_path_and_a_decompression_bomb_are_named(tmp_path):
    turns = [{"from": "human", "value": "<image> what?"}, {"from": "gpt", "value": "x"}]
    (tmp_path / "img").mkdir()
    bomb = Image.new("1", (1, 1))
    bomb.save(tmp_path / "img" / "bomb.png")
    raw = bytearray((tmp_path / "img" / "bomb.png").read_bytes())
    raw[16:24] = (20000).to_bytes(4, "big") * 2  # the IHDR claims 20000 x 20000 pixels
    (tmp_path / "img" / "bomb.png").write_bytes(bytes(raw))
    records = [{"id": "list-role", "conversations": [{"from": ["human"], "value": "q"}, turns[1]]},
               {"id": "long-path", "image": "a" * 5000 + ".png", "conversations": turns},
               {"id": "bomb", "image": "img/bomb.png", "conversations": turns}]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records))
    kinds = {(p.record_id, p.kind) for p in load_dataset(path).problems}
    assert kinds >= {("list-role", "unknown_role"), ("long-path", "image_missing"), ("bomb", "image_unreadable")}


def test_one_json_object_over_several_lines_is_named_as_such(tmp_path):
    # named as one object, not as 5 lines that are not JSON
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"data": [{"id": "a", "conversations": _turns(("human", "q"), ("gpt", "a"))}]},
                                  indent=2))
    with pytest.raises(ValueError, match="wrapped.json: one JSON object .*expected a JSON list"):
        load_dataset(wrapped)


def test_dataset_error_lists_every_problem(tmp_path):
    records = [{"id": f"r{i}", "conversations": []} for i in range(3)]
    report = load_dataset(_write(tmp_path, records))
    error = DatasetError(report)
    assert len(error.details) == 3 and all("empty_conversations" not in d for d in error.details)
    assert all(f"'r{i}'" in error.details[i] for i in range(3))
    assert "skip_bad_records=True" in str(error)


def test_a_folder_given_as_the_dataset_is_named_as_a_folder(tmp_path):
    with pytest.raises(IsADirectoryError, match="dataset_path=.* is a folder"):
        load_dataset(tmp_path)


def test_non_json_constants_deep_nesting_and_odd_image_paths_are_named(tmp_path):
    import os

    (tmp_path / "nan.json").write_text('[{"id": NaN, "conversations": []}]')
    with pytest.raises(ValueError, match=r"nan.json: NaN is not JSON"):
        load_dataset(tmp_path / "nan.json")
    (tmp_path / "inf.jsonl").write_text('{"id": Infinity}\n')
    assert "Infinity is not JSON" in load_dataset(tmp_path / "inf.jsonl").problems[0].message
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match=r"deep.json: nested too deeply"):
        load_dataset(tmp_path / "deep.json")
    (tmp_path / "pictures").mkdir()
    os.mkfifo(tmp_path / "pipe.png")
    record = {"id": "x", "image": ["pictures", "pipe.png"],
              "conversations": [{"from": "human", "value": "<image><image>hi"}, {"from": "gpt", "value": "y"}]}
    (tmp_path / "odd.json").write_text(json.dumps([record]))
    messages = [p.message for p in load_dataset(tmp_path / "odd.json").problems]
    assert messages == ["'pictures': a folder, not an image file",
                        "'pipe.png': not a regular file (a pipe, device or socket)"]


def test_seed_records_without_ids_are_named_by_position_unless_the_file_uses_ids(tmp_path):
    """ids are optional (LLaMA-Factory's sharegpt has none), but a file that gives some
    records an id must give every record one."""
    text = _turns(("human", "Name a shape."), ("gpt", "A circle."))
    report = load_dataset(_write(tmp_path, [{"conversations": text}, {"conversations": text[:1]}]))
    assert [r.record_id for r in report.records] == ["#0"]
    assert [str(p) for p in report.problems] == [
        "record 1, conversations[0]: the last turn is 'human': there is no answer to learn"]
    report = load_dataset(_write(tmp_path, [{"conversations": text}, {"id": "b", "conversations": text}]))
    assert [r.record_id for r in report.records] == ["b"]
    assert [(p.index, p.kind, p.field) for p in report.problems] == [(0, "missing_id", "id")]


def test_a_problem_message_is_bounded_whatever_the_value_it_quotes(tmp_path):
    huge = "x" * 1_000_000
    record = {"id": "i" * 500, "image": huge,
              "conversations": [{"from": "human", "value": "<image>hi"}, {"from": "gpt", "value": "y"}]}
    (problem,) = load_dataset(_write(tmp_path, [record])).problems
    assert problem.kind == "image_missing" and "not a usable path (File name too long)" in problem.message
    assert len(problem.message) <= 240 and len(str(problem)) < 400


def test_every_file_type_without_records_says_so(tmp_path):
    for name, text in (("empty.json", "[]"), ("blank.json", " [ ]\n"), ("empty.jsonl", "\n\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=rf"dataset .*{name}: holds no records"):
            load_dataset(tmp_path / name)


def test_a_broken_json_lines_line_is_placed_on_its_own_line(tmp_path):
    (tmp_path / "cut.jsonl").write_text('{"instruction": "a", "output": "b"}\n{"instruction": "abc", "output": \n'
                                        '{"instruction": "a\x01", "output": "b"}\n')
    problems = load_dataset(tmp_path / "cut.jsonl").problems
    assert [str(p) for p in problems] == ["record 1, line 2: not JSON (Expecting value; column 34)",
                                          "record 2, line 3: not JSON (Invalid control character at; column 19)"]


def test_images_embedded_in_parquet_are_named_without_their_bytes(tmp_path):
    """Review C6: Hugging Face datasets writes an Image column to parquet as {bytes, path};
    hyport reads images from files and says so, without quoting the bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    png = b"\x89PNG\r\n\x1a\n" + bytes(200)
    row = {"messages": [{"role": "user", "content": "<image>What is it?"},
                        {"role": "assistant", "content": "A square."}],
           "images": [{"bytes": png, "path": "square.png"}]}
    path = tmp_path / "embedded.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    report = load_dataset(path)
    assert [(p.field, p.kind) for p in report.problems] == [("images[0]", "image_embedded")]
    message = report.problems[0].message
    assert "save them as files" in message and "PNG" not in message and "\\x" not in message


def test_the_first_batch_reads_answers_from_the_inputs_and_counts_misplaced_labels():
    """Review C10: decoding the label values would show the right answer even with labels
    shifted against the inputs (the classic collator bug); the inputs at the labelled
    positions do not, and the mismatches are counted."""
    from hyport_lib.train.packing import describe_batch
    from hyport_lib.train.samples import Sample

    ids = [5, 6, 7, 8, 9]
    right = Sample("r", ids, [IGNORE_INDEX, IGNORE_INDEX, 7, 8, IGNORE_INDEX])
    shifted = Sample("s", ids, [IGNORE_INDEX, 7, 8, IGNORE_INDEX, IGNORE_INDEX])  # one to the left
    batch = {"input_ids": torch.tensor([ids, ids]), "labels": torch.tensor([right.labels, shifted.labels])}
    rows = describe_batch([[right], [shifted]], batch, decode=lambda t: ",".join(map(str, t)))["rows"]
    assert [(r["answers"], r["label_mismatches"]) for r in rows] == [(["7,8"], 0), (["6,7"], 2)]


def test_a_prefix_format_model_says_which_records_learn_only_their_last_answer():
    """Review C2: PaliGemma's processor takes a prefix and one suffix, so earlier answers
    of a multi-turn record are not learned; the plan says so instead of staying silent."""
    from types import SimpleNamespace

    from hyport_lib.train.dataset import Record
    from hyport_lib.train.samples import prefix_format_note

    one = Record(0, "a", [("user", "q"), ("assistant", "a")])
    two = Record(1, "b", [("user", "q"), ("assistant", "a"), ("user", "q2"), ("assistant", "a2")])
    prefix = SimpleNamespace(prompt_format="prefix", traits=SimpleNamespace(model_type="paligemma"))
    chat = SimpleNamespace(prompt_format="chat", traits=SimpleNamespace(model_type="llava"))
    note = prefix_format_note(prefix, [one, two])
    assert note.startswith("1 record(s) hold more than one answer") and "paligemma" in note
    assert prefix_format_note(prefix, [one]) is None and prefix_format_note(chat, [one, two]) is None


def test_misplaced_labels_in_the_first_batch_are_said_in_the_rank_log(tmp_path, capsys):
    from hyport_lib.train.packing import FirstBatchRecorder
    from hyport_lib.train.samples import Sample

    ids = [5, 6, 7]
    shifted = Sample("s", ids, [IGNORE_INDEX, 7, IGNORE_INDEX])
    tokenizer = type("T", (), {"decode": staticmethod(lambda t, skip_special_tokens=False: str(t))})()
    recorder = FirstBatchRecorder(lambda rows: {"input_ids": torch.tensor([ids]),
                                                "labels": torch.tensor([shifted.labels])},
                                  tokenizer, tmp_path / "first_batch.json")
    recorder([shifted])
    assert json.loads((tmp_path / "first_batch.json").read_text())["rows"][0]["label_mismatches"] == 1
    assert "1 label(s) differ from the input token" in capsys.readouterr().err
