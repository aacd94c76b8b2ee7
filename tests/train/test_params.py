"""Stage 04's parameters (hyport_lib/train/params.py): the dataset parameters checked together,
the final weights' shard size by the model."""

from __future__ import annotations

import pytest

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.params import ParameterError
from hyport_lib.report.run_parameters import load_profile, resolve_parameters, resolve_profile
from hyport_lib.stages import discover_stages
from hyport_lib.train.params import AUTO, AUTO_SHARD_SIZE, TINY_MODEL_SHARD_SIZE, Params, SAMPLE_DATASETS as DATA


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


def _train_params_of_the_default_profile(**overrides) -> Params:
    """Stage 04's parameters as ``hyport report --profile default -p KEY=VALUE`` builds them."""
    stages = discover_stages()
    train = next(s for s in stages if s.name == "train")
    run = resolve_parameters(load_profile(resolve_profile("default")), overrides, stages)
    return Params.from_typed(run.for_stage(train))


def test_the_tiny_models_small_shards_are_the_tiny_models_only(zoo):
    tiny = _train_params_of_the_default_profile()
    assert tiny.max_shard_size == AUTO and tiny.shard_size == TINY_MODEL_SHARD_SIZE
    assert "the embedded tiny model" in tiny.shard_size_note()
    # a model the user brings is saved as the seed's was, never in hundreds of 300KB shards
    other = _train_params_of_the_default_profile(model_path=str(zoo["llama"]))
    assert other.shard_size == AUTO_SHARD_SIZE == "5GB"
    assert other.shard_size_note() == ("final weights: shards of at most 5GB (max_shard_size='auto': "
                                       "the seed's shard size)")
    # a size given applies to any model, and None is transformers' own default
    assert _train_params_of_the_default_profile(model_path=str(zoo["llama"]), max_shard_size="1MB").shard_size == "1MB"
    assert Params(max_shard_size=None).shard_size is None
    assert "transformers' default" in Params(max_shard_size=None).shard_size_note()
    # the tiny model given as its folder (what "tiny" resolves to) is the tiny model too
    assert Params.trusted({"model_path": str(ensure_tiny_model())}).shard_size == TINY_MODEL_SHARD_SIZE
    assert Params.trusted({"model_path": str(zoo["llama"])}).shard_size == AUTO_SHARD_SIZE  # no marker
    # the tiny model in auto's size: several shards and their index, for stage 05 to check
    folder = ensure_tiny_model(max_shard_size=tiny.shard_size)
    assert len(list(folder.glob("*.safetensors"))) >= 2 and (folder / "model.safetensors.index.json").is_file()
