"""The parameters of a report run (hyport_lib/report/run_parameters.py): profiles, ``-p``
overrides typed by their declared types, paths made absolute, secret names dropped, and
each selected stage's Params and pre-run plan."""

from __future__ import annotations

import pytest

from hyport_lib.params import Field, ParameterError, Spec
from hyport_lib.report.run_parameters import (absolutize_paths, coerce_overrides, load_profile, make_plans,
                                              parse_overrides, plan_requests, resolve_parameters, resolve_profile,
                                              safe_parameters)
from hyport_lib.stages import discover_stages, select_stages


def _fields(**kinds) -> dict:
    """name -> Field of that kind ("path" for a path text), None default."""
    return {name: Field(name, "str" if kind == "path" else kind, True, None,
                        Spec(doc="", path="any" if kind == "path" else None,
                             not_paths=("tiny", "auto", "none"), hub_id=name == "model_path"))
            for name, kind in kinds.items()}


def test_overrides_are_typed_by_the_declared_types():
    raw = parse_overrides(["max_steps=20", "device=cpu", "flag=true", "x=", "l=[1, 2]",
                           "single_prompt=Translate: hello", "answer=yes", "model_path=0755"])
    assert raw["single_prompt"] == "Translate: hello"
    fields = _fields(max_steps="int", device="str", flag="bool", x="str", l="list",
                     single_prompt="str", answer="str", model_path="path")
    typed = coerce_overrides(raw, fields)
    # text stays text (a prompt "yes", a folder "0755"); lists, numbers and flags are
    # typed as YAML types them; what they must be is checked by their field
    assert typed == {"max_steps": 20, "device": "cpu", "flag": True, "x": "", "l": [1, 2],
                     "single_prompt": "Translate: hello", "answer": "yes", "model_path": "0755"}
    with pytest.raises(ValueError, match="max_steps"):
        coerce_overrides({"max_steps": "[unclosed"}, _fields(max_steps="list"))
    with pytest.raises(ValueError, match="max_steps"):
        fields["max_steps"].convert("[unclosed")
    with pytest.raises(ValueError, match="'oops'"):
        parse_overrides(["oops"])
    with pytest.raises(ValueError, match="'1x=2'"):
        parse_overrides(["1x=2"])


