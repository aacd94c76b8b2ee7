"""Batches for training (hyport_lib/train/packing.py): packed rows with per-sample positions,
cumulative lengths and the label mask, the processor's image tensors in the batch, a packed batch
with the loss of the unpacked one, and each rank's first batch listed as the model received it."""

from __future__ import annotations

import json

import pytest
import torch

from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.packing import (COUNT_KEYS, FirstBatchRecorder, PackedCollator, PaddedCollator,
                                     clear_first_batches, describe_batch, first_batch_path, make_collator,
                                     pack_samples, training_rows)
from hyport_lib.train.params import SAMPLE_DATASETS as DATA
from hyport_lib.train.samples import IGNORE_INDEX, Sample, encode_records


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


def test_the_first_batch_reads_answers_from_the_inputs_and_counts_misplaced_labels():
    """Review C10: decoding the label values would show the right answer even with labels
    shifted against the inputs (the classic collator bug); the inputs at the labelled
    positions do not, and the mismatches are counted."""
    ids = [5, 6, 7, 8, 9]
    right = Sample("r", ids, [IGNORE_INDEX, IGNORE_INDEX, 7, 8, IGNORE_INDEX])
    shifted = Sample("s", ids, [IGNORE_INDEX, 7, 8, IGNORE_INDEX, IGNORE_INDEX])  # one to the left
    batch = {"input_ids": torch.tensor([ids, ids]), "labels": torch.tensor([right.labels, shifted.labels])}
    rows = describe_batch([[right], [shifted]], batch, decode=lambda t: ",".join(map(str, t)))["rows"]
    assert [(r["answers"], r["label_mismatches"]) for r in rows] == [(["7,8"], 0), (["6,7"], 2)]


def test_misplaced_labels_in_the_first_batch_are_said_in_the_rank_log(tmp_path, capsys):

    ids = [5, 6, 7]
    shifted = Sample("s", ids, [IGNORE_INDEX, 7, IGNORE_INDEX])
    tokenizer = type("T", (), {"decode": staticmethod(lambda t, skip_special_tokens=False: str(t))})()
    recorder = FirstBatchRecorder(lambda rows: {"input_ids": torch.tensor([ids]),
                                                "labels": torch.tensor([shifted.labels])},
                                  tokenizer, tmp_path / "first_batch.json")
    recorder([shifted])
    assert json.loads((tmp_path / "first_batch.json").read_text())["rows"][0]["label_mismatches"] == 1
    assert "1 label differs from the input token" in capsys.readouterr().err


def test_the_first_batch_is_listed_as_the_model_receives_it(processor, tmp_path):

    samples, _ = encode_records(load_dataset(DATA / "alpaca.json").records, processor, 128)
    for packing in (True, False):
        rows = training_rows(samples, 128, packing)
        out = tmp_path / f"first-{packing}.json"
        collate = FirstBatchRecorder(make_collator(processor.tokenizer.pad_token_id, 128, packing),
                                     processor.tokenizer, out)
        batch = collate(rows[:2])
        assert set(batch) >= {"input_ids", "labels"}
        listed = json.loads(out.read_text())["rows"]
        firsts = [s for row in rows[:2] for s in row]
        assert [rid for row in listed for rid in row["record_ids"]] == [s.record_id for s in firsts]
        answers = [a for row in listed for a in row["answers"]]
        assert answers[0] == "A ripe banana is yellow.<|im_end|>\n"
        assert "Three plus four is seven.<|im_end|>\n" in answers
        assert "Name the colour of a ripe banana." in listed[0]["text"]
        out.unlink()
        collate(rows[:1])
        assert not out.exists()  # the first batch only


def test_each_rank_has_its_first_batch_file_and_a_new_launch_clears_an_older_runs(tmp_path):

    assert first_batch_path(tmp_path).name == "first_batch.json"
    assert first_batch_path(tmp_path, 3) == tmp_path / "logs" / "first_batch.rank3.json"
    for rank in range(4):  # a run on 4 ranks; the next launch runs on 2
        first_batch_path(tmp_path, rank).parent.mkdir(exist_ok=True)
        first_batch_path(tmp_path, rank).write_text("{}")
    (tmp_path / "logs" / "train.log").write_text("kept")
    (tmp_path / "logs" / "first_batch_mine.json").write_text("a name hyport never gives")
    assert len(clear_first_batches(tmp_path)) == 4
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["first_batch_mine.json", "train.log"]
    assert clear_first_batches(tmp_path / "never-made") == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "first_batch.json").write_text("not hyport's")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "logs").symlink_to(elsewhere, target_is_directory=True)
    assert clear_first_batches(tmp_path / "linked") == [] and (elsewhere / "first_batch.json").exists()
