"""The isolation check of packed rows (hyport_lib/proof/isolation.py) on tiny real transformers
classes built in-process: a model that keeps samples apart moves by nothing, a short
convolution and a row-position attention are named, whatever their size at initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.proof.isolation import (CHANGED_BEFORE, MOVED, POSITION_BOUND, Isolation, _rotated, _segments,
                                        check_isolation, packing_fault)

_BASE = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, pad_token_id=0)


def _packed(lengths, row_length=64, vocab=96, seed=0):
    """One packed row as hyport's PackedCollator lays it out: positions restart per sample,
    the padding is one more segment, no attention mask."""
    generator = torch.Generator().manual_seed(seed)
    ids, positions = [], []
    for length in lengths:
        ids += torch.randint(3, vocab, (length,), generator=generator).tolist()
        positions += list(range(length))
    pad = row_length - sum(lengths)
    segments = [*lengths, *([pad] if pad else [])]
    ids += [0] * pad
    positions += list(range(pad))
    cu = torch.tensor([0, *torch.tensor(segments).cumsum(0).tolist()], dtype=torch.int32)
    return {"input_ids": torch.tensor([ids]), "position_ids": torch.tensor([positions]), "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu, "max_length_q": max(segments), "max_length_k": max(segments), "use_cache": False}


def _model(kind: str, attention: str, conv_scale: float = 1.0):
    from transformers import (Lfm2Config, Lfm2ForCausalLM, Llama4ForCausalLM, Llama4TextConfig, LlamaConfig,
                              LlamaForCausalLM)

    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM._from_config(LlamaConfig(**_BASE), attn_implementation=attention)
    elif kind == "lfm2":
        config = Lfm2Config(**_BASE, layer_types=["conv", "full_attention"])
        model = Lfm2ForCausalLM._from_config(config, attn_implementation=attention)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("conv.conv.weight"):
                    parameter.mul_(conv_scale)
    else:  # attention temperature and chunk edges from the position in the row
        config = Llama4TextConfig(**_BASE, intermediate_size_mlp=128, head_dim=16, attention_chunk_size=16,
                                  attn_temperature_tuning=True, floor_scale=8, no_rope_layers=[1, 0])
        model = Llama4ForCausalLM._from_config(config, attn_implementation=attention)
    return model.float().eval()


def _alone_vs_packed(model, lengths) -> float:
    """max |Δ logits| of each sample in the packed row against the sample run alone."""
    inputs = _packed(lengths)
    with torch.no_grad():
        packed = model(**{k: v for k, v in inputs.items()}).logits[0]
        start, worst = 0, 0.0
        for length in lengths:
            ids = inputs["input_ids"][:, start:start + length]
            alone = model(input_ids=ids, use_cache=False).logits[0]
            worst = max(worst, float((alone - packed[start:start + length]).abs().max()))
            start += length
    return worst


@pytest.fixture(scope="module")
def swapped():
    return register_hyport_attention("sdpa")


@pytest.mark.parametrize("attention", ["eager", "sdpa", "swap"])
def test_a_model_that_keeps_samples_apart_moves_by_nothing(swapped, attention):
    name = swapped if attention == "swap" else attention
    result = check_isolation(_model("llama", name), _packed([20, 17, 11]), name, [3], [0])
    assert result.passed, result.cause()
    assert result.checked and not result.module
    # Another sample's tokens add exact zeros; only a move within the row may round differently.
    assert result.leak <= POSITION_BOUND * 10 and result.bound > 0


@pytest.mark.parametrize("attention", ["eager", "swap"])
def test_a_short_convolution_is_named_with_its_layer(swapped, attention):
    name = swapped if attention == "swap" else attention
    result = check_isolation(_model("lfm2", name), _packed([20, 25]), name, [2], [0])
    assert not result.passed
    assert result.module == "model.layers.0.conv" and result.module_class == "Lfm2ShortConv"
    assert result.how == CHANGED_BEFORE and result.leak > 50 * result.bound
    cause = result.cause()
    assert cause.startswith("layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes tokens across samples")
    assert "CPU, float32" in cause and "\n" not in cause


def test_a_leak_small_at_initialisation_is_still_refused(swapped):
    """The convolution scaled until a sample packed differs from itself alone by about 1e-4,
    a tenth of the swap proof's logits tolerance: the isolation check is not a tolerance."""
    model = _model("lfm2", swapped, conv_scale=0.2)
    assert 2e-5 < _alone_vs_packed(model, [20, 25]) < 5e-4
    result = check_isolation(model, _packed([20, 25]), swapped, [2], [0])
    assert not result.passed and result.module_class == "Lfm2ShortConv"
    assert result.leak > 10 * result.bound


@pytest.mark.parametrize("attention", ["eager", "swap"])
def test_attention_that_reads_the_position_in_the_row_is_named(swapped, attention):
    name = swapped if attention == "swap" else attention
    result = check_isolation(_model("llama4", name), _packed([20, 25]), name, [2], [0])
    assert not result.passed and result.how == MOVED
    assert result.module_class == "Llama4TextAttention" and result.module.endswith(".self_attn")
    assert "reads the position in the packed row" in result.cause()


