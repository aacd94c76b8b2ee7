"""Everything checked before a training process starts (hyport_lib/train/preflight.py): the
rendezvous, the output folder, the model, the data, the resume point, LoRA targets, cards and
memory, each refused in one line naming the parameter, and nothing written by the plan."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
from pathlib import Path

import pytest

from hyport_lib.results import CHECKPOINT_MARKER
from hyport_lib import backend
from hyport_lib.backend import get_backend
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.train import output_dir
from hyport_lib.train.dataset import DatasetError
from hyport_lib.train.params import Params, SAMPLE_DATASETS as DATA
from hyport_lib.train.preflight import prepare

from .test_dataset_formats import ALPACA, write_records
from .test_dataset_info import _info_copy
from .test_output_dir import _checkpoint


def test_taken_port_and_multi_node_without_port_are_refused(tmp_path):
    from hyport_lib.train.preflight import rendezvous_port

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"master_port={taken} is already taken"):
            rendezvous_port(Params(master_port=taken))
    assert rendezvous_port(Params()) > 0


def test_a_master_addr_that_does_not_resolve_is_refused(tmp_path):
    # an address that does not resolve would make torchrun retry for ever
    with pytest.raises(ValueError, match="master_addr='no.such.host.invalid' does not resolve"):
        prepare(Params(master_addr="no.such.host.invalid", output_dir=str(tmp_path / "a")), get_backend("cpu"))


def test_skip_bad_records_plans_without_them_and_the_plan_says_its_precision(tmp_path, monkeypatch):
    from hyport_lib.train.smoke_data import write_smoke_dataset

    smoke = write_smoke_dataset(tmp_path / "data")
    records = json.loads(smoke.read_text())
    records[3]["conversations"] = []
    smoke.write_text(json.dumps(records))
    cpuinfo = tmp_path / "cpuinfo"  # a CPU without native bf16: auto plans float32 and says why
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    monkeypatch.setattr(backend, "CPUINFO_PATH", str(cpuinfo))
    plan = prepare(Params(dataset_path=str(smoke), output_dir=str(tmp_path / "out"),
                          skip_bad_records=True), get_backend("cpu"))
    assert plan.precision == "fp32" and plan.deepspeed_json["bf16"]["enabled"] is False
    assert plan.precision_reason.startswith("float32 (auto): this CPU has no native bf16 (no AMX, no AVX512-BF16")
    assert plan.skip_records == [3] and plan.dataset["samples"] == 13
    assert any("1 bad record skipped" in note for note in plan.notes)
    assert plan.deepspeed_json["zero_optimization"]["stage"] == 2
    assert plan.worker_spec()["skip_records"] == [3]
    assert "final weights: shards of at most 300KB (max_shard_size='auto': the embedded tiny model" in \
        "\n".join(plan.notes)  # said in the plan, which the record keeps
    assert not (tmp_path / "out").exists()  # written by the launch, under the folder's lock


def test_unwritable_output_dir_and_missing_model_are_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="output_dir="):
        prepare(Params(output_dir=str(blocker / "sub")), get_backend("cpu"))
    with pytest.raises(ValueError, match="model_path=./no/such/model.: no such folder"):
        prepare(Params(model_path="/no/such/model", output_dir=str(tmp_path / "o")),
                get_backend("cpu"))


@pytest.mark.slow
def test_the_npu_branch_plans_hccl_tnd_attention_and_refuses_busy_cards(
        fake_npu, npu_smi_sample, monkeypatch, tmp_path):
    """On an Ascend host (the torch_npu double): packed runs use the fused NPU attention,
    bf16 is chosen, the workers init hccl, and a card another process holds stops the
    launch before anything starts."""
    from hyport_lib.train.worker import init_distributed  # noqa: F401 (imports on the double)

    data = Path(__file__).parents[1] / "data" / "npu_smi"
    npu = get_backend("npu")
    assert npu.dist_backend == "hccl"
    npu_smi_sample((data / "no_running_processes.txt").read_text())
    plan = prepare(Params(output_dir=str(tmp_path / "out"), num_cards=2), npu)
    assert (plan.attn_implementation, plan.attention_backend) == ("hyport_npu_fused", "npu")
    assert plan.precision == "bf16" and plan.nproc_per_node == 2
    assert plan.precision_reason == "bf16 (auto): the NPU (Ascend910B3) computes bf16 natively"
    assert "torch_adam" not in plan.deepspeed_json["optimizer"]["params"]
    npu_smi_sample((data / "910b_24x_classic.txt").read_text())
    with pytest.raises(RuntimeError, match="busy cards, training not started: card 1: card busy: pid 576489"):
        prepare(Params(output_dir=str(tmp_path / "out2"), num_cards=2), npu)
    with pytest.raises(ValueError, match="num_cards=9: only 8"):
        prepare(Params(output_dir=str(tmp_path / "out3"), num_cards=9), npu)


def test_lora_targets_that_name_no_layer_are_refused_before_launch(tmp_path):
    with pytest.raises(ValueError, match="lora_target='qkv_proj': no layer"):
        prepare(Params(finetuning_type="lora", lora_target="qkv_proj",
                       output_dir=str(tmp_path / "lora")), get_backend("cpu"))


def test_lora_without_peft_is_named_before_launch(tmp_path, monkeypatch):
    # named as such, not a ModuleNotFoundError in a rank
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "peft" else real_find_spec(name, *a))
    with pytest.raises(ValueError, match="finetuning_type='lora' needs peft"):
        prepare(Params(finetuning_type="lora", output_dir=str(tmp_path / "lora2")), get_backend("cpu"))


def test_every_problem_of_a_big_bad_dataset_is_in_the_error_and_no_folder_is_made(tmp_path):
    # every problem of a big bad dataset is in the error, the first 50 in its lines; no file
    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"id": f"r{i}", "conversations": []} for i in range(60)]))
    with pytest.raises(DatasetError) as info:
        prepare(Params(dataset_path=str(many), output_dir=str(tmp_path / "many-out")),
                get_backend("cpu"))
    assert len(info.value.report.problems) == 60 and len(info.value.details) == 51
    assert info.value.details[-1].startswith("... and 10 more")
    assert not (tmp_path / "many-out").exists()


def test_zero3_on_two_processes_needs_an_image_in_every_training_row(tmp_path):
    # ZeRO-3 on two processes with text-only and image records would abort in DeepSpeed
    cpu = get_backend("cpu")
    with pytest.raises(ValueError, match="training rows hold no image.*zero_stage=3"):
        prepare(Params(zero_stage=3, num_cards=2, packing=False, output_dir=str(tmp_path / "z3")), cpu)
    prepare(Params(zero_stage=3, num_cards=2, output_dir=str(tmp_path / "z3p")), cpu)  # packed: all rows have images


def test_resuming_at_or_past_max_steps_is_refused(tmp_path):
    # resuming at or past max_steps trains nothing
    out = tmp_path / "run"
    _checkpoint(out, 4)
    with pytest.raises(ValueError, match="step 4.*max_steps=3: nothing is left to train"):
        prepare(Params(resume_from="auto", max_steps=3, num_cards=2, output_dir=str(out)), get_backend("cpu"))


def test_the_worker_spec_holds_the_resume_folder_absolute_and_the_params_as_they_are(tmp_path, monkeypatch):
    out = tmp_path / "run"
    _checkpoint(out, 4)
    # a relative folder reaches the workers absolute
    monkeypatch.chdir(tmp_path)
    plan = prepare(Params(resume_from="run/checkpoint-4", max_steps=6, num_cards=2,
                          output_dir=str(tmp_path / "other")), get_backend("cpu"))
    assert plan.worker_spec()["resume_checkpoint"] == str(out / "checkpoint-4")
    # the workers rebuild the plan's parameters from the spec as they are (checked once, here)
    assert Params.trusted(json.loads(json.dumps(plan.worker_spec()))["params"]) == plan.params


def test_a_fresh_start_says_it_removes_the_earlier_checkpoints(tmp_path):
    out = tmp_path / "run"
    _checkpoint(out, 4)
    fresh = prepare(Params(resume_from="none", max_steps=6, num_cards=2, output_dir=str(out)), get_backend("cpu"))
    assert any("1 earlier checkpoint (checkpoint-4): they will be removed" in n for n in fresh.notes)


def test_a_model_folder_without_processor_files_is_named_before_launch(tmp_path):
    # a model folder without tokenizer / processor files: named before launch, no traceback
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(ensure_tiny_model() / name, bare / name)
    with pytest.raises(ValueError, match="model_path=.*bare.*processor / tokenizer does not load"):
        prepare(Params(model_path=str(bare), output_dir=str(tmp_path / "o1"), num_cards=2), get_backend("cpu"))


def test_an_output_dir_that_is_the_model_folder_is_refused(tmp_path):
    # the final weights would overwrite the model being trained
    model = tmp_path / "model"
    shutil.copytree(ensure_tiny_model(), model)
    with pytest.raises(ValueError, match="output_dir=.* is the model folder"):
        prepare(Params(model_path=str(model), output_dir=str(model), num_cards=2), get_backend("cpu"))


def test_an_attention_no_rank_could_load_is_refused_before_torchrun(tmp_path):
    with pytest.raises(ValueError, match="attn_implementation='foo'"):
        prepare(Params(packing=False, attn_implementation="foo", output_dir=str(tmp_path / "o2"),
                       num_cards=2), get_backend("cpu"))


def test_resuming_an_older_checkpoint_removes_the_later_ones_only_when_allowed_and_says_so(tmp_path):
    cpu = get_backend("cpu")
    out = tmp_path / "run"
    for step in (4, 6, 8):
        _checkpoint(out, step)
    with pytest.raises(ValueError, match=r"2 later complete checkpoints \(checkpoint-6, checkpoint-8\).*"
                                         r"overwrite_output_dir=True"):
        prepare(Params(resume_from=str(out / "checkpoint-4"), max_steps=6, num_cards=2,
                       output_dir=str(out)), cpu)
    plan = prepare(Params(resume_from=str(out / "checkpoint-4"), max_steps=6, num_cards=2,
                          output_dir=str(out), overwrite_output_dir=True), cpu)
    assert any("2 later checkpoints in output_dir (checkpoint-6, checkpoint-8) will be removed" in n
               for n in plan.notes), plan.notes


def test_an_unreadable_marker_state_or_missing_rank_file_is_named_before_launch(tmp_path):
    out = tmp_path / "run"
    corrupt = _checkpoint(out, 2)
    (corrupt / CHECKPOINT_MARKER).write_text("{not json")
    state = _checkpoint(out, 4)
    (state / "trainer_state.json").write_text("[1, 2")
    ranks = _checkpoint(out, 6, states=False)
    (ranks / "global_step6").mkdir()
    (ranks / "global_step6" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"x")
    reasons = {c.step: c.why_incomplete for c in output_dir.list_checkpoints(out)}
    assert reasons[2].startswith("hyport_checkpoint.json is unreadable (JSONDecodeError")
    assert reasons[4].startswith("trainer_state.json is unreadable (JSONDecodeError")
    assert reasons[6] == "1 of 2 ranks' ZeRO optimizer states in global_step6/ (missing: rank 1)"
    with pytest.raises(ValueError, match=r"resume_from=.*checkpoint-6.*incomplete checkpoint \(1 of 2 ranks'"):
        output_dir.resolve_resume(str(ranks), out)
    (ranks / "global_step6" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"x")
    assert output_dir.newest_complete(out).step == 6


def test_overflow_drop_drops_too_long_records_and_counts_them(tmp_path):
    plan = prepare(Params(output_dir=str(tmp_path / "o"), overflow="drop", max_seq_len=40, num_cards=2),
                   get_backend("cpu", num_cards=2))
    assert plan.dataset["samples"] == 3
    assert any(n.startswith("overflow='drop': 11 records longer than max_seq_len=40 dropped") for n in plan.notes)
    # the bundled smoke set was checked from a private copy: the output folder is not made
    assert plan.bundled_dataset and plan.dataset_path == str(tmp_path / "o" / "smoke_data" / "smoke_data_packing.json")
    assert not (tmp_path / "o").exists()


def test_the_plan_refuses_a_locked_folder_without_taking_the_lock(tmp_path):
    import fcntl

    from hyport_lib.train.output_dir import OutputDirBusy, check_not_locked, lock_file

    out = tmp_path / "run"
    check_not_locked(out)  # no folder: nothing to refuse, and nothing made
    assert not out.exists()
    out.mkdir()
    with open(out / lock_file(0), "w", encoding="utf-8") as held:
        held.write("pid 1, started then\n")
        held.flush()
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputDirBusy, match=r"another hyport train is running into it \(pid 1, started then\)"):
            check_not_locked(out)
        check_not_locked(out, node_rank=1)  # another node of the same job locks its own file
    check_not_locked(out)  # released with the holder's file
    assert sorted(p.name for p in out.iterdir()) == [lock_file(0)]


def test_a_save_killed_half_way_is_resumed_past_and_named(tmp_path):
    """A save killed half-way (hyport's saving marker, no completion) is hyport's own: resumed past."""
    out = tmp_path / "run"
    _checkpoint(out, 2)
    killed = out / "checkpoint-4"  # a save killed half-way: hyport's marker, no completion
    killed.mkdir()
    (killed / output_dir.SAVING_MARKER).write_text("{}")
    plan = prepare(Params(max_steps=6, num_cards=2, output_dir=str(out)), get_backend("cpu", num_cards=2))
    assert plan.resume_checkpoint.endswith("checkpoint-2")
    assert any("checkpoint-4 (no hyport_checkpoint.json" in n for n in plan.notes), plan.notes


def test_the_plan_reckons_memory_from_the_models_parameters_and_the_run(tmp_path):
    """It assumed 1 GB per CPU rank whatever the model; now the memory model counts the
    tiny default (no safetensors headers: its empty model) item by item, on the host."""
    from hyport_lib.models.loading import build_empty_model

    plan = prepare(Params(output_dir=str(tmp_path / "out")), get_backend("cpu"))
    memory = plan.memory
    count = sum(p.numel() for p in build_empty_model(plan.model_path).parameters())
    assert memory.parameters == count and memory.shape_source.startswith("an empty ")
    assert memory.card_line == "" and memory.card_gib is None  # a CPU rank holds everything on the host
    assert memory.host_line.startswith("fits: ") and "host RAM (2 ranks x " in memory.host_line
    assert memory.setting.startswith(f"ZeRO-2, {plan.precision}, full, seq 512, micro-batch 1")
    rows = {row.what: row for row in memory.rows}
    assert {"optimizer states", "activations", "runtime"} <= set(rows) and {r.where for r in memory.rows} == {"host"}
    assert "/ 2 ranks (ZeRO-2)" in rows["optimizer states"].how
    assert not any(note.startswith("host RAM") for note in plan.notes)


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
    assert any(n.startswith("1 record carries a system prompt (messages[0].content), but ") and
               "refuses a system message (stand-in): each is put at the start of the record's first user turn"
               in n for n in plan.notes), plan.notes
