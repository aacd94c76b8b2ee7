"""Stage 04's dataset formats (no process started): alpaca, sharegpt and openai records in
JSON, JSON Lines and parquet files, the format detection, column and tag names,
LLaMA-Factory's dataset_info.json, every malformed record named in its format's own
terms, a system prompt through the chat template, and the first-batch listing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train import dataset_files
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.params import Params

DATA = Path(__file__).parent / "data" / "datasets"

ALPACA = json.loads((DATA / "alpaca.json").read_text())
MESSAGES = json.loads((DATA / "openai_messages.json").read_text())
SHAREGPT = json.loads((DATA / "sharegpt_user_assistant.json").read_text())

#: What each sample file becomes: (system, turns) per record.
EXPECTED = {
    "alpaca": [(None, [("user", "Name the colour of a ripe banana."), ("assistant", "A ripe banana is yellow.")]),
               ("You are a careful calculator.", [("user", "Add the two numbers.\n3 and 4"),
                                                  ("assistant", "Three plus four is seven.")]),
               (None, [("user", "Add three and four."), ("assistant", "Three plus four is seven."),
                       ("user", "And what is that doubled?"), ("assistant", "Seven doubled is fourteen.")])],
    "openai": [("Answer in one short sentence.", [("user", "Where does the sun rise?"),
                                                   ("assistant", "The sun rises in the east.")]),
               (None, [("user", "What do bees make?"), ("assistant", "Bees make honey."),
                       ("user", "And what do they collect?"), ("assistant", "They collect nectar and pollen.")]),
               (None, [("user", "How many legs has a spider?"), ("assistant", "A spider has eight legs.")])],
    "sharegpt": [("You are a museum guide.", [("user", "Who painted the Mona Lisa?"),
                                              ("assistant", "Leonardo da Vinci painted it.")]),
                 (None, [("user", "What is the boiling point of water?"),
                         ("assistant", "Water boils at one hundred degrees Celsius.")]),
                 ("Reply like a sailor.", [("user", "Which way is north?"),
                                           ("assistant", "North is where the compass needle points.")])],
}
RECORDS = {"alpaca": ALPACA, "openai": MESSAGES, "sharegpt": SHAREGPT}


def write_records(records: list, path: Path) -> Path:
    """``records`` as a JSON list, JSON Lines or parquet file, by ``path``'s suffix."""
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = list(dict.fromkeys(k for r in records for k in r))  # from_pylist reads the first row's only
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in records]), path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records), encoding="utf-8")
    return path


def _read(report):
    return [(r.system, r.turns) for r in report.records]


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".parquet"])
@pytest.mark.parametrize("format", ["alpaca", "sharegpt", "openai"])
def test_every_format_reads_the_same_from_every_file_type(tmp_path, format, suffix):
    path = write_records(RECORDS[format], tmp_path / f"data{suffix}")
    report = load_dataset(path)
    assert not report.problems, report.problems
    assert report.layout.format == format and report.layout.chosen_by.startswith("detected from record 0")
    assert _read(report) == EXPECTED[format]
    assert report.total == 3 and [r.index for r in report.records] == [0, 1, 2]
    ids = [r.record_id for r in report.records]
    assert ids == (["#0", "#1", "#2"] if format == "alpaca" else [r["id"] for r in RECORDS[format]])
    # the same file with its format given says so instead of "detected"
    given = load_dataset(path, options=DatasetOptions(format=format, tags=(
        {"user_tag": "user", "assistant_tag": "assistant"} if format == "sharegpt" else {})))
    assert _read(given) == EXPECTED[format] and given.layout.chosen_by == f"dataset_format={format!r}"