def test_a_row_of_one_sample_is_moved_behind_its_padding_given_tokens(swapped):
    """One sample per row still proves: the padding goes first and gets ordinary tokens (the
    zoo's pad id embeds to zeros, which a convolution passes unseen)."""
    result = check_isolation(_model("lfm2", swapped), _packed([30]), swapped, [1], [0])
    assert not result.passed and result.how == CHANGED_BEFORE and result.module_class == "Lfm2ShortConv"
    assert result.checked == f"{MOVED}; {CHANGED_BEFORE}"


@pytest.mark.parametrize("kind, passes", [("llama", True), ("lfm2", False)])
def test_a_full_row_of_one_sample_is_split_into_two(swapped, kind, passes):
    """Long documents fill every row alone: the first row's halves become two samples."""
    result = check_isolation(_model(kind, swapped), _packed([64]), swapped, [1], [0])
    assert not result.unchecked and result.passed is passes
    assert result.module_class == ("" if passes else "Lfm2ShortConv")


def test_a_full_image_row_of_one_sample_is_not_split_and_does_not_pass(swapped):
    inputs = {**_packed([64]), "pixel_values": torch.zeros(4, 8)}
    model = _model("llama", swapped)

    def text_only(**kwargs):  # the tiny Llama takes no image: the check never gets to run it
        raise AssertionError("no row to change, nothing should run")

    model.forward = text_only
    result = check_isolation(model, inputs, swapped, [1], [0])
    assert not result.passed and "an image row is not split" in result.unchecked


def test_non_finite_logits_never_pass(swapped, monkeypatch):
    model = _model("llama", swapped)
    with torch.no_grad():
        model.lm_head.weight[5] = math.nan
    result = check_isolation(model, _packed([20, 25]), swapped, [2], [0])
    assert not result.finite and not result.passed and "non-finite" in result.cause()


def test_special_ids_are_never_changed(swapped):
    inputs = _packed([20, 25])
    image_id = int(inputs["input_ids"][0, 3])
    seen = []
    model = _model("llama", swapped)
    forward = model.forward

    def spy(**kwargs):
        seen.append(kwargs["input_ids"].clone())
        return forward(**kwargs)

    model.forward = spy
    check_isolation(model, inputs, swapped, [2], [0, image_id])
    reference, changed = seen[0][0], seen[1][0]
    assert changed[3] == image_id == reference[3]
    assert (changed[:20] != reference[:20]).sum() >= 15 and torch.equal(changed[20:], reference[20:])


def test_a_rotation_moves_every_per_token_tensor_and_the_boundaries():
    inputs = _packed([3, 2], row_length=8)
    inputs["position_ids"] = torch.stack([inputs["position_ids"]] * 3)  # M-RoPE: (axes, rows, length)
    segments = _segments(inputs, [2])
    assert [(s.start, s.length, s.sample) for s in segments] == [(0, 3, True), (3, 2, True), (5, 3, False)]
    rotated = _rotated(inputs, segments, [3])
    assert rotated["position_ids"][:, 0].tolist() == [[0, 1, 2, 0, 1, 2, 0, 1]] * 3
    assert rotated["input_ids"][0, 3:].tolist() == inputs["input_ids"][0, :5].tolist()
    assert rotated["cu_seq_lens_q"].tolist() == [0, 3, 6, 8] == rotated["cu_seq_lens_k"].tolist()


def _judged(kind: str, attention: str) -> Isolation:
    if kind == "non-finite":
        return Isolation(attention, finite=False, checked="rows")
    if kind == "leaks":
        return Isolation(attention, leak=3e-3, bound=1e-6, how=CHANGED_BEFORE, module="model.layers.1.self_attn",
                         module_class="LlamaAttention", checked="rows")
    return Isolation(attention, leak=0.0, bound=1e-6, checked="rows")


@pytest.mark.parametrize("eager, swap, whose, words", [
    ("apart", "apart", None, ""),
    ("leaks", "leaks", "model", "layer 1 (model.layers.1.self_attn, class LlamaAttention) mixes tokens"),
    ("apart", "leaks", "attention", "hyport's attention lets packed samples reach one another"),
    ("apart", "non-finite", "attention", "non-finite logits with hyport_torch attention on the packed rows"),
    ("leaks", "non-finite", "attention", "where eager's are finite"),
    ("non-finite", "non-finite", "model", "the model's own logits are non-finite on the packed rows with eager"),
    ("leaks", "apart", None, ""),  # eager mixes them (HunYuan-VL's mask), the swap that trains does not
])
def test_eager_on_the_same_rows_tells_whose_fault_a_leak_is(eager, swap, whose, words):
    fault = packing_fault(_judged(eager, "eager"), _judged(swap, "hyport_torch"))
    if whose is None:
        assert fault is None
        return
    assert fault.models is (whose == "model") and words in fault.text and "\n" not in fault.text
