"""Every stage's parameter checks, one table (hyport_lib/params.py and each stage's params.py).

A bad value is refused where the parameter is declared, by a ``ParameterError`` of one line
that starts with ``name=value:`` and says what was expected; text from the command line or
papermill is parsed to the declared type. Checks that need files (datasets, checkpoints)
stay with their stage's tests.
"""

from __future__ import annotations

import pytest

from hyport_lib.attention.params import Params as AttentionParams
from hyport_lib.environment.params import Params as EnvironmentParams
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.params import ParameterError
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.weights.params import Params as WeightsParams

CPU_ENVIRONMENT = dict(device="cpu", check_ports=False)

BAD = [
    # stage 01
    (EnvironmentParams, dict(CPU_ENVIRONMENT, num_cards=0), "num_cards=0: expected an integer >= 1"),
    (EnvironmentParams, dict(CPU_ENVIRONMENT, num_cards=-1), "num_cards=-1: expected an integer >= 1"),
    # stage 02
    (AttentionParams, dict(dtypes=["float64"]),
     "dtypes=['float64']: expected a non-empty list of float16, bfloat16, float32"),
    (AttentionParams, dict(dtypes=[]), "dtypes=[]: expected a non-empty list"),
    (AttentionParams, dict(dtypes=["float32", "float32"]),
     "dtypes=['float32', 'float32']: expected a non-empty list of float16, bfloat16, float32, each once"),
    (AttentionParams, dict(dtypes="float32"), "dtypes='float32': expected a list"),
    (AttentionParams, dict(flash_attn_version="latest"), "flash_attn_version='latest': expected a flash-attn version"),
    (AttentionParams, dict(seed=-1), "seed=-1: expected an integer >= 0"),
    (AttentionParams, dict(code_path="/no/such/code"), "code_path='/no/such/code': no such file or folder"),
    # stage 03
    (InferenceParams, dict(max_new_tokens="abc"), "max_new_tokens='abc': expected an integer >= 1"),
    (InferenceParams, dict(max_new_tokens=2.9), "max_new_tokens=2.9: expected an integer, not a fraction"),
    (InferenceParams, dict(max_new_tokens=True), "max_new_tokens=True: expected an integer >= 1"),
    (InferenceParams, dict(max_new_tokens=0), "max_new_tokens=0: expected an integer >= 1"),
    (InferenceParams, dict(max_new_tokens=None), "max_new_tokens=None: a value is required"),
    (InferenceParams, dict(warmup_runs=-1), "warmup_runs=-1: expected an integer >= 0"),
    (InferenceParams, dict(dtype="fp8"), "dtype='fp8': expected one of"),
    (InferenceParams, dict(model_path=" "), "model_path=' ': expected a non-empty text"),
    (InferenceParams, dict(trust_remote_code="sure"), "trust_remote_code='sure': expected true or false"),
    (InferenceParams, dict(enable_thinking=2), "enable_thinking=2: expected true or false"),
    (InferenceParams, dict(infer_timeout_s="nan"), "infer_timeout_s='nan': expected a finite number"),
    (InferenceParams, dict(infer_timeout_s=0), "infer_timeout_s=0: expected a number > 0"),
    (InferenceParams, dict(image="/nonexistent.png"), "image='/nonexistent.png': no such file"),
    (InferenceParams, dict(batch_prompts=[]), "batch_prompts=[]: expected at least one"),
    (InferenceParams, dict(batch_prompts=[["a", True], ["b", "maybe"]]), "batch_prompts[1]='maybe': expected true/false"),
    (InferenceParams, dict(batch_prompts=[{"text": "a", "image": None}]), "batch_prompts[0]=None: expected true/false"),
    (InferenceParams, dict(batch_prompts=[["", True]]), "batch_prompts[0]=['', True]: expected a non-empty text"),
    (InferenceParams, dict(batch_prompts="Describe"), "batch_prompts='Describe': expected a list"),
    # stage 04
    (TrainParams, dict(max_steps=0), "max_steps=0: expected an integer >= 1"),
    (TrainParams, dict(zero_stage=1), "zero_stage=1: expected one of 0, 2, 3"),
    (TrainParams, dict(finetuning_type="qlora"), "finetuning_type='qlora': expected one of 'full', 'lora'"),
    (TrainParams, dict(precision="fp8"), "precision='fp8': expected one of"),
    (TrainParams, dict(packing="maybe"), "packing='maybe': expected true or false"),
    (TrainParams, dict(learning_rate="-1"), "learning_rate='-1': expected a number > 0"),
    (TrainParams, dict(max_seq_len=4), "max_seq_len=4: expected an integer >= 16"),
    (TrainParams, dict(node_rank=1), "node_rank=1: must be below nnodes=1"),
    (TrainParams, dict(train_timeout_s="nan"), "train_timeout_s='nan': expected a finite number"),
    (TrainParams, dict(run_name="a/b"), "run_name='a/b': a name without '/'"),
    (TrainParams, dict(num_train_epochs=0), "num_train_epochs=0: expected a number > 0"),
    (TrainParams, dict(lr_scheduler_type="bogus"), "lr_scheduler_type='bogus': expected one of"),
    (TrainParams, dict(lr_scheduler_type="cosine_with_min_lr"), "lr_scheduler_type='cosine_with_min_lr': expected one of"),
    (TrainParams, dict(max_shard_size="5XB"), "max_shard_size='5XB': expected a size"),
    # ports past 65535 and negative loss scales never reach a socket or DeepSpeed
    (TrainParams, dict(master_port=70000), "master_port=70000: expected an integer >= 0 and <= 65535"),
    (TrainParams, dict(loss_scale=-1), "loss_scale=-1: expected a number >= 0"),
    # rules across parameters, checked with the parameters
    (TrainParams, dict(offload_optimizer=True, zero_stage=0), "offload_optimizer=True: needs zero_stage 2 or 3"),
    # a loss scale DeepSpeed would ignore is refused, not silently dropped
    (TrainParams, dict(loss_scale=4096), "loss_scale=4096: a loss scale applies to precision='fp16' only"),
    (TrainParams, dict(lora_target=","), "lora_target=',': names no module"),
    (TrainParams, dict(nnodes=2, master_port=0, node_rank=1),
     "master_port=0: with nnodes=2 give every node the same master_port"),
    # stage 05
    (WeightsParams, dict(dtype="fp8"), "dtype='fp8': expected one of 'auto', 'float32'"),
    (WeightsParams, dict(reload_timeout_s=0), "reload_timeout_s=0: expected a number > 0"),
    (WeightsParams, dict(checksum="md5"), "checksum='md5': expected one of 'xxh3', 'crc32', 'sha256'"),
    # never written by stage 04: refused where it is declared
    (WeightsParams, dict(base_path="/no/such/base"), "base_path='/no/such/base': no such file or folder"),
]