def test_detection_reads_the_tags_of_the_first_record_and_says_what_it_chose(tmp_path):
    seed = [{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
    layout = load_dataset(write_records(seed, tmp_path / "seed.json")).layout
    assert (layout.format, layout.tags["user_tag"], layout.tags["assistant_tag"]) == ("sharegpt", "human", "gpt")
    assert layout.describe() == "sharegpt (conversations; from/value; human/gpt)"
    layout = load_dataset(DATA / "sharegpt_user_assistant.json").layout
    assert (layout.tags["user_tag"], layout.tags["assistant_tag"]) == ("user", "assistant")
    assert layout.note() == ("detected from record 0 ('conversations' holds turns with 'from' tags): "
                             "sharegpt (conversations; from/value; user/assistant)")
    # role / content turns under "conversations" are openai-shaped
    odd = [{"conversations": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    report = load_dataset(write_records(odd, tmp_path / "odd.json"))
    assert report.layout.format == "openai" and _read(report) == [(None, [("user", "a"), ("assistant", "b")])]
    # the first record that is an object decides; the one before is named as no object
    mixed = ["not a record", ALPACA[0]]
    report = load_dataset(write_records(mixed, tmp_path / "mixed.json"))
    assert report.layout.chosen_by.startswith("detected from record 1")
    assert [(p.index, p.kind) for p in report.problems] == [(0, "not_object")]


def test_what_detection_cannot_tell_is_one_line_naming_the_record(tmp_path):
    with pytest.raises(ValueError, match=r"^dataset_format='auto': record 0 has keys 'question', 'answer': not "
                                         r"alpaca .*set dataset_format and dataset_columns$"):
        load_dataset(write_records([{"question": "q", "answer": "a"}], tmp_path / "a.json"))
    both = [{"conversations": [], "messages": []}]
    with pytest.raises(ValueError, match="record 0 has both 'conversations' and 'messages'"):
        load_dataset(write_records(both, tmp_path / "b.json"))
    odd_turns = [{"messages": [{"speaker": "user", "text": "q"}]}]
    with pytest.raises(ValueError, match=r"record 0, messages\[0\] has keys 'speaker', 'text': neither"):
        load_dataset(write_records(odd_turns, tmp_path / "c.json"))
    with pytest.raises(ValueError, match="detected alpaca from record 0, but dataset_tags: role tags apply"):
        load_dataset(DATA / "alpaca.json", options=DatasetOptions(tags={"user_tag": "user"}))


def test_columns_and_tags_rename_what_is_read(tmp_path):
    renamed = [{"question": "Where is Paris?", "context": "Geography.", "answer": "Paris is in France.",
                "persona": "You teach geography.", "before": [["Hi.", "Hello."]]}]
    columns = {"prompt": "question", "query": "context", "response": "answer", "system": "persona",
               "history": "before"}
    report = load_dataset(write_records(renamed, tmp_path / "r.json"), options=DatasetOptions(columns=columns))
    assert report.layout.format == "alpaca" and not report.problems
    assert _read(report) == [("You teach geography.", [("user", "Hi."), ("assistant", "Hello."),
                                                       ("user", "Where is Paris?\nGeography."),
                                                       ("assistant", "Paris is in France.")])]
    tags = {"role_tag": "speaker", "content_tag": "text", "user_tag": "client", "assistant_tag": "clerk"}
    options = DatasetOptions(format="sharegpt", columns={"messages": "dialog", "system": "persona"}, tags=tags)
    report = load_dataset(DATA / "chat_turns.jsonl", options=options)
    assert not report.problems and report.records[0].system == "You work in a bakery."
    assert report.records[1].turns == [("user", "Do you sell rye bread?"),
                                       ("assistant", "Yes, rye bread is baked every morning.")]
    # without the tags the same file is named record by record, in its own terms
    report = load_dataset(DATA / "chat_turns.jsonl", options=DatasetOptions(format="sharegpt",
                                                                            columns={"messages": "dialog"}))
    assert str(report.problems[0]) == ("record 0, dialog[0].from: missing (the role is read from 'from'; "
                                       "user tags: human; assistant tags: gpt)")


def test_images_are_read_from_images_or_the_seeds_image_column(tmp_path):
    from PIL import Image

    Image.new("RGB", (16, 16)).save(tmp_path / "a.png")
    records = [{"instruction": "<image>What is it?", "output": "A black square.", "images": ["a.png"]},
               {"instruction": "<image>And this?", "output": "Also black.", "image": "a.png"},
               {"instruction": "<image>Both?", "output": "x", "image": "a.png", "images": ["a.png"]},
               {"instruction": "No picture <image>", "output": "y"}]
    report = load_dataset(write_records(records, tmp_path / "d.json"))
    assert [r.images for r in report.records] == [[str(tmp_path / "a.png")]] * 2
    assert [str(p) for p in report.problems] == [
        "record 2, image: both 'images' and 'image' hold images; give one",
        "record 3, images: 1 <image> placeholder(s) in the user turns but 0 image(s)"]


def test_a_malformed_record_is_named_in_each_formats_own_terms(tmp_path):
    alpaca = ALPACA + [{"instruction": "Say hi.", "output": ""},
                       {"instruction": "", "input": "", "output": "x"},
                       {"instruction": "q", "output": 7},
                       {"instruction": "q", "output": "a", "history": [["only one"]]},
                       {"instruction": "q"}]
    said = [str(p) for p in load_dataset(write_records(alpaca, tmp_path / "a.json")).problems]
    assert said == ["record 3, output: empty",
                    "record 4, instruction: empty or missing (and input is empty too): the prompt would be blank",
                    "record 5, output: expected text, got int",
                    "record 6, history[0]: expected a [query, response] pair, got ['only one']",
                    "record 7, output: missing: there is no answer to learn"]
    messages = MESSAGES + [{"id": "a6", "messages": [{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"},
                                                     {"role": "bot", "content": "b"}]},
                           {"id": "a7", "messages": [{"role": "user", "content": "q"},
                                                     {"role": "system", "content": "late"}]},
                           {"id": "a8", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                                                     {"role": "assistant", "content": "a"}]},
                           {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]
    problems = load_dataset(write_records(messages, tmp_path / "m.jsonl")).problems
    assert [str(p) for p in problems] == [
        "record 3 (id 'a6'), messages[2].role: 'bot' is not a role tag (user tags: user; assistant tags: assistant)",
        "record 4 (id 'a7'), messages[1].role: 'system': a system turn is read only as the first turn",
        "record 5 (id 'a8'), messages[0].content: a list of content parts: hyport reads text content "
        "(images as <image> placeholders with an images column)",
        "record 6, id: missing or empty id (other records of the file have one: every record needs one)"]
    assert [p.kind for p in problems] == ["unknown_role", "unknown_role", "not_text", "missing_id"]
    sharegpt = SHAREGPT + [{"id": "s-3", "conversations": [{"from": "assistant", "value": "Hello."},
                                                           {"from": "user", "value": "Hi?"}]},
                           {"id": "s-4", "conversations": [{"from": "user", "value": "q"},
                                                           {"from": "observation", "value": "tool said"}]},
                           {"id": "s-1", "system": "<image>", "conversations": SHAREGPT[1]["conversations"]}]
    problems = load_dataset(write_records(sharegpt, tmp_path / "s.parquet")).problems
    assert [(str(p), p.kind) for p in problems] == [
        ("record 3 (id 's-3'), conversations[0].from: the first turn is 'assistant'; it must be 'user'",
         "first_turn_not_human"),
        ("record 3 (id 's-3'), conversations[1]: the last turn is 'user': there is no answer to learn", "no_answer"),
        ("record 4 (id 's-4'), conversations[1].from: 'observation': tool turns (observation / function call) "
         "are not trained by hyport", "unknown_role"),
        ("record 5 (id 's-1'), system: <image> in the system prompt: images belong to the user turns",
         "image_in_system"),
        ("record 5 (id 's-1'), id: id 's-1' is already used by record 1", "duplicate_id")]


def test_files_that_are_not_read_are_said_up_front(tmp_path, monkeypatch):
    (tmp_path / "d.csv").write_text("instruction,output\nq,a\n")
    with pytest.raises(ValueError, match=r"d.csv: CSV files are not read by hyport; convert it to JSON"):
        load_dataset(tmp_path / "d.csv")
    (tmp_path / "d.parquet").write_bytes(b"PAR1 but not really")
    with pytest.raises(ValueError, match=r"d.parquet: not a readable parquet file"):
        load_dataset(tmp_path / "d.parquet")
    # parquet is read a record batch at a time: a problem deep in the file keeps its row index
    monkeypatch.setattr(dataset_files, "PARQUET_BATCH_ROWS", 4)
    rows = [dict(ALPACA[0]) for _ in range(11)]
    rows[9] = {**ALPACA[0], "output": ""}
    report = load_dataset(write_records(rows, tmp_path / "many.parquet"))
    assert report.total == 11 and len(report.records) == 10 and [str(p) for p in report.problems] == [
        "record 9, output: empty"]


def test_dataset_info_entries_are_read_as_llama_factory_reads_them(tmp_path):
    info = DATA / "dataset_info.json"
    report = load_dataset(info, options=DatasetOptions(entry="calc_alpaca"))
    assert report.path == str(DATA / "alpaca.json") and _read(report) == EXPECTED["alpaca"]
    assert report.layout.chosen_by == "dataset_info.json entry 'calc_alpaca'"
    report = load_dataset(info, options=DatasetOptions(entry="guide_chat"))
    assert _read(report) == EXPECTED["sharegpt"]
    report = load_dataset(DATA, options=DatasetOptions(entry="openai_like"))  # the folder, as dataset_dir
    assert _read(report) == EXPECTED["openai"]
    report = load_dataset(info, options=DatasetOptions(entry="bakery"))
    assert not report.problems and report.records[0].system == "You work in a bakery."
    # columns an entry does not name are not read (LLaMA-Factory's defaults): no system here
    copy = shutil.copytree(DATA, tmp_path / "data")
    entries = json.loads((copy / "dataset_info.json").read_text())
    entries["bare"] = {"file_name": "alpaca.json"}
    entries["images_unnamed"] = {"file_name": "img.json", "formatting": "sharegpt"}
    (copy / "dataset_info.json").write_text(json.dumps(entries))
    assert [r.system for r in load_dataset(copy / "dataset_info.json",
                                           options=DatasetOptions(entry="bare")).records] == [None] * 3
    (copy / "img.json").write_text(json.dumps([{"conversations": [{"from": "human", "value": "<image>x"},
                                                                  {"from": "gpt", "value": "y"}],
                                                "images": ["a.png"]}]))
    (problem,) = load_dataset(copy / "dataset_info.json", options=DatasetOptions(entry="images_unnamed")).problems
    assert problem.kind == "image_count"


@pytest.mark.parametrize("entry, said", [
    ("from_hub", "entry 'from_hub', hf_hub_url: hyport reads local files only and downloads nothing"),
    ("from_modelscope", "entry 'from_modelscope', ms_hub_url: hyport reads local files only"),
    ("from_script", "entry 'from_script', script_url: hyport reads local files only"),
    ("preferences", "entry 'preferences', ranking: preference (ranking) data is not trained"),
    ("with_tools", "entry 'with_tools', columns.tools: tool descriptions (hyport's smoke training has no tool "
                   "calls) are not supported"),
    ("with_videos", "entry 'with_videos', columns.videos: videos (hyport trains on text and images) are not"),
    ("missing_file", "entry 'missing_file', file_name: 'not_here.json': no such file in"),
    ("nope", "dataset='nope': no such entry in"),
])
def test_dataset_info_entries_hyport_cannot_use_are_one_line_naming_entry_and_field(entry, said):
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        load_dataset(DATA / "dataset_info.json", options=DatasetOptions(entry=entry))
    text = str(caught.value)
    assert said in text and "\n" not in text
    assert "dataset_info.json" in text


def test_the_dataset_parameters_are_checked_together():
    info = str(DATA / "dataset_info.json")
    Params(dataset_path=info, dataset="calc_alpaca")
    Params(dataset_path=str(DATA / "alpaca.json"), dataset_format="alpaca", dataset_columns={"system": "sys"})
    cases = [
        (dict(dataset="calc_alpaca"), "dataset='calc_alpaca': names an entry of a dataset_info.json"),
        (dict(dataset_path=info), "is a dataset_info.json: name the entry to train on with dataset=NAME"),
        (dict(dataset_path=info, dataset="x", dataset_format="alpaca"),
         "dataset_format: with dataset='x' the dataset_info.json entry says how its file is read"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"tools": "tools"}),
         "dataset_columns['tools']: tool descriptions"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"answer": "a"}),
         "dataset_columns['answer']: not a column role"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_format="alpaca", dataset_tags={"user_tag": "u"}),
         "dataset_tags: role tags apply to the sharegpt and openai formats, not alpaca"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_format="openai", dataset_columns={"prompt": "q"}),
         "dataset_columns['prompt']: not a column of the openai format"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_tags={"speaker": "s"}),
         "dataset_tags['speaker']: not a tag"),
        (dict(dataset_format="openai"), "they describe a dataset_path; the bundled smoke set needs none"),
        (dict(dataset_path=str(DATA / "alpaca.json"), dataset_format="jsonish"), "dataset_format='jsonish'"),
    ]
    for values, said in cases:
        with pytest.raises(ParameterError) as caught:
            Params(**values)
        assert said in str(caught.value), (values, str(caught.value))
    from hyport_lib.params import field_of, parse_text

    # the command line and -p take YAML for the dicts
    assert parse_text(field_of(Params, "dataset_tags"), "{user_tag: user}") == {"user_tag": "user"}


