"""Stage 04's parameters (hyport_lib/train/params.py): the dataset parameters checked together."""

from __future__ import annotations

import pytest

from hyport_lib.params import ParameterError
from hyport_lib.train.params import Params, SAMPLE_DATASETS as DATA


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


def test_a_dataset_path_that_cannot_be_looked_at_is_refused_in_one_line(tmp_path):
    """A path the system refuses to look up (a name longer than the file system allows; for
    a user who may not enter its folder, permission denied) is no such file, as every
    ``must_exist`` path says it: a refusal in one line from the notebook, the command line
    and the report, never an OSError out of the check."""
    unreachable = str(tmp_path / ("a" * 300))
    with pytest.raises(ParameterError) as caught:
        Params(dataset_path=unreachable)
    assert str(caught.value) == f"dataset_path={unreachable!r}: no such file"
