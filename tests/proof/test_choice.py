"""The one choice of the workers' attention (proof/choice.py), for stage 03's grid and stage
04's training: what ``auto`` runs on each device kind, a swap proven before it is used, a
proof that does not pass keeping eager (with the plan's note) or refusing packing."""

from __future__ import annotations

import re

import pytest

from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.params import ParameterError
from hyport_lib.proof import choice, swap
from hyport_lib.proof.choice import GRID, TRAINING, PackingRefused, SwapRefused, choose_attention
from hyport_lib.proof.swap import AttentionProof


@pytest.fixture
def proofs(monkeypatch):
    """``prove_swap`` answering, batch by batch, the verdicts queued in the returned list."""
    verdicts = []

    def prove(folder, batch, **kwargs):
        verdict = verdicts.pop(0)
        return AttentionProof(folder, "hyport_torch", kwargs["backend"], verdict=verdict,
                              reason="" if verdict == "PASS" else f"planted on {batch['label']}",
                              max_abs_logits=0.0, loss_eager=1.0, loss_swapped=1.0, max_rel_grad=0.0, eager_ran=True)

    monkeypatch.setattr(choice, "prove_swap", prove)
    return verdicts


def _batches(*labels):
    return lambda folder: [(label, {"label": label}, None) for label in labels]


def test_auto_runs_what_each_runner_runs_on_each_device_kind(proofs):
    tiny = str(ensure_tiny_model())
    assert choose_attention("auto", "cpu", GRID, tiny, _batches()).attn_implementation == "eager"
    assert choose_attention("auto", "npu", TRAINING, tiny, _batches()).attn_implementation == "eager"
    proofs.append("PASS")
    fused = choose_attention("auto", "npu", GRID, tiny, _batches("the single prompt"))
    assert (fused.attn_implementation, fused.backend, fused.proof.backend) == (
        "hyport_npu_fused", "npu", "npu-emulated")  # proven on the CPU emulation: the plan touches no card
    assert fused.note.startswith("hyport_npu_fused: attention proof PASS")
    assert not proofs  # every queued verdict was asked for


def test_a_name_no_swap_needs_no_proof_and_a_fused_kernel_off_an_npu_is_refused(proofs):
    tiny = str(ensure_tiny_model())
    sdpa = choose_attention("sdpa", "cpu", GRID, tiny, _batches("never made"))
    assert (sdpa.attn_implementation, sdpa.proof, sdpa.note) == ("sdpa", None, "")
    with pytest.raises(ValueError, match="npu_fusion_attention runs on an Ascend NPU only"):
        choose_attention("hyport_npu_fused", "cpu", TRAINING, tiny, _batches("never made"))


def test_a_failed_proof_keeps_eager_unpacked_and_refuses_packing(proofs):
    tiny = str(ensure_tiny_model())
    proofs.extend(["PASS", "FAIL"])
    kept = choose_attention("hyport_torch", "cpu", TRAINING, tiny, _batches("the first rows", "an image row"))
    assert (kept.attn_implementation, kept.backend, kept.proof.verdict) == ("eager", "sdpa", "FAIL")
    # the failing batch is said with its own words, after the one that passed
    assert kept.note.startswith("attn_implementation='hyport_torch' not used: attention proof PASS")
    assert "; and on an image row: attention proof FAIL (CPU, float32): planted on an image row" in kept.note
    assert kept.note.endswith("; the run keeps eager attention") and kept.proof.also[0].startswith(
        "attention proof PASS")
    proofs.append("FAIL")
    with pytest.raises(SwapRefused) as refused:
        choose_attention("eager", "npu", TRAINING, tiny, _batches("the first rows"), packing=True)
    assert str(refused.value).startswith("packing=True needs hyport's attention, which does not compute")
    assert str(refused.value).endswith("train with packing=False and attn_implementation='eager'")
    proofs.append("FAIL")
    grid = choose_attention("hyport_npu_emulated", "cpu", GRID, tiny, _batches("the single prompt"))
    assert grid.attn_implementation == "eager" and grid.note.startswith("hyport_npu_emulated not used: ")
    assert grid.note.endswith("; the grid keeps eager attention")
    assert not proofs


def test_packing_refusals_say_the_true_cause(monkeypatch):
    """A layer mixing samples is named, never blamed on the attention; a model that could not
    run on packed rows says so; only a compared swap that differs is the attention's fault."""
    tiny = str(ensure_tiny_model())
    leak = "layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes tokens across samples in a packed row: ..."
    found = {}
    monkeypatch.setattr(choice, "prove_swap", lambda folder, batch, **kwargs: AttentionProof(
        folder, "hyport_torch", kwargs["backend"], verdict="FAIL", reason=found["reason"],
        packing_leak=found.get("leak", ""), eager_ran=found.get("eager_ran", False)))
    found.update(reason=leak, leak=leak, eager_ran=True)
    with pytest.raises(PackingRefused) as refused:
        choose_attention("auto", "cpu", TRAINING, tiny, _batches("the first rows"), packing=True)
    assert str(refused.value) == f"packing=True: {leak}; train with packing=False (one sample per padded row)"
    found.clear()
    found.update(reason="the proof could not run: eager on the model shrunk from its config raised "
                        "ValueError: cu_seq_lens")
    with pytest.raises(PackingRefused) as refused:
        choose_attention("auto", "cpu", TRAINING, tiny, _batches("the first rows"), packing=True)
    assert str(refused.value).startswith("packing=True: this model could not be proven on packed rows: attention "
                                         "proof FAIL (CPU, float32): the proof could not run: eager")
    assert "does not compute" not in str(refused.value)
    # eager ran, the swap raised (an argument it refuses): the attention's, said so
    found.update(reason="the model with the swapped attention raised FlashAttnUnsupported: position_bias",
                 eager_ran=True)
    with pytest.raises(SwapRefused, match="^packing=True needs hyport's attention, which does not compute"):
        choose_attention("auto", "cpu", TRAINING, tiny, _batches("the first rows"), packing=True)


