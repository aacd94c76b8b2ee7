"""Records encoded through the model's own chat template (hyport_lib/train/samples.py): labels on
exactly the answers, a system prompt the template refuses folded into the first user turn,
too-long samples truncated or dropped and named in the format's fields, the bundled smoke set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.params import SAMPLE_DATASETS as DATA
from hyport_lib.train.samples import Encoder, IGNORE_INDEX, encode_records

from .test_dataset import _turns, _write


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
    assert note.startswith("1 record holds more than one answer") and "paligemma" in note
    assert prefix_format_note(prefix, [one]) is None and prefix_format_note(chat, [one, two]) is None


def test_a_system_prompt_reaches_the_chat_template_and_only_answers_are_labelled(processor):
    from hyport_lib.train.samples import IGNORE_INDEX, Encoder

    for path, options in ((DATA / "openai_messages.json", DatasetOptions()),
                          (DATA / "dataset_info.json", DatasetOptions(entry="calc_alpaca"))):
        record = next(r for r in load_dataset(path, options=options).records if r.system)
        sample, problem = Encoder(processor, 256).encode(record)
        assert problem is None
        text = processor.tokenizer.decode(sample.input_ids)
        assert text.startswith(f"<|im_start|>system\n{record.system}<|im_end|>\n<|im_start|>user\n")
        labelled = processor.tokenizer.decode([t for t, l in zip(sample.input_ids, sample.labels)
                                               if l != IGNORE_INDEX])
        answers = [t for role, t in record.turns if role == "assistant"]
        assert labelled == "".join(f"{a}<|im_end|>\n" for a in answers)
        assert record.system not in labelled


#: Gemma-2's way: a system message raises (content parts as the tiny VLM's processor gets them).
SYSTEM_REFUSED = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
                  "supported') }}{% endif %}<|im_start|>{{ m['role'] }}\n{% for p in m['content'] %}"
                  "{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture
def own_processor():
    """A processor of its own (a test changes its chat template)."""
    from hyport_lib.models.loading import load_processor
    from hyport_lib.models.tiny import ensure_tiny_model

    return load_processor(ensure_tiny_model())


def _set_template(loaded, template: str) -> None:
    for holder in {id(loaded.processor): loaded.processor, id(loaded.tokenizer): loaded.tokenizer}.values():
        holder.chat_template = template


def test_a_template_that_refuses_a_system_role_gets_the_system_prompt_in_the_first_user_turn(own_processor):
    from hyport_lib.train.samples import IGNORE_INDEX, encode_records, system_prompt_note, system_role_refused

    _set_template(own_processor, SYSTEM_REFUSED)
    assert "System role not supported" in system_role_refused(own_processor)
    records = load_dataset(DATA / "openai_messages.json").records
    samples, problems = encode_records(records, own_processor, 256)
    assert not problems and len(samples) == 3
    text = own_processor.tokenizer.decode(samples[0].input_ids)
    assert text.startswith(f"<|im_start|>user\n{records[0].system}\n\n{records[0].turns[0][1]}<|im_end|>")
    labelled = own_processor.tokenizer.decode([t for t, l in zip(samples[0].input_ids, samples[0].labels)
                                               if l != IGNORE_INDEX])
    assert labelled == f"{records[0].turns[1][1]}<|im_end|>\n"
    note = system_prompt_note(own_processor, records)
    assert note.startswith("1 record carries a system prompt (messages[0].content), but ") and \
        "refuses a system message (TemplateError: System role not supported)" in note
    # a template that fails on every record is each record's encode_failed, named in its own field
    _set_template(own_processor, "{{ raise_exception('no template for you') }}")
    assert system_role_refused(own_processor) is None
    alpaca = load_dataset(DATA / "alpaca.json").records
    samples, problems = encode_records(alpaca, own_processor, 256)
    assert not samples and [(p.field, p.kind) for p in problems] == [
        ("instruction/output", "encode_failed"), ("instruction/input/output", "encode_failed"),
        ("history/instruction/output", "encode_failed")]
    assert problems[0].message == "TemplateError: no template for you"


def test_too_long_names_the_formats_fields_and_a_huge_system_prompt_is_never_tokenised(processor, monkeypatch):
    from dataclasses import replace

    from hyport_lib.train.samples import Encoder

    alpaca = load_dataset(DATA / "alpaca.json").records[0]
    openai = load_dataset(DATA / "openai_messages.json").records[0]  # its system prompt is a system turn
    for record, field in ((openai, "messages"), (alpaca, "instruction/output")):
        _, problem = Encoder(processor, 32, "drop").encode(replace(record, turns=[("user", "q"),
                                                                                 ("assistant", "a " * 400)]))
        assert (problem.kind, problem.field) == ("too_long", field), problem
    encoder = Encoder(processor, 32)
    tokenised: list[int] = []
    real_call = encoder._call
    monkeypatch.setattr(encoder, "_call", lambda text, *a, **k: tokenised.append(len(text)) or real_call(text, *a, **k))
    sample, problem = encoder.encode(replace(alpaca, system="S" * (encoder.max_chars + 1)))
    assert sample is None and (problem.kind, problem.field) == ("too_long", "system")
    assert "the system prompt alone is more than max_seq_len=32 tokens" in problem.message
    assert tokenised == []  # refused before anything was tokenised
    for overflow in ("truncate", "drop"):
        _, problem = Encoder(processor, 32, overflow).encode(replace(openai, system="S" * (encoder.max_chars + 1)))
        assert (problem.kind, problem.field) == ("too_long", "messages[0].content")
