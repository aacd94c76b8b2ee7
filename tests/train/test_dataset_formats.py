"""Stage 04's dataset formats (no process started): alpaca, sharegpt and openai records in
JSON, JSON Lines and parquet files, the format detection, column and tag names,
LLaMA-Factory's dataset_info.json, every malformed record named in its format's own
terms, a system prompt through the chat template, and the first-batch listing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train import dataset_files
from hyport_lib.train.dataset import DatasetError, load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.params import SAMPLE_DATASETS as DATA
from hyport_lib.train.params import Params

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
    with pytest.raises(ValueError, match=r"^dataset .*a.json: dataset_format='auto': record 0 has keys 'question', "
                                         r"'answer': not alpaca .*set dataset_format and dataset_columns$"):
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


#: Entries of a dataset_info.json that hyport refuses (the shipped one lists none of them).
REFUSED_ENTRIES = {
    "from_hub": {"hf_hub_url": "someone/some-dataset"},
    "from_modelscope": {"ms_hub_url": "someone/some-dataset"},
    "from_script": {"script_url": "my_script"},
    "preferences": {"file_name": "alpaca.json", "ranking": True,
                    "columns": {"prompt": "instruction", "chosen": "chosen", "rejected": "rejected"}},
    "with_tools": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                   "columns": {"messages": "conversations", "tools": "tools"}},
    "with_videos": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                    "columns": {"messages": "conversations", "videos": "videos"}},
    "missing_file": {"file_name": "not_here.json"},
}


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
def test_dataset_info_entries_hyport_cannot_use_are_one_line_naming_entry_and_field(entry, said, tmp_path):
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        load_dataset(_info_copy(tmp_path, REFUSED_ENTRIES), options=DatasetOptions(entry=entry))
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
    from hyport_lib.params import parameter_fields, parse_text

    # the command line and -p take YAML for the dicts
    tags = next(f for f in parameter_fields(Params) if f.name == "dataset_tags")
    assert parse_text(tags, "{user_tag: user}") == {"user_tag": "user"}


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
    from hyport_lib.train.packing import FirstBatchRecorder
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


def test_each_rank_has_its_first_batch_file_and_a_new_launch_clears_an_older_runs(tmp_path):
    from hyport_lib.train.packing import clear_first_batches, first_batch_path

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


def test_the_plan_says_how_the_dataset_was_read_and_skips_bad_records_by_position(tmp_path):
    from hyport_lib.backend import get_backend
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


# --- review findings: LLaMA-Factory's reading of dataset_info.json, odd values, detection ---


def _info_copy(tmp_path, entries: dict) -> Path:
    """The sample folder copied, with ``entries`` added to its dataset_info.json."""
    copy = shutil.copytree(DATA, tmp_path / "data")
    info = copy / "dataset_info.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), **entries}))
    return info


def test_an_entry_with_columns_or_tags_reads_only_the_names_it_gives(tmp_path):
    """As LLaMA-Factory's DatasetAttr.join: a ``columns`` (``tags``) object replaces all the
    defaults, so a name it leaves out is not read; a needed one is refused in one line."""
    openai_tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    info = _info_copy(tmp_path, {
        "no_query": {"file_name": "alpaca.json", "columns": {"prompt": "instruction", "response": "output"}},
        "partial_tags": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                         "tags": {"user_tag": "user", "assistant_tag": "assistant"}},
        "no_messages": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                        "columns": {"system": "system"}},
        "no_response": {"file_name": "alpaca.json", "columns": {"prompt": "instruction"}},
        "no_system_tag": {"file_name": "openai_messages.json", "formatting": "sharegpt",
                          "columns": {"messages": "messages"}, "tags": openai_tags}})
    report = load_dataset(info, options=DatasetOptions(entry="no_query"))
    assert report.records[1].turns[0] == ("user", "Add the two numbers.")  # its input "3 and 4" is not read
    assert report.layout.describe() == "alpaca (instruction/output)"
    for entry, said in (("partial_tags", "tags.role_tag: not named (LLaMA-Factory reads no role without it)"),
                        ("no_messages", "columns.messages: not named (LLaMA-Factory reads no turns without it)"),
                        ("no_response", "columns.response: not named (LLaMA-Factory reads no answer")):
        with pytest.raises(ValueError) as caught:
            load_dataset(info, options=DatasetOptions(entry=entry))
        assert f"entry {entry!r}, {said}" in str(caught.value) and "\n" not in str(caught.value)
    # no system_tag: a leading system turn is no role LLaMA-Factory reads (it skips the record)
    problems = load_dataset(info, options=DatasetOptions(entry="no_system_tag")).problems
    assert [(p.index, p.field, p.kind) for p in problems] == [(0, "messages[0].role", "unknown_role")]
    assert "no system_tag is named" in problems[0].message


def test_a_value_that_is_not_text_is_not_called_empty(tmp_path):
    records = [{"messages": [{"role": "user", "content": 42}, {"role": "assistant", "content": {"text": "a"}}]},
               {"messages": [{"role": "system", "content": 5}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}]},
               {"messages": [{"role": "user", "content": "q"},
                             {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}]}]
    problems = load_dataset(write_records(records, tmp_path / "m.json")).problems
    assert [(str(p), p.kind) for p in problems] == [
        ("record 0, messages[0].content: expected text, got int", "not_text"),
        ("record 0, messages[1].content: expected text, got dict", "not_text"),
        ("record 1, messages[0].content: expected text, got int", "not_text"),
        ("record 2, messages[1].tool_calls: tool calls are not supported (hyport's smoke training learns text "
         "answers)", "not_text")]
    history = [{"instruction": "q", "output": "a", "history": [[1, "  "]]}]
    problems = load_dataset(write_records(history, tmp_path / "h.json")).problems
    assert [(str(p), p.kind) for p in problems] == [("record 0, history[0][0]: expected text, got int", "not_text"),
                                                    ("record 0, history[0][1]: empty or missing text", "empty_value")]


def test_one_record_that_does_not_tell_the_format_is_its_own_problem(tmp_path, monkeypatch):
    from hyport_lib.train import dataset as dataset_module

    good = {"id": "b", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    report = load_dataset(write_records([{"id": "a"}, {"id": "c", "conversations": None}, good], tmp_path / "a.json"))
    assert report.layout.chosen_by.startswith("detected from record 2") and report.layout.format == "sharegpt"
    assert [str(p) for p in report.problems] == ["record 0 (id 'a'), conversations: missing",
                                                 "record 1 (id 'c'), conversations: missing"]
    assert [r.record_id for r in report.records] == ["b"]
    # none tells it: one line naming the file and the first record's keys
    path = write_records([{"question": "q"}, {"question": "r"}], tmp_path / "b.jsonl")
    with pytest.raises(ValueError, match=r"b.jsonl: dataset_format='auto': record 0 has keys 'question': not "
                                         r"alpaca .* \(nor does any of the other 1 records\)$"):
        load_dataset(path)
    # ... and detection looks at a bounded number of records
    monkeypatch.setattr(dataset_module, "DETECT_LIMIT", 3)
    path = write_records([{"question": "q"}] * 5 + [ALPACA[0]], tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match=r"\(nor does any of the first 3 records\)$"):
        load_dataset(path)


def test_alpaca_records_may_have_ids(tmp_path):
    records = [{"id": "q1", **ALPACA[0]}, {"id": "q2", **ALPACA[1]}, {"id": "q1", **ALPACA[2]}]
    report = load_dataset(write_records(records, tmp_path / "a.parquet"))
    assert [r.record_id for r in report.records] == ["q1", "q2"]
    assert [str(p) for p in report.problems] == ["record 2 (id 'q1'), id: id 'q1' is already used by record 0"]


def test_the_folder_of_a_dataset_info_json_is_a_dataset_path_with_dataset(tmp_path):
    assert Params(dataset_path=str(DATA), dataset="calc_alpaca").dataset_path == str(DATA)
    (tmp_path / "empty").mkdir()
    for values, said in ((dict(dataset_path=str(DATA)), f"dataset_path={str(DATA)!r} is a folder: give the data "
                                                        "file itself"),
                         (dict(dataset_path=str(tmp_path / "empty"), dataset="x"), "a folder without a "
                                                                                    "dataset_info.json"),
                         (dict(dataset_path="/nope.json"), "dataset_path='/nope.json': no such file")):
        with pytest.raises(ParameterError) as caught:
            Params(**values)
        assert said in str(caught.value), str(caught.value)


def test_an_openai_entry_says_where_llama_factory_changes_the_system_prompt(tmp_path):
    info = _info_copy(tmp_path, {"as_openai": {"file_name": "openai_messages.json", "formatting": "openai",
                                               "columns": {"messages": "messages"},
                                               "tags": {"role_tag": "role", "content_tag": "content",
                                                        "user_tag": "user", "assistant_tag": "assistant",
                                                        "system_tag": "system"}}})
    report = load_dataset(info, options=DatasetOptions(entry="as_openai"))
    assert _read(report) == EXPECTED["openai"]  # the system prompts as written
    assert "'detailed thinking off'" in report.layout.caveat
    assert load_dataset(info, options=DatasetOptions(entry="openai_like")).layout.caveat is None


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
    assert note.startswith("1 record(s) carry a system prompt (messages[0].content), but ") and \
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


def test_the_plan_notes_a_folded_system_prompt_and_the_openai_entrys_difference(tmp_path, monkeypatch):
    from hyport_lib.backend import get_backend
    from hyport_lib.train import samples
    from hyport_lib.train.preflight import prepare

    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
            "system_tag": "system"}
    info = _info_copy(tmp_path, {"as_openai": {"file_name": "openai_messages.json", "formatting": "openai",
                                               "columns": {"messages": "messages"}, "tags": tags}})
    # as if the tiny model's chat template refused a system message (Gemma-2's does)
    monkeypatch.setattr(samples, "system_role_refused", lambda loaded: "refuses a system message (stand-in)")
    plan = prepare(Params(dataset_path=str(info), dataset="as_openai", output_dir=str(tmp_path / "out")),
                   get_backend("cpu"))
    path = tmp_path / "data" / "openai_messages.json"
    assert f"dataset {path}: formatting 'openai': LLaMA-Factory appends 'detailed thinking off' to every " \
           "system prompt" in "\n".join(plan.notes)
    assert any(n.startswith("1 record(s) carry a system prompt (messages[0].content), but ") and
               "refuses a system message (stand-in): each is put at the start of the record's first user turn"
               in n for n in plan.notes), plan.notes


def test_a_column_set_to_none_is_not_read_as_in_dataset_info_json():
    alpaca = str(DATA / "alpaca.json")
    params = Params(dataset_path=alpaca, dataset_columns={"query": None})
    report = load_dataset(params.dataset_path, options=params.dataset_options)
    assert report.records[1].turns[0] == ("user", "Add the two numbers.")  # its input is not read
    for columns, said in (({"response": None}, "dataset_columns['response']=None: it holds the answer"),
                          ({"prompt": None, "query": None}, "['query'] are both None"),
                          ({"prompt": 5}, "dataset_columns['prompt']=5: expected a column name (or None")):
        with pytest.raises(ParameterError, match=re.escape(said)):
            Params(dataset_path=alpaca, dataset_columns=columns)


def test_ids_never_cost_an_entry_its_records_and_the_switch_is_named(tmp_path):
    """Review C3: LLaMA-Factory reads no id, so an entry reads one only when its columns name
    it; a plain file with repeated ids is refused with the way to do without them."""
    rows = [{"id": "src-a", **ALPACA[0]}, {"id": "src-a", **ALPACA[1]}, {**ALPACA[2]}]
    info = _info_copy(tmp_path, {"x": {"file_name": "x.json"},
                                 "x_ids": {"file_name": "x.json", "columns": {"prompt": "instruction",
                                                                              "query": "input", "response": "output",
                                                                              "id": "id"}}})
    write_records(rows, info.parent / "x.json")
    report = load_dataset(info, options=DatasetOptions(entry="x"))
    assert report.problems == [] and [r.record_id for r in report.records] == ["#0", "#1", "#2"]
    named = load_dataset(info, options=DatasetOptions(entry="x_ids"))
    assert [p.kind for p in named.problems] == ["duplicate_id", "missing_id"]
    plain = load_dataset(info.parent / "x.json")
    assert [p.kind for p in plain.problems] == ["duplicate_id", "missing_id"]
    assert any("dataset_columns={'id': None}" in line for line in DatasetError(plain).details)
    # the switch written as the CLI reads it: no record has a column named 'None'
    off = load_dataset(info.parent / "x.json", options=DatasetOptions(columns={"id": None}))
    assert off.problems == [] and len(off.records) == 3
    wrong = load_dataset(info.parent / "x.json", options=DatasetOptions(columns={"id": "None"}))
    assert {p.message for p in wrong.problems} == {"no record has the id column 'None' that dataset_columns names"}
    # an entry naming an id column no record has is said so too (review E6)
    info = _info_copy(tmp_path / "again", {"x_uid": {"file_name": "x.json", "columns": {
        "prompt": "instruction", "query": "input", "response": "output", "id": "uid"}}})
    write_records(rows, info.parent / "x.json")
    absent = load_dataset(info, options=DatasetOptions(entry="x_uid"))
    assert {p.message for p in absent.problems} == {"no record has the id column 'uid' that the entry's columns names"}


# --- review C, second round: detection from role tags, empty system turns, null columns, ---
# --- mixed entries, files in the wrong format                                            ---

_USER_ASSISTANT = [{"conversations": [{"from": "user", "value": f"q{i}"}, {"from": "assistant", "value": f"a{i}"}]}
                   for i in range(3)]


@pytest.mark.parametrize("first, said", [
    ({"conversations": [{"from": "user", "value": "hi"}]},
     "record 0, conversations[0]: the last turn is 'user': there is no answer to learn"),
    ({"conversations": []}, "record 0, conversations: must be a non-empty list of turns"),
    ({"conversations": [{"value": "hi"}, {"from": "assistant", "value": "yo"}]},
     "record 0, conversations[0].from: missing (the role is read from 'from'; user tags: user; assistant tags: "
     "assistant)"),
])
def test_a_record_that_cannot_show_both_role_tags_leaves_detection_to_the_next(tmp_path, first, said):
    """Review C1: one side of a dialogue (or none) does not tell the tags; the record after it
    does, and the first is then named as its own problem."""
    report = load_dataset(write_records([first] + _USER_ASSISTANT, tmp_path / "a.jsonl"))
    assert report.layout.chosen_by.startswith("detected from record 1")
    assert (report.layout.tags["user_tag"], report.layout.tags["assistant_tag"]) == ("user", "assistant")
    assert [str(p) for p in report.problems] == [said]
    assert [r.turns for r in report.records] == [[("user", f"q{i}"), ("assistant", f"a{i}")] for i in range(3)]


def test_a_record_that_cannot_show_the_role_tags_says_why_and_what_it_suggests():
    from hyport_lib.train.dataset_formats import UndetectedFormat, resolve_layout

    one_side = {"messages": [{"role": "user", "content": "q"}]}
    with pytest.raises(UndetectedFormat) as caught:
        resolve_layout(DatasetOptions(), (4, one_side))
    assert str(caught.value) == ("dataset_format='auto': record 4, messages: its 'role' tags ('user') show no "
                                 "assistant tag ('gpt' or 'assistant'); set dataset_tags user_tag and assistant_tag")
    # when no record of the file tells more, the turns column still says the format
    fallback = caught.value.fallback
    assert fallback.describe() == "openai (messages; role/content; user/assistant)"
    assert fallback.chosen_by.startswith("guessed from record 4")
    with pytest.raises(UndetectedFormat) as caught:
        resolve_layout(DatasetOptions(), (0, {"conversations": []}))
    assert caught.value.fallback.describe() == "sharegpt (conversations; from/value; human/gpt)"
    # tags the user gives need not be shown
    given = resolve_layout(DatasetOptions(tags={"assistant_tag": "bot"}), (0, one_side))
    assert (given.format, given.tags["user_tag"], given.tags["assistant_tag"]) == ("openai", "user", "bot")


def test_an_empty_system_turn_is_no_system_prompt(tmp_path):
    """Review C4: as a blank system column is; the turn still wins over the column."""
    records = [{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}]},
               {"messages": [{"role": "system", "content": None}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}], "system": "from the column"}]
    report = load_dataset(write_records(records, tmp_path / "m.json"))
    assert report.problems == [] and [r.system for r in report.records] == [None, None]
    sharegpt = [{"conversations": [{"from": "system", "value": "  "}, {"from": "human", "value": "q"},
                                   {"from": "gpt", "value": "a"}]}]
    report = load_dataset(write_records(sharegpt, tmp_path / "s.json"))
    assert report.problems == [] and _read(report) == [(None, [("user", "q"), ("assistant", "a")])]


def test_an_unsupported_column_set_to_null_is_not_read_and_accepted(tmp_path):
    """Review C7: null means "not read" in LLaMA-Factory, so nothing unsupported is used."""
    info = _info_copy(tmp_path, {"nulls": {"file_name": "sharegpt_user_assistant.json", "formatting": "sharegpt",
                                           "columns": {"messages": "conversations", "system": "system",
                                                       "tools": None, "videos": None, "audios": None},
                                           "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "user",
                                                    "assistant_tag": "assistant", "system_tag": "system"}},
                                 "named": {"file_name": "alpaca.json", "columns": {"response": "output",
                                                                                   "prompt": "instruction",
                                                                                   "kto_tag": "label"}}})
    report = load_dataset(info, options=DatasetOptions(entry="nulls"))
    assert report.problems == [] and _read(report) == EXPECTED["sharegpt"]
    assert "tools" not in report.layout.columns
    with pytest.raises(ValueError, match=r"entry 'named', columns.kto_tag: KTO feedback labels .* are not "
                                         r"supported; leave it out or set it to null \(not read\)$"):
        load_dataset(info, options=DatasetOptions(entry="named"))
    params = Params(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"tools": None, "chosen": None})
    report = load_dataset(params.dataset_path, options=params.dataset_options)
    assert _read(report) == EXPECTED["alpaca"] and "tools" not in report.layout.columns
    with pytest.raises(ParameterError, match=re.escape("dataset_columns['videos']: videos (hyport trains on text "
                                                       "and images) are not supported; leave it out or set it to "
                                                       "None (not read)")):
        Params(dataset_path=str(DATA / "alpaca.json"), dataset_columns={"videos": "clip"})


def test_mixed_entries_and_a_data_file_given_with_dataset_say_the_fix():
    """Review C9: LLaMA-Factory's ``dataset: a,b``, and dataset_path naming the data itself."""
    said = ("dataset='calc_alpaca,guide_chat': hyport trains one dataset_info.json entry per run (LLaMA-Factory's "
            "comma-separated list mixes several); name them one at a time (dataset='calc_alpaca', then "
            "dataset='guide_chat')")
    with pytest.raises(ValueError) as caught:
        load_dataset(DATA, options=DatasetOptions(entry="calc_alpaca,guide_chat"))
    assert str(caught.value) == said
    with pytest.raises(ParameterError, match=re.escape(said)):
        Params(dataset_path=str(DATA), dataset="calc_alpaca,guide_chat")
    with pytest.raises(ValueError) as caught:
        load_dataset(DATA / "alpaca.json", options=DatasetOptions(entry="calc_alpaca"))
    text = str(caught.value)
    assert text.startswith(f"{DATA / 'alpaca.json'}: a JSON list (records, not a dataset_info.json's named "
                           "entries); with dataset='calc_alpaca' set, dataset_path names the dataset_info.json (or "
                           "its folder)") and "without dataset, dataset_path is read as the data itself" in text
    assert "\n" not in text


