"""LLaMA-Factory's dataset_info.json (hyport_lib/train/dataset_info.py): an entry read as
LLaMA-Factory reads it, and one hyport cannot use refused in one line naming the entry and field."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train.dataset import load_dataset
from hyport_lib.train.dataset_formats import DatasetOptions
from hyport_lib.train.dataset_info import INFO_FILE, read_entry
from hyport_lib.train.params import Params, SAMPLE_DATASETS as DATA

from .test_dataset_formats import EXPECTED, _read


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


def test_an_entrys_file_that_is_a_fifo_or_holds_a_nul_byte_is_named_as_such(tmp_path):
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"piped": {"file_name": "pipe.json"},
                                                            "nul": {"file_name": "a\0b.json"}}))
    with pytest.raises(ValueError, match=r"entry 'piped', file_name: 'pipe.json' \(.*\): a FIFO \(named pipe\), "
                                         "not a regular file"):
        load_dataset(tmp_path, options=DatasetOptions(entry="piped"))
    with pytest.raises(ValueError, match=r"entry 'nul', file_name: 'a\\x00b.json': not a usable path \(a NUL byte\)"):
        load_dataset(tmp_path, options=DatasetOptions(entry="nul"))
    with pytest.raises(ValueError, match="pipe.json'?: a FIFO"):  # given directly: never opened, never waited on
        load_dataset(tmp_path / "pipe.json")


def test_an_entry_resolves_its_files_and_reads_its_names_as_llama_factory_joins_them():
    """``read_entry`` alone: the json's path and the data file made absolute, and an entry with
    ``tags`` has only the tags it names (the others None, as ``DatasetAttr.join`` leaves them)."""
    entry = read_entry(DATA, "guide_chat")
    assert entry.info_path == (DATA / INFO_FILE).resolve() and entry.info_path.is_absolute()
    assert entry.data_file == (DATA / "sharegpt_user_assistant.json").resolve()
    assert (entry.layout.format, entry.layout.columns["messages"]) == ("sharegpt", "conversations")
    assert (entry.layout.tags["user_tag"], entry.layout.tags["observation_tag"]) == ("user", None)
    assert entry.layout.chosen_by == "dataset_info.json entry 'guide_chat'"