def test_packing_refuses_an_attention_it_would_not_train_with(proofs):
    """packing=True trains with hyport's attention: a typo or a name the device cannot run is
    refused as unpacked, and a runnable name of another kind in one line, never trained
    silently with hyport's."""
    tiny = str(ensure_tiny_model())
    for name, said in (("flahs_attention", "not an attention transformers"),
                       ("flash_attention_2", "cpu cannot run it (flash-attn is not installed"),
                       ("flex_attention", "cpu cannot run it (torch's flex_attention has no backward")):
        with pytest.raises(ParameterError, match=rf"^attn_implementation={name!r}: {re.escape(said)}"):
            choose_attention(name, "cpu", TRAINING, tiny, _batches("never made"), packing=True)
    for name in ("sdpa", "hyport_npu_emulated"):
        with pytest.raises(ParameterError) as refused:
            choose_attention(name, "cpu", TRAINING, tiny, _batches("never made"), packing=True)
        assert str(refused.value) == (f"attn_implementation={name!r}: packing=True trains with hyport's attention "
                                      "(hyport_torch, per sample); use attn_implementation=auto, or packing=False")
    for name in ("auto", "eager", "hyport_torch"):
        proofs.append("PASS")
        packed = choose_attention(name, "cpu", TRAINING, tiny, _batches("the first rows"), packing=True)
        assert (packed.attn_implementation, packed.backend) == ("hyport_torch", "sdpa")
    assert not proofs


def test_flex_attention_on_a_cpu_is_refused_with_the_reason_of_each_runner(proofs):
    tiny = str(ensure_tiny_model())
    with pytest.raises(ParameterError, match="failed to compile for the grid's left-padded batch"):
        choose_attention("flex_attention", "cpu", GRID, tiny, _batches("never made"))
    with pytest.raises(ParameterError, match="no backward on a CPU, which training needs"):
        choose_attention("flex_attention", "cpu", TRAINING, tiny, _batches("never made"))


def test_a_proof_that_cannot_run_keeps_eager_but_never_packs(proofs):
    tiny = str(ensure_tiny_model())

    def broken(folder):
        raise ValueError("no prompt of this grid fits the model\nsecond line")

    kept = choose_attention("hyport_torch", "cpu", GRID, tiny, broken)
    assert kept.attn_implementation == "eager" and kept.proof is None
    assert kept.note == ("hyport_torch not used: its proof could not run (ValueError: no prompt of this grid "
                         "fits the model); the grid keeps eager attention")
    with pytest.raises(ValueError, match="no prompt of this grid"):
        choose_attention("auto", "cpu", TRAINING, tiny, broken, packing=True)


def test_a_vlm_whose_first_rows_hold_no_image_is_also_proven_on_an_image_row(zoo, tmp_path, monkeypatch):
    """The Trainer draws rows at random: the vision tower's attention is proven too."""
    import json as json_module

    from hyport_lib.models.loading import load_processor
    from hyport_lib.train.dataset import load_dataset
    from hyport_lib.train.packing import proof_batches
    from hyport_lib.train.params import Params
    from zoo import mixed_dataset

    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    data = mixed_dataset(tmp_path / "data")
    records = json_module.loads(data.read_text())
    data.write_text(json_module.dumps(records[::-1]))  # the text-only record first
    loaded = load_processor(str(zoo["qwen2_vl"]))
    params = Params(model_path=str(zoo["qwen2_vl"]), packing=False, attn_implementation="hyport_torch")
    proven = []
    real = swap._run_proof
    monkeypatch.setattr(swap, "_run_proof",
                        lambda proof, config, batch, *a: proven.append(set(batch)) or real(proof, config, batch, *a))
    records = load_dataset(data).records
    choice_made = choose_attention(params.attn_implementation, "cpu", TRAINING, str(zoo["qwen2_vl"]),
                                   lambda folder: proof_batches(params, folder, loaded, records, []))
    assert choice_made.proof.passed and len(choice_made.proof.also) == 1 and "PASS" in choice_made.proof.also[0]
    assert "pixel_values" not in proven[0] and "pixel_values" in proven[1]
    assert "and on an image row: attention proof PASS" in choice_made.note


def test_auto_means_eager_in_training_and_in_the_reload(tmp_path, monkeypatch):
    choice = choose_attention("auto", "cpu", TRAINING, "unused", lambda folder: [])
    assert choice.attn_implementation == "eager" and choice.proof is None
    from hyport_lib.weights import stage as weights_stage
    from hyport_lib.weights.params import Params as WeightsParams

    seen = {}

    def reload_folder(folder, *, attn_implementation, **kwargs):
        seen["attn_implementation"] = attn_implementation
        raise RuntimeError("stop here: the reload's attention is what is checked")

    monkeypatch.setattr(weights_stage, "reload", reload_folder)

    with pytest.raises(RuntimeError, match="stop here"):
        weights_stage.run(weights_stage.plan(WeightsParams(
            weights_path=str(ensure_tiny_model()), attn_implementation="auto", full_scan=False,
            logits_parity=False, consolidate_zero=False)))
    assert seen == {"attn_implementation": "eager"}


def test_a_hub_id_on_auto_keeps_eager_and_says_why_without_fetching(fake_npu, tmp_path):
    choice = choose_attention("auto", "npu", GRID, "org/some-model", lambda folder: [])
    assert choice.attn_implementation == "eager" and choice.proof is None
    assert "not a local folder" in choice.note