@pytest.mark.parametrize("name, text", [("rows.json", "instruction,output\nWhat is 2+2?,4\nName a fruit.,apple\n"),
                                        ("rows.jsonl", "- instruction: q\n  output: a\n")])
def test_a_file_with_no_json_line_is_one_error_naming_the_file(tmp_path, name, text):
    """Review C11: CSV or YAML under a JSON name is one line, not one problem per line."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError) as caught:
        load_dataset(tmp_path / name)
    message = str(caught.value)
    assert message.startswith(f"no line of dataset {tmp_path / name} is JSON (line 1: Expecting value, column 1): "
                              "is it CSV or YAML?") and "\n" not in message


def test_lines_that_are_not_json_stay_problems_when_another_line_is(tmp_path):
    path = tmp_path / "some.jsonl"
    path.write_text("instruction,output\n" + json.dumps(ALPACA[0]) + "\nq,a\n")
    report = load_dataset(path)
    assert [str(p) for p in report.problems] == ["record 0, line 1: not JSON (Expecting value; column 1)",
                                                 "record 2, line 3: not JSON (Expecting value; column 1)"]
    assert [r.index for r in report.records] == [1]


def test_the_turns_column_of_the_other_format_is_named_when_the_one_read_is_missing(tmp_path):
    messages = write_records(MESSAGES[:1], tmp_path / "m.json")
    (problem,) = load_dataset(messages, options=DatasetOptions(format="sharegpt")).problems
    assert str(problem).endswith("conversations: missing (the record has 'messages': the openai format?)")
    sharegpt = write_records(SHAREGPT[:1], tmp_path / "s.json")
    (problem,) = load_dataset(sharegpt, options=DatasetOptions(format="openai")).problems
    assert str(problem).endswith("messages: missing (the record has 'conversations': the sharegpt format?)")


def test_when_no_record_shows_both_role_tags_each_is_named_in_what_its_column_suggests(tmp_path):
    """Review C1: with no record to decide, the turns column (and the tags shown) still say the
    format; every record is then named as its own problem, not one error for the file."""
    one_sided = {"conversations": [{"from": "user", "value": "q"}]}
    report = load_dataset(write_records([one_sided, {"conversations": []}, one_sided], tmp_path / "a.json"))
    assert report.layout.note() == ("guessed from record 0 ('conversations' holds turns with 'from' tags; no record "
                                    "shows both a user and an assistant tag): sharegpt (conversations; from/value; "
                                    "user/gpt)")
    assert [str(p) for p in report.problems] == [
        "record 0, conversations[0]: the last turn is 'user': there is no answer to learn",
        "record 1, conversations: must be a non-empty list of turns",
        "record 2, conversations[0]: the last turn is 'user': there is no answer to learn"]
