"""The memory model on a real-size (sparse) checkpoint: its shape from headers, DeepSpeed's
own accounting of ZeRO's states, LoRA's count against peft's, and the refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hyport_lib.memory.fit import Capacity, DoesNotFit, fit, require_fit
from hyport_lib.memory.model import Workload, estimate, lora_parameters
from hyport_lib.memory.shape import read_model_shape
from tests.real_size import parameter_count, qwen2_config, write_sparse_checkpoint

GIB = 2 ** 30
CARD_64 = Capacity(64 * GIB, "910B3", 2048 * GIB, "test host")


@pytest.fixture(scope="module")
def seven_b(tmp_path_factory):
    return read_model_shape(write_sparse_checkpoint(tmp_path_factory.mktemp("q7b") / "Qwen2.5-7B"))


def _states_on_card(shape, workload) -> int:
    """The card's model states alone (DeepSpeed's estimators leave activations out)."""
    est = estimate(shape, workload)
    return sum(i.bytes for i in est.items if i.where == "card"
               and not i.what.startswith(("activations", "logits", "runtime")))


def test_the_shape_comes_from_headers_and_config(seven_b):
    assert seven_b.parameters == parameter_count(qwen2_config("7b")) == 7_615_616_512
    assert seven_b.checkpoint_bytes == 2 * seven_b.parameters and seven_b.stored_dtype == "BF16"
    assert (seven_b.layers, seven_b.hidden, seven_b.kv_heads, seven_b.head_dim) == (28, 3584, 4, 128)
    assert seven_b.largest_module_parameters == 152064 * 3584  # the embedding (lm_head the same)


@pytest.mark.parametrize("zero,offload", [(2, False), (2, True), (3, False), (3, True)])
def test_zero_states_agree_with_deepspeeds_estimators(seven_b, zero, offload):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    workload = Workload("training", "npu", "bfloat16", world_size=8, ranks_per_host=8, zero_stage=zero,
                        offload_optimizer=offload)
    if zero == 2:
        _, card = estimate_zero2_model_states_mem_needs(seven_b.parameters, 8, 1, cpu_offload=offload)
    else:
        _, card, _ = estimate_zero3_model_states_mem_needs(seven_b.parameters, seven_b.largest_module_parameters,
                                                           8, 1, cpu_offload=offload, cpu_offload_params=False)
    ours = _states_on_card(seven_b, workload)
    assert abs(ours - card) / card < 0.10, (ours / GIB, card / GIB)
    if not offload:  # the figures: 30.14 and 17.99 GiB a card
        assert round(card / GIB, 2) == {2: 30.14, 3: 17.99}[zero]


def test_lora_count_matches_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**qwen2_config("0.5b"), "hidden_size": 64, "intermediate_size": 96,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
                            "vocab_size": 128})
    from hyport_lib.memory.shape import shape_of_model

    model = Qwen2ForCausalLM(config)
    shape = shape_of_model(model, name="small", source="test")
    for targets in (("q_proj", "v_proj"), ("all",)):
        peft_targets = "all-linear" if targets == ("all",) else list(targets)
        wrapped = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=4, target_modules=peft_targets))
        trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
        assert lora_parameters(shape, 4, targets) == trainable, targets


def test_a_plan_that_does_not_fit_names_figures_and_the_nearest_that_does(seven_b):
    zero0 = Workload("training", "npu", "bfloat16", world_size=8, ranks_per_host=8, zero_stage=0, sequence=2048)
    with pytest.raises(DoesNotFit) as raised:
        require_fit(seven_b, zero0, CARD_64)
    line = str(raised.value)
    assert "\n" not in line and line.startswith("zero_stage: Qwen2.5-7B (7.62 B parameters) does not fit")
    assert "> the card's 64.0 GiB (910B3)" in line
    assert "nearest plan that fits: zero_stage=3" in line  # ZeRO-0 keeps every state whole
    nearest = raised.value.fit.nearest.fit
    assert nearest.fits and nearest.estimate.workload.zero_stage == 3
    assert fit(seven_b, replace(zero0, zero_stage=2), CARD_64).card_line().startswith("fits: 48.5 of 64.0 GiB per card")


def test_a_small_host_is_told_fewer_processes(seven_b):
    small = Capacity(64 * GIB, "910B3", 23 * GIB, "the container's memory limit")
    workload = Workload("inference", "npu", "bfloat16", world_size=8, ranks_per_host=8, new_tokens=128)
    found = fit(seven_b, workload, small)
    assert found.host_fits is False and found.card_fits is True
    assert "nearest plan that fits: 2 processes a host instead of 8 (" in found.refusal()
    assert found.parameter_to_change() == "num_cards"
    assert found.nearest.fit.estimate.host_bytes <= small.host_bytes


def test_cpu_plans_put_everything_in_host_memory(seven_b):
    workload = Workload("training", "cpu", "float32", world_size=2, ranks_per_host=2, zero_stage=2)
    found = fit(seven_b, workload, Capacity(None, "unknown", 23 * GIB, "test"))
    assert found.estimate.card_bytes == 0 and found.card_fits is None
    # 28 GiB of float32 weights alone: no change or pair of changes makes room on 23 GiB
    assert found.host_fits is False and "no plan hyport knows fits" in found.refusal()
    # bf16 halves what float32 holds, every item but the fp32 states
    half = estimate(seven_b, replace(workload, dtype="bfloat16"))
    assert half.host_bytes < found.estimate.host_bytes


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_activations_cover_what_a_real_qwen2_saves_for_backward(dtype):
    """Every tensor autograd keeps (saved_tensors_hooks, storages counted once, weights left
    out) against the activations and logits items: above, by under 30 %."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from hyport_lib.memory.shape import shape_of_model

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=500, tie_word_embeddings=False, attn_implementation="sdpa")
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype)).train()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def keep(tensor):
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, 500, (2, 128))
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        model(input_ids=ids, labels=ids)
    measured = sum(n for ptr, n in saved.items() if ptr not in weights)
    assert measured > 0
    items = {i.what: i.bytes for i in estimate(shape_of_model(model, name="q", source="test"),
                                               Workload("training", "cpu", dtype, sequence=128, micro_batch=2)).items}
    estimated = items["activations"] + items["logits and loss"]
    assert measured <= estimated < 1.3 * measured, (measured, estimated)