@pytest.mark.parametrize("cls, values, said", BAD,
                         ids=[f"{c.__module__.split('.')[1]}-{'-'.join(v)}-{i}" for i, (c, v, _) in enumerate(BAD)])
def test_a_bad_value_is_refused_in_one_line_naming_it(cls, values, said):
    with pytest.raises(ParameterError) as info:
        cls(**values)
    message = str(info.value)
    assert message.startswith(said) and "\n" not in message, message


GOOD = [
    (TrainParams, dict(max_steps="20", packing="false", learning_rate="1e-3", zero_stage="3"),
     dict(max_steps=20, packing=False, learning_rate=1e-3, zero_stage=3)),
    (TrainParams, dict(offload_optimizer=True, zero_stage=2), dict(offload_optimizer=True)),
    (TrainParams, dict(loss_scale=4096, precision="fp16"), dict(loss_scale=4096.0)),
    (InferenceParams, dict(max_new_tokens=" 16 ", warmup_runs=0.0, infer_timeout_s="1.5",
                           trust_remote_code="false", enable_thinking="YES"),
     dict(max_new_tokens=16, warmup_runs=0, infer_timeout_s=1.5, trust_remote_code=False, enable_thinking=True)),
    # prompt flags may be words, and a bare text is a text-only prompt
    (InferenceParams, dict(batch_prompts=[["a", "false"], ["b", "True"], ["c", 1], ["d", 0], ["e", "no"],
                                          {"text": "f", "image": "yes"}, "g"]),
     dict(batch_prompts=[["a", False], ["b", True], ["c", True], ["d", False], ["e", False],
                         ["f", True], ["g", False]])),
    (WeightsParams, dict(), dict(checksum="xxh3")),
]


@pytest.mark.parametrize("cls, values, parsed", GOOD,
                         ids=[f"{c.__module__.split('.')[1]}-{i}" for i, (c, _, _) in enumerate(GOOD)])
def test_a_good_value_is_parsed_to_its_type(cls, values, parsed):
    params = cls(**values)
    got = {name: getattr(params, name) for name in parsed}
    assert got == parsed
    assert all(type(got[name]) is type(value) for name, value in parsed.items()), got


def test_every_broken_rule_is_named_not_only_the_first():
    with pytest.raises(ParameterError) as info:
        TrainParams(node_rank=3, offload_optimizer=True, zero_stage=0)
    assert len(info.value.details) == 2 and "node_rank=3" in info.value.details[0]


# --------------------------------------------------------------------------- sections
def test_the_sections_are_shared_by_help_and_the_docs_table():
    import argparse

    from hyport_lib.params import GROUPS, add_arguments, markdown_table, param

    parser = argparse.ArgumentParser(prog="hyport train")
    add_arguments(parser, TrainParams)
    text = parser.format_help()
    text = text[text.index("options:"):]  # past the usage line
    assert text.index("--max-steps") < text.index("Data:") < text.index("Several hosts:") < text.index("--nnodes")
    table = markdown_table(TrainParams)
    assert table.startswith("**Main**") and table.index("**LoRA**") < table.index("| `lora_rank` |")
    assert [g for g in GROUPS if g and f"**{g}**" in table] == ["Data", "Training", "LoRA", "DeepSpeed / memory",
                                                                  "Several hosts", "Advanced"]
    with pytest.raises(TypeError, match="group='Trainig'"):
        param(1, "a typo in a section's name is refused at import", group="Trainig")