def test_profiles_resolve_by_name_and_errors_name_the_file(tmp_path):
    assert resolve_profile("default").name == "default.yaml"
    assert load_profile(resolve_profile("ascend-910b-8card"))["num_cards"] == 8
    with pytest.raises(FileNotFoundError, match="nosuch"):
        resolve_profile("nosuch")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="bad.yaml"):
        load_profile(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [unclosed\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        load_profile(broken)
    twice = tmp_path / "twice.yaml"
    twice.write_text("device: cpu\ndevice: npu\n")
    with pytest.raises(ValueError, match="twice.yaml.*'device' given twice"):
        load_profile(twice)
    merged = tmp_path / "merged.yaml"  # YAML merge keys still work; overriding a merged key is no duplicate
    merged.write_text("base: &base {device: cpu, max_steps: 5}\ntrain:\n  <<: *base\n  device: npu\n")
    assert load_profile(merged)["train"] == {"device": "npu", "max_steps": 5}
    other = tmp_path / "profile.txt"  # another suffix: found and read, not "not found"
    other.write_text("num_cards: 3\n")
    assert load_profile(resolve_profile(str(other))) == {"num_cards": 3}


def test_seed_profile_matches_the_seed_case():
    seed = load_profile(resolve_profile("ascend-910b-8card"))
    assert seed["device"] == "npu" and seed["model_path"] == "/data/models/HY-Embodied-0.5"
    assert seed["max_steps"] is None and seed["save_steps"] == 100000
    assert seed["zero_stage"] == 2 and seed["precision"] == "bf16"
    assert seed["per_device_train_batch_size"] == 1 and seed["gradient_accumulation_steps"] == 1
    assert seed["gradient_checkpointing"] is True and seed["num_cards"] == 8


def test_relative_paths_are_made_absolute(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "cat.png").write_bytes(b"png")
    fields = _fields(code_path="path", model_path="path", n="int", image="path", log_dir="path", other="str",
                     dataset_path="path", deepspeed_config="path", resume_from="path", image_root="path",
                     weights_path="path")
    out = absolutize_paths({"code_path": "code", "model_path": "tiny", "n": 3, "image": "cat.png",
                            "log_dir": "not/yet", "other": "code"}, fields, tmp_path)
    assert out == {"code_path": str((tmp_path / "code").resolve()), "model_path": "tiny", "n": 3,
                   "image": str((tmp_path / "cat.png").resolve()),
                   "log_dir": str((tmp_path / "not/yet").resolve()), "other": "code"}
    # missing files are resolved where the user is (and named there when refused); names
    # that are no files stay; path values are never parsed as numbers
    more = absolutize_paths({"dataset_path": "mydata/train.json", "deepspeed_config": "ds.json",
                             "resume_from": "auto", "model_path": "org/model", "image_root": "imgs"},
                            fields, tmp_path)
    assert more == {"dataset_path": str(tmp_path / "mydata/train.json"), "deepspeed_config": str(tmp_path / "ds.json"),
                    "resume_from": "auto", "model_path": "org/model", "image_root": str(tmp_path / "imgs")}
    assert coerce_overrides({"weights_path": "2024", "n": "20"}, fields) == {"weights_path": "2024", "n": 20}


def test_parameters_named_for_tokens_are_kept_and_secret_ones_dropped():
    kept = safe_parameters({"max_new_tokens": 8, "hf_token": "x", "api_key": "y", "db_password": "z",
                            "OPENAI_APIKEY": "w", "tokenizer_path": "/t", "num_cards": 2})
    assert kept == {"max_new_tokens": 8, "tokenizer_path": "/t", "num_cards": 2}


def test_a_secret_parameter_name_in_any_spelling_is_dropped():
    # camelCase as much as snake_case; counting tokens is no secret
    assert safe_parameters({"hfToken": "a", "wandbApiKey": "b", "secretKey": "c", "max_new_tokens": 8}) \
        == {"max_new_tokens": 8}


def _any_path_fields(*names: str) -> dict:
    path = Spec(doc="", path="any")
    return {k: Field(k, "str", True, None, path) for k in names}


def test_a_tilde_is_the_home_folder_not_a_folder_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    merged = resolve_parameters({"model_path": "~/mymodel"}, {}, discover_stages(), base=tmp_path / "cwd").merged
    assert merged == {"model_path": str(tmp_path / "home" / "mymodel")}


def test_null_for_a_path_still_means_none():
    # -p key=null is the way to undo a profile's output_dir
    fields = _any_path_fields("output_dir", "weights_path", "log_dir")
    assert coerce_overrides({"output_dir": "null", "weights_path": "~", "log_dir": "2024"}, fields) == \
        {"output_dir": None, "weights_path": None, "log_dir": "2024"}


def test_zero_stage_2_0_is_stage_2_and_a_fraction_or_a_boolean_is_refused():
    stages = discover_stages()
    assert resolve_parameters({"zero_stage": 2.0}, {}, stages).merged["zero_stage"] == 2
    for bad in (2.5, True):
        with pytest.raises(ParameterError):
            resolve_parameters({"zero_stage": bad}, {}, stages)


@pytest.mark.parametrize("key, value", [("per_device_train_batch_size", 0), ("nnodes", 0),
                                        ("master_port", 99999), ("seed", -1)])
def test_an_out_of_range_training_value_is_refused_by_name(key, value):
    with pytest.raises(ParameterError, match=key):
        resolve_parameters({key: value}, {}, discover_stages())


def test_whether_a_file_exists_is_the_selected_stages_question_not_the_namespaces():
    merged = resolve_parameters({"image": "/nonexistent.png"}, {}, discover_stages()).merged
    assert merged["image"] == "/nonexistent.png"


def test_each_selected_stage_takes_the_typed_values_and_says_what_it_refuses():
    """The namespace takes model_path=None (stage 02 skips its model check then); each stage
    that needs a model says so, before any plan is made, in the words of its own Params."""
    stages = discover_stages()
    params = resolve_parameters({}, {"model_path": "null", "max_steps": "5", "image": "/nonexistent.png"}, stages)
    assert params.merged["max_steps"] == 5 and params.merged["model_path"] is None
    requests = {r.stage: r for r in plan_requests(params, select_stages(stages, ["01", "02", "03"]))}
    required = "model_path=None: a value is required (a non-empty text)"
    assert requests["environment"].refused == [f"01_environment: {required}"]
    assert requests["attention"].refused == [] and requests["attention"].values["model_path"] is None
    assert requests["inference"].refused == [f"03_inference: {required}",
                                             "03_inference: image='/nonexistent.png': no such file"]
    only_04 = plan_requests(params, select_stages(stages, ["04"]))[0]
    assert only_04.refused == [f"04_train: {required}"]
    assert make_plans([requests["environment"]]).refused == requests["environment"].refused  # said, not planned


def test_stage_05_paths_may_be_written_by_the_training_stage_of_the_same_run(tmp_path):
    """A weights_path that does not exist yet is fine when stage 04 runs first and it lies
    inside 04's output_dir; a fractional reload_timeout_s is a number, not a type error."""
    stages = discover_stages()
    out = tmp_path / "train-out"
    params = resolve_parameters({}, {"weights_path": str(out), "checkpoint_path": str(out / "checkpoint-20"),
                                     "output_dir": str(out), "reload_timeout_s": "0.5"}, stages)
    assert params.merged["reload_timeout_s"] == 0.5
    after_04 = {r.stage: r for r in plan_requests(params, select_stages(stages, ["04", "05"]))}
    assert sorted(after_04["weights"].left_to_the_run) == ["checkpoint_path", "weights_path"]
    assert make_plans([after_04["weights"]]).refused == []  # left to 05's own plan
    alone = {r.stage: r for r in plan_requests(params, select_stages(stages, ["05"]))}
    assert alone["weights"].left_to_the_run == []  # no stage 04: 05's plan sees them, and refuses
    assert any("weights_path=" in line and "no such" in line for line in make_plans([alone["weights"]]).refused)
    # the model before fine-tuning is never written by stage 04; nor is a folder outside its
    # output_dir, and without an output_dir no given path can be 04's (a new run folder)
    for given in ({"base_path": str(tmp_path / "bsae")},
                  {"weights_path": str(tmp_path / "elsewhere"), "checkpoint_path": str(tmp_path / "c"),
                   "output_dir": str(out)},
                  {"weights_path": str(tmp_path / "later"), "checkpoint_path": str(tmp_path / "c")}):
        requests = {r.stage: r for r in plan_requests(resolve_parameters({}, given, stages), stages)}
        assert requests["weights"].left_to_the_run == []
        key = next(iter(given))
        refused = make_plans([requests["weights"]]).refused
        assert any(f"{key}=" in line and "no such" in line for line in refused), refused


def test_a_path_a_stage_cannot_look_at_is_refused_before_the_run_not_an_internal_error(tmp_path):
    """The report builds each selected stage's Params in its own process: a dataset_path the
    system refuses to look up is a refusal naming the stage (it was one when the pre-run
    child built them), not an OSError that ends ``hyport report`` as an internal error."""
    stages = discover_stages()
    unreachable = str(tmp_path / ("a" * 300))
    request = plan_requests(resolve_parameters({}, {"dataset_path": unreachable}, stages),
                            select_stages(stages, ["04"]))[0]
    assert request.refused == [f"04_train: dataset_path={unreachable!r}: no such file"]


def test_a_later_stages_path_the_system_will_not_look_up_is_no_internal_error(tmp_path):
    """05's weights_path may be written by 04 of the same run; one the system refuses to look
    up (too long) is simply not there yet, never an OSError that ends the report."""
    stages = discover_stages()
    unreachable = str(tmp_path / ("a" * 300))
    requests = plan_requests(resolve_parameters({}, {"weights_path": unreachable}, stages),
                             select_stages(stages, ["04", "05"]))
    assert [r.stage for r in requests] == ["train", "weights"]
    # outside 04's output folder, so not left to the run: judged now, in its one line
    refused = requests[1].refused
    assert requests[1].left_to_the_run == [] and refused and all(line.startswith("05_weights: ") for line in refused)


def test_a_plan_too_big_for_the_host_is_said_as_memory_not_as_a_wrong_parameter(tmp_path, monkeypatch):
    """A 7 B checkpoint (sparse: headers only) in float32 on a 23.5 GiB CPU host: stages 03 and
    04 refuse before anything loads, each with its figures, as memory; stage 05's reload too."""
    from hyport_lib.report.run_parameters import PreRunRefused
    from tests.real_size import write_sparse_checkpoint

    folder = write_sparse_checkpoint(tmp_path / "Qwen2.5-7B", tokenizer=True)
    monkeypatch.setattr("hyport_lib.memory.capacity.host_ram", lambda: (int(23.5 * 2 ** 30), "test host"))
    stages = discover_stages()
    params = resolve_parameters({}, {"device": "cpu", "model_path": str(folder), "dtype": "float32",
                                     "precision": "fp32", "weights_path": str(folder), "logits_parity": "false",
                                     "consolidate_zero": "false",
                                     "output_dir": str(tmp_path / "out"), "log_dir": str(tmp_path / "logs")}, stages)
    found = make_plans(plan_requests(params, select_stages(stages, ["03", "04", "05"])))
    assert found.refused == [] and len(found.memory) == 3, found
    inference, train, weights = found.memory
    # two CPU workers of 7.6 B in bf16 would not fit either: one, in bf16
    assert inference.startswith("03_inference: num_cards: Qwen2.5-7B (7.62 B parameters) does not fit for "
                                "inference, fp32")
    assert inference.endswith("nearest plan that fits: 1 process a host instead of 2 + dtype=bfloat16 "
                              "(16.1 of 23.5 GiB host RAM)")
    assert "> the host's 23.5 GiB (test host); nearest plan that fits: " in inference
    assert train.startswith("04_train: ") and "does not fit for ZeRO-2, fp32" in train and "GiB of host RAM" in train
    assert weights.startswith("05_weights: dtype: ") and "nearest plan that fits: dtype=bfloat16" in weights
    said = PreRunRefused(found.refused, found.memory)
    assert str(said).startswith("3 plans do not fit in memory: 03_inference: num_cards: ")
    assert "parameters are wrong" not in str(said) and said.details == found.memory
