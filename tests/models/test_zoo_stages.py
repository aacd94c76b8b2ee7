"""Every stage's model-facing code on the zoo of tiny real architectures, in-process.

For each family of the zoo (tests/zoo.py): hyport's model knowledge (auto class,
processor with or without its video part, M-RoPE, packing refusals, LoRA targets),
inference with the processor's own prompt conventions, stage 02's model check, and the
training inputs — the tensors the model receives, one forward and backward step,
packed rows whose M-RoPE positions equal those the model computes for each sample alone,
Gemma3's bidirectional image mask. The torchrun runs are in test_zoo_training.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hyport_lib.inference import stage as inference_stage
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.npu_attention.hf_integration import register_hyport_attention
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.generation import run_inference
from hyport_lib.models.families import describe_config, read_config
from hyport_lib.models.loading import ProcessorUnavailable, has_torchvision, load_model, load_processor
from hyport_lib.models.module_tree import language_model_path, lora_target_pattern, matched_layers
from hyport_lib.models.training_inputs import rope_positions_function
from hyport_lib.attention import stage as attention_stage
from hyport_lib.attention.params import Params as AttentionParams
from hyport_lib.commands import main
from hyport_lib.proof import choice
from hyport_lib.proof.choice import SwapRefused
from hyport_lib.proof.model_check import compare_model
from hyport_lib.train import stage as train_stage
from hyport_lib.train.dataset import DatasetError, load_dataset
from hyport_lib.train.packing import COUNT_KEYS, PackedCollator, PaddedCollator
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.train.samples import Encoder
from hyport_lib.train.smoke_data import write_smoke_dataset
from zoo import ZOO_NAMES, zoo_entry

VLMS = [n for n in ZOO_NAMES if zoo_entry(n).multimodal]
TEXT_ONLY = [n for n in ZOO_NAMES if not zoo_entry(n).multimodal]
MROPE = [n for n in ZOO_NAMES if zoo_entry(n).mrope]
#: Packing changes what these compute (both-ways image masks; cross-attention rows).
PACKING_REFUSED = {"gemma3", "paligemma", "mllama"}
#: The swap cannot serve these exactly (soft-capping; sinks): refused by name, kept on eager.
SWAP_REFUSED = {"gemma2", "gpt_oss"}
#: Refused by every stage's plan before anything loads (asserted once, in its own test):
#: hyport's loaders, prompts and training rows are a decoder's.
ENCODER_DECODER = {n for n in ZOO_NAMES if zoo_entry(n).auto_model == "AutoModelForSeq2SeqLM"}
#: The families the per-family tests run on.
DECODERS = [n for n in ZOO_NAMES if n not in ENCODER_DECODER]
#: A module of theirs mixes tokens across the samples of a packed row (zoo.py's
#: packing_leak: a short convolution, a Mamba-2 mixer, an attention that reads the
#: position in the row): packing is refused, naming it.
PACKING_LEAKS = {n for n in ZOO_NAMES if zoo_entry(n).packing_leak}
#: Their own gradients are non-finite on a packed row's padding: Gemma 3n's AltUp divides by
#: a token's root mean square, whose gradient is infinite at the pad token's zero embedding.
#: Packing is refused with that cause (eager on the same rows), never blamed on the attention.
EAGER_NON_FINITE_PACKED = {"gemma3n_text"}
#: Their processor class needs torchvision, which the pinned CPU stack lacks.
NEEDS_TORCHVISION = {n for n in ZOO_NAMES if zoo_entry(n).torchvision_processor and not has_torchvision()}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return load_dataset(write_smoke_dataset(tmp_path_factory.mktemp("smoke"))).records


def _by_id(records, *ids):
    index = {r.record_id: r for r in records}
    return [index[i] for i in ids]


@pytest.mark.parametrize("name", DECODERS)
def test_traits_and_processor(zoo, name):
    entry = zoo_entry(name)
    traits = describe_config(read_config(zoo[name]))
    assert traits.multimodal is entry.multimodal and traits.mrope is entry.mrope
    assert traits.auto_class == entry.auto_model
    assert (traits.packing_refusal is not None) is (name in PACKING_REFUSED)
    if name in NEEDS_TORCHVISION:  # refused in one line naming the class and what to install
        with pytest.raises(ProcessorUnavailable, match=r"cannot be built without torchvision.*install"):
            load_processor(str(zoo[name]))
        return
    loaded = load_processor(str(zoo[name]))
    assert loaded.prompt_format == ("chat" if entry.chat_template else "prefix")
    if entry.video_processor and not has_torchvision():
        assert loaded.unavailable and "torchvision" in loaded.unavailable[0]
        assert hasattr(loaded.processor, "image_processor") and loaded.processor.chat_template
    else:
        assert loaded.unavailable == []
    if not entry.multimodal:
        assert not hasattr(loaded.processor, "image_processor")


@pytest.mark.parametrize("name", DECODERS)
def test_inference_through_the_processors_conventions(zoo, name):
    if name in NEEDS_TORCHVISION:
        with pytest.raises(ProcessorUnavailable):
            run_inference(InferenceConfig(model_path=str(zoo[name]), max_new_tokens=2, warmup_runs=0))
        with pytest.raises(ProcessorUnavailable):  # in the grid's plan: before any worker starts
            inference_stage.plan(InferenceParams(model_path=str(zoo[name]), num_cards=1))
        return
    outcome = run_inference(InferenceConfig(model_path=str(zoo[name]), max_new_tokens=2, warmup_runs=0))
    entry = zoo_entry(name)
    assert outcome.new_tokens == 2 and outcome.model_kind == ("image-text-to-text" if entry.multimodal
                                                              else "text-only")
    if not entry.multimodal:
        # the image parts are named as not applicable; the text prompt still runs
        assert any("text-only model" in part for part in outcome.not_applicable)
        assert len(outcome.batch_outputs) == 1
    elif name == "paligemma":
        assert len(outcome.batch_outputs) == 1 and "needs an image" in outcome.not_applicable[0]
    else:
        assert outcome.not_applicable == [] and len(outcome.batch_outputs) == 2
    assert outcome.prompt_tokens > (10 if entry.multimodal else 3)


def test_an_image_for_a_text_only_model_is_refused_in_one_line(zoo, tmp_path):
    from hyport_lib.models.prompts import PromptNotApplicable, sample_image

    image = tmp_path / "a.png"
    sample_image().save(image)
    with pytest.raises(PromptNotApplicable, match=r"image=.*qwen3 is a text-only model"):
        run_inference(InferenceConfig(model_path=str(zoo["qwen3"]), image=str(image), warmup_runs=0))


@pytest.mark.parametrize("name", DECODERS)
def test_model_check_swaps_attention_on_every_family(zoo, name):
    if name in NEEDS_TORCHVISION:
        with pytest.raises(ProcessorUnavailable):
            compare_model(str(zoo[name]), max_new_tokens=2)
        return
    result = compare_model(str(zoo[name]), max_new_tokens=2)
    if name in SWAP_REFUSED:  # said, with the reason, instead of a wrong PASS or a traceback
        assert result.verdict == "REFUSED" and "_supports_sdpa = False" in result.detail
        assert "training keeps this model on eager attention" in result.detail
        return
    if name in PACKING_LEAKS:
        # The swap itself is exact on the padded batch; the packed row, against each sample
        # run alone, shows the model's own leak far above float noise (1e-7).
        assert result.max_abs_logits < 1e-5 and result.greedy_identical, result.detail
        assert result.packed_max_abs_logits > 1e-4, result.detail
        return
    assert result.verdict == "PASS", result.detail
    # the packed row training sees, compared with each sample run alone
    window = result.sliding_window
    assert result.packed_tokens == (window + 8 if window else 48) + 16
    assert result.packed_max_abs_logits < 1e-4 and "packed row" in result.detail
    if window:
        assert result.packed_tokens > window and "past the sliding window" in result.detail
    assert result.swapped_calls and result.swapped_calls > 0
    assert result.model_kind == ("image-text-to-text" if zoo_entry(name).multimodal else "text-only")
    if not zoo_entry(name).multimodal:
        assert "not applicable" in result.batch


@pytest.mark.parametrize("name", DECODERS)
def test_lora_targets_are_the_language_models_layers(zoo, name):
    model = load_model(str(zoo[name]))
    prefix = language_model_path(model)
    matched = matched_layers(model, lora_target_pattern(prefix, ["all"]))
    assert matched and all(n.startswith(f"{prefix}.") if prefix else True for n in matched)
    assert all(isinstance(model.get_submodule(n), torch.nn.Linear) for n in matched)
    assert not any("vision" in n or "visual" in n for n in matched)


def _forward_backward(model, batch):
    batch = {k: v for k, v in batch.items() if k not in COUNT_KEYS}
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert math.isfinite(float(out.loss)) and grads and all(torch.isfinite(g).all() for g in grads)
    return out


@pytest.mark.parametrize("name", DECODERS)
def test_training_batches_keep_the_models_inputs(zoo, records, name):
    """Padded and packed batches carry every per-token key and image tensor the
    processor returned; one forward and backward step on each."""
    if name in NEEDS_TORCHVISION:
        pytest.skip(f"{name}'s processor needs torchvision, absent here")
    loaded = load_processor(str(zoo[name]))
    # What the workers run: hyport's attention, or eager for a model the swap refuses.
    attention = "eager" if name in SWAP_REFUSED else register_hyport_attention("sdpa")
    model = load_model(str(zoo[name]), attn_implementation=attention)
    picked = _by_id(records, "smoke-single-0", "smoke-pair-0", "smoke-multiturn-0", "smoke-text-0")
    encoder = Encoder(loaded, 1024, positions=rope_positions_function(model))
    samples = [s for s in (encoder.encode(r)[0] for r in picked) if s is not None]
    entry = zoo_entry(name)
    assert len(samples) == (3 if name == "paligemma" else 4 if entry.multimodal else 1)
    keys = set(samples[0].token_extras)
    if entry.mrope:
        assert "mm_token_type_ids" in keys
    if name in ("gemma3", "paligemma"):
        assert "token_type_ids" in keys
    padded = PaddedCollator(encoder.pad_id)(samples)
    assert keys <= set(padded) and padded["input_ids"].shape == padded["attention_mask"].shape
    images = [s for s in samples if s.pixel_values is not None]
    if images:
        assert "pixel_values" in padded
    _forward_backward(model, padded)
    if name in PACKING_REFUSED:
        return
    width = sum(len(s) for s in samples) + 8  # a short padding segment, as in real rows
    packed = PackedCollator(encoder.pad_id, width, loaded.traits.mrope_text_row)([samples])
    assert keys <= set(packed)
    for key in keys:
        assert packed[key][0, :sum(len(s) for s in samples)].tolist() == sum(
            (s.token_extras[key] for s in samples), [])
    _forward_backward(model, packed)


def _capture_positions(model, batch):
    """The positions the language model rotates with (what its rotary embedding
    receives, one row per axis), and the logits."""
    rotary = model.get_submodule(language_model_path(model)).rotary_emb
    seen = {}

    def hook(module, args, kwargs):
        seen["position_ids"] = kwargs.get("position_ids", args[1] if len(args) > 1 else None)

    handle = rotary.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            logits = model(**{k: v for k, v in batch.items() if k not in COUNT_KEYS}).logits
    finally:
        handle.remove()
    return seen["position_ids"], logits


@pytest.mark.parametrize("name", MROPE)
def test_packed_mrope_positions_are_each_samples_own(zoo, records, name):
    """In one packed row, every sample's position ids (on every rope axis) and logits
    equal those the model computes for the sample alone."""
    loaded = load_processor(str(zoo[name]))
    model = load_model(str(zoo[name]), attn_implementation=register_hyport_attention("sdpa")).eval()
    picked = _by_id(records, "smoke-single-0", "smoke-text-0", "smoke-pair-1", "smoke-multiturn-1")
    samples = [Encoder(loaded, 1024, positions=rope_positions_function(model)).encode(r)[0] for r in picked]
    width = sum(len(s) for s in samples) + 8
    packed_ids, packed_logits = _capture_positions(
        model, PackedCollator(0, width, loaded.traits.mrope_text_row)([samples]))
    axes = samples[0].rope_positions.shape[0]
    assert packed_ids.shape[0] == axes
    rope_rows = packed_ids[:, 0]
    start = 0
    moved = 0
    for sample in samples:
        alone = PaddedCollator(0)([sample])
        alone.pop("attention_mask")
        alone_ids, alone_logits = _capture_positions(model, alone)
        end = start + len(sample)
        assert alone_ids.shape[:2] == (axes, 1)  # the model computed them itself
        assert torch.equal(rope_rows[:, start:end], alone_ids[:, 0]), sample.record_id
        moved += int((alone_ids[:, 0] != torch.arange(len(sample))).any(0).sum())
        assert torch.allclose(packed_logits[0, start:end], alone_logits[0], atol=2e-4), sample.record_id
        start = end
    assert moved > 0  # image tokens really sit on grid positions, not on 0..n-1


def test_gemma3_image_tokens_attend_both_ways_in_training(zoo, records):
    """The padded training batch keeps token_type_ids, so Gemma3 builds its mask with
    bidirectional attention inside each image; without them it would be causal."""
    loaded = load_processor(str(zoo["gemma3"]))
    model = load_model(str(zoo["gemma3"]), attn_implementation="eager").train()
    sample = Encoder(loaded, 1024).encode(_by_id(records, "smoke-single-1")[0])[0]
    batch = PaddedCollator(0)([sample])
    image = [i for i, t in enumerate(sample.token_extras["token_type_ids"]) if t == 1]
    assert len(image) > 1
    seen = {}
    handle = model.model.language_model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.update(mask=kwargs["attention_mask"]), with_kwargs=True)
    try:
        model(**{k: v for k, v in batch.items() if k not in COUNT_KEYS})
        masks_with = dict(seen["mask"])
        batch.pop("token_type_ids")
        model(**{k: v for k, v in batch.items() if k not in COUNT_KEYS})
        masks_without = dict(seen["mask"])
    finally:
        handle.remove()
    first, last = image[0], image[-1]

    def attends(mask, query, key):
        value = mask[0, 0, query, key]
        return bool(value) if value.dtype == torch.bool else bool(value == 0)

    full = masks_with["full_attention"]
    assert attends(full, first, last)  # the first image token sees the last one
    assert not attends(masks_without["full_attention"], first, last)
    text_after = last + 1
    assert not attends(full, first, text_after)  # still causal towards the text after it


@pytest.mark.parametrize("name", sorted(PACKING_REFUSED))
def test_packing_is_refused_in_one_line_where_it_would_change_the_model(zoo, tmp_path, name):
    with pytest.raises(ValueError, match=rf"^packing=True: {name} (attends both ways|reads each row's images through cross-attention).*use packing=false$"):
        train_stage.plan(TrainParams(model_path=str(zoo[name]), output_dir=str(tmp_path / "out"), packing=True))


def test_a_text_only_model_names_image_records_or_leaves_the_bundled_ones_out(zoo, tmp_path):
    plan = train_stage.plan(TrainParams(model_path=str(zoo["qwen3"]), output_dir=str(tmp_path / "a")))
    assert plan.dataset["samples"] == 3 and plan.dataset["model_kind"] == "text-only"
    assert any("11 records not applicable to this text-only model" in n for n in plan.notes)
    data = write_smoke_dataset(tmp_path / "data")
    with pytest.raises(DatasetError) as caught:
        train_stage.plan(TrainParams(model_path=str(zoo["qwen3"]), output_dir=str(tmp_path / "b"),
                                     dataset_path=str(data)))
    text = str(caught.value)
    assert "smoke-single-0" in text and "text-only model" in text
    problems = caught.value.report.problems
    assert len(problems) == 11 and {p.kind for p in problems} == {"not_applicable"}
    assert not (tmp_path / "b").exists()  # the plan writes nothing
    plan = train_stage.plan(TrainParams(model_path=str(zoo["qwen3"]), output_dir=str(tmp_path / "c"),
                                        dataset_path=str(data), skip_bad_records=True))
    assert plan.dataset["samples"] == 3 and len(plan.skip_records) == 11


def test_the_worker_builds_the_blank_image_of_any_vlm(zoo):
    from hyport_lib.train.worker import _blank_image_inputs

    for name in [n for n in VLMS if n not in NEEDS_TORCHVISION]:
        loaded = load_processor(str(zoo[name]))
        inputs = _blank_image_inputs(loaded)
        assert "pixel_values" in inputs, name
        if zoo_entry(name).mrope:
            assert "image_grid_thw" in inputs, name
    assert _blank_image_inputs(load_processor(str(zoo["qwen3"]))) is None


@pytest.mark.parametrize("name", sorted(ENCODER_DECODER))
def test_an_encoder_decoder_is_refused_by_stages_02_03_04_before_anything_loads(zoo, tmp_path, capsys, name):
    """Each plan says the true cause in one line (the tokenizer loads: "processor / tokenizer
    does not load" would be false), and no loader takes its decoder alone (transformers maps
    bart to BartForCausalLM too, dropping the encoder)."""
    folder = str(zoo[name])
    line = f"{folder}: {name} is an encoder-decoder model; encoder-decoder models are not supported by "
    with pytest.raises(ValueError, match=r"is an encoder-decoder model .*would drop its encoder"):
        describe_config(read_config(folder))
    with pytest.raises(ValueError) as refused:
        attention_stage.plan(AttentionParams(model_path=folder))
    assert str(refused.value) == line + "stage 02's model check yet"
    with pytest.raises(ValueError) as refused:
        inference_stage.plan(InferenceParams(model_path=folder, device="cpu", num_cards=1))
    assert str(refused.value) == line + "stage 03 yet"
    out = tmp_path / "out"
    assert main(["train", "--model-path", folder, "--output-dir", str(out), "--device", "cpu"]) == 2
    assert capsys.readouterr().err.strip().endswith(line + "stage 04 yet")
    assert not out.exists()


def test_zoo_folders_are_checkpoints_hyport_accepts(zoo):
    from hyport_lib.models.preflight import check_model_path

    assert ZOO_NAMES
    for name in ZOO_NAMES:
        assert Path(check_model_path(str(zoo[name]))) == Path(zoo[name])


def test_a_cut_inside_gemma3s_image_is_refused_not_trained(zoo, tmp_path):
    """Gemma3's processor names <start_of_image> as its image token, the model counts
    the soft tokens: a truncation inside them must be refused (it would crash the forward)."""
    from hyport_lib.models.prompts import sample_image
    from hyport_lib.train.dataset import Record
    from hyport_lib.train.samples import encode_records

    image = tmp_path / "a.png"
    sample_image((64, 32)).save(image)
    loaded = load_processor(str(zoo["gemma3"]))
    record = Record(0, "late-image", [("user", "Hi."), ("assistant", "Hello there, how are you today?"),
                                      ("user", "<image>\nWhat is it?"), ("assistant", "A wide picture.")],
                    [str(image)])
    full, _ = Encoder(loaded, 4096).encode(record)
    soft = [i for i, t in enumerate(full.token_extras["token_type_ids"]) if t]
    assert soft, "the image's soft tokens are marked in token_type_ids"
    for limit in (soft[0], soft[len(soft) // 2]):
        samples, problems = encode_records([record], loaded, limit)
        assert not samples and "would cut an image's tokens" in problems[0].message, limit


def test_image_prompts_the_user_chose_are_refused_for_a_text_only_model(zoo):
    from hyport_lib.models.generation import check_prompts
    from hyport_lib.models.prompts import PromptNotApplicable

    chosen = InferenceConfig(model_path=str(zoo["qwen3"]), batch_prompts=[("What is it?", True), ("Hi", False)])
    with pytest.raises(PromptNotApplicable, match=r"batch_prompts\[0\] 'What is it\?'.*skip_not_applicable=True"):
        check_prompts(chosen, str(zoo["qwen3"]))
    # stage 03's plan refuses them the same way, before any worker starts
    with pytest.raises(PromptNotApplicable, match=r"batch_prompts\[0\] 'What is it\?'"):
        inference_stage.plan(InferenceParams(device="cpu", num_cards=1, model_path=str(zoo["qwen3"]),
                                             batch_prompts=[["What is it?", True], ["Hi", False]]))
    check_prompts(InferenceConfig(model_path=str(zoo["qwen3"])), str(zoo["qwen3"]))  # defaults: fitted
    skipped = InferenceConfig(model_path=str(zoo["qwen3"]), batch_prompts=chosen.batch_prompts,
                              skip_not_applicable=True, max_new_tokens=2, warmup_runs=0)
    check_prompts(skipped, str(zoo["qwen3"]))
    outcome = run_inference(skipped)
    assert len(outcome.batch_outputs) == 1 and "'What is it?'" in outcome.not_applicable[1]


def test_lora_all_on_an_moe_says_the_fused_experts_stay_frozen(zoo, tmp_path):
    plan = train_stage.plan(TrainParams(model_path=str(zoo["qwen3_moe"]), output_dir=str(tmp_path / "o"),
                                        finetuning_type="lora", lora_target="all"))
    assert any("MoE experts" in note and "stay frozen" in note for note in plan.notes)


@pytest.mark.slow  # a plan and its proof per family: kept out of the fast tier's budget
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_a_packed_plan_proves_the_swap_or_refuses_in_one_line(zoo, tmp_path, monkeypatch, name):
    """Stage 04's plan on every family, packed: the swap proven on the model shrunk from
    its config and the collator's first batch, or one line before any worker starts."""
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    params = TrainParams(model_path=str(zoo[name]), output_dir=str(tmp_path / "out"), packing=True)
    if name in ENCODER_DECODER:
        with pytest.raises(ValueError, match=r"is an encoder-decoder model; .* not supported by stage 04 yet$"):
            train_stage.plan(params)
        return
    if name in PACKING_LEAKS:
        # Refused before launch, naming the module, however small its leak at initialisation
        # (LFM2's: 6e-4 on the zoo's weights; the swap is exact, so not SwapRefused).
        with pytest.raises(choice.PackingRefused) as refused:
            train_stage.plan(params)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("packing=True: layer ")
        # a layer mixing samples, or an attention computing from the position in the row
        assert "mixes tokens across samples" in message or "reads the position in the packed row" in message
        assert f"class {zoo_entry(name).packing_leak})" in message and "does not compute" not in message
        assert not (tmp_path / "out").exists()
        return
    if name in EAGER_NON_FINITE_PACKED:
        with pytest.raises(choice.PackingRefused) as refused:
            train_stage.plan(params)
        message = str(refused.value)
        assert "\n" not in message and "non-finite on the packed rows with eager attention too" in message
        assert "not the attention" in message and "does not compute" not in message
        return
    if name in NEEDS_TORCHVISION | PACKING_REFUSED | SWAP_REFUSED:
        expected = (ProcessorUnavailable if name in NEEDS_TORCHVISION else
                    SwapRefused if name in SWAP_REFUSED else ValueError)
        with pytest.raises(expected) as refused:
            train_stage.plan(params)
        message = str(refused.value)
        assert "\n" not in message
        assert ("torchvision" if name in NEEDS_TORCHVISION else "packing") in message
        assert not (tmp_path / "out").exists()
        return
    plan = train_stage.plan(params)
    proof = plan.attention_proof
    assert plan.attn_implementation == "hyport_torch" and proof.verdict == "PASS", proof.reason
    assert proof.packed and "samples one by one" in proof.batch
    assert proof.max_abs_logits < 1e-4 and proof.grad_parameters > 10 and proof.swapped_calls > 0
    assert any(note.startswith("attention proof PASS") for note in plan.notes)
    # samples kept apart by eager and by the swap, within float noise
    # Samples kept apart by the swap within float noise; eager's figure is reported beside it
    # (HunYuan-VL's eager cannot see the samples' edges in its M-RoPE positions: it mixes them).
    assert [i.attention for i in proof.isolation] == ["eager", "hyport_torch"]
    swapped = proof.isolation[-1]
    assert swapped.passed and swapped.leak <= swapped.bound
    assert "samples kept apart by hyport_torch" in proof.line()