def test_a_config_transformers_rejects_keeps_its_own_words_and_packed_8_bit_weights_are_counted(tmp_path):
    """transformers' strict config checks raise errors of their own: the plan reads the raw
    config then, never crashes; GPTQ 8-bit packs four weights in an I32."""
    import json

    folder = write_sparse_checkpoint(tmp_path / "q", "0.5b")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "layer_types": ["full_attention"]}))  # 1 of 24
    assert read_model_shape(folder).layers == 24
    packed = tmp_path / "gptq8"
    write_sparse_checkpoint(packed, "0.5b")
    header_config = {**config, "quantization_config": {"quant_method": "gptq", "bits": 8}}
    (packed / "config.json").write_text(json.dumps(header_config))
    shape = read_model_shape(packed)
    assert shape.parameters == read_model_shape(folder).parameters  # no packed tensor: nothing scaled
    assert "8-bit packed weights counted one by one" in shape.source


def test_with_no_plan_that_fits_the_refusal_names_the_model_not_a_change_it_tried(seven_b):
    one_small_card = Capacity(8 * GIB, "a small card", 2048 * GIB, "test host")
    workload = Workload("training", "npu", "bfloat16", world_size=1, zero_stage=2)
    found = fit(seven_b, workload, one_small_card)
    assert found.nearest is None and "ZeRO-3" in found.tried
    assert found.parameter_to_change() == "model_path"