@pytest.fixture(scope="module")
def processor():
    from hyport_lib.models.loading import load_processor
    from hyport_lib.models.tiny import ensure_tiny_model

    return load_processor(ensure_tiny_model())


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


def test_the_first_batch_is_listed_as_the_model_receives_it(processor, tmp_path):
    from hyport_lib.train.first_batch import FirstBatchRecorder
    from hyport_lib.train.packing import make_collator, training_rows
    from hyport_lib.train.samples import encode_records

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


def test_the_plan_says_how_the_dataset_was_read_and_skips_bad_records_by_position(tmp_path):
    from hyport_lib.backend import get_backend
    from hyport_lib.train.dataset import DatasetError
    from hyport_lib.train.preflight import prepare

    path = write_records(ALPACA + [{"instruction": "Say hi.", "output": ""}], tmp_path / "a.jsonl")
    with pytest.raises(DatasetError) as caught:
        prepare(Params(dataset_path=str(path), output_dir=str(tmp_path / "out")), get_backend("cpu"))
    assert "record 3, output: empty" in str(caught.value)
    plan = prepare(Params(dataset_path=str(path), output_dir=str(tmp_path / "out"), skip_bad_records=True),
                   get_backend("cpu"))
    assert plan.skip_records == [3] and plan.dataset["samples"] == 3
    assert plan.dataset["layout"]["format"] == "alpaca"
    assert any(n.startswith(f"dataset {path}: detected from record 0") for n in plan.notes), plan.notes
    plan = prepare(Params(dataset_path=str(DATA / "dataset_info.json"), dataset="bakery",
                          output_dir=str(tmp_path / "out")), get_backend("cpu"))
    assert plan.dataset["path"] == str(DATA / "chat_turns.jsonl") and plan.dataset["samples"] == 2
    assert f"dataset {DATA / 'chat_turns.jsonl'}: dataset_info.json entry 'bakery': sharegpt (dialog; " \
           "speaker/text; client/clerk)" in plan.notes
    assert plan.worker_spec()["dataset_path"] == str(DATA / "dataset_info.json")
    assert not (tmp_path / "out").exists()  # the plan wrote nothing
