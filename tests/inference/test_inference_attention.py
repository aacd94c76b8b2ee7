"""Which attention the inference grid runs (proof/choice.py), decided and proven
in the plan: ``auto`` is the fused kernel on an NPU once the swap proves itself on the
model's prefill and cached decoding, eager elsewhere; a swap that fails its proof keeps
the grid on eager, and the plan says why."""

from __future__ import annotations

import torch
import pytest

from hyport_lib.inference import stage
from hyport_lib.inference.params import Params
from hyport_lib.proof.swap import DECODE_STEPS
from hyport_lib.npu_attention import hf_integration

SMALL = dict(max_new_tokens=4, num_cards=1)


def _plan(tmp_path, **kw):
    return stage.plan(Params(**{**SMALL, "log_dir": str(tmp_path / "logs"), **kw}))


def test_auto_runs_eager_off_an_npu_and_proves_nothing(tmp_path):
    plan = _plan(tmp_path, device="cpu")
    assert Params().attn_implementation == "auto"
    assert plan.config.attn_implementation == "eager" and plan.attention.proof is None
    assert not any(note.startswith("attention:") for note in plan.notes)


def test_a_named_swap_proves_itself_on_prefill_and_cached_decoding(tmp_path, monkeypatch):
    from hyport_lib.models.tiny import ensure_tiny_model

    tiny = str(ensure_tiny_model())
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))  # proven here, not read from a cache
    plan = _plan(tmp_path, device="cpu", model_path=tiny, attn_implementation="hyport_npu_emulated")
    proof = plan.attention.proof
    assert plan.config.attn_implementation == "hyport_npu_emulated" and proof.passed, proof.reason
    assert proof.decode_steps == DECODE_STEPS - 1 >= 2  # every cached step past the prefill
    assert proof.max_abs_decode_logits < 1e-3
    assert proof.swapped_calls > 0 and "cached decoding steps" in proof.line() and not proof.cached
    assert [n for n in plan.notes if n.startswith("attention: hyport_npu_emulated: attention proof PASS")]


@pytest.mark.slow  # the plan asks the npu-smi double which cards are busy
def test_auto_on_an_npu_runs_the_fused_kernel_once_the_emulation_proves_it(fake_npu, tmp_path):
    plan = _plan(tmp_path, device="npu")
    assert plan.config.attn_implementation == "hyport_npu_fused"
    assert plan.attention.proof.passed and plan.attention.proof.backend == "npu-emulated"
    assert "NPU attention emulated" in plan.attention.note  # a CPU proof, labelled as one


def test_a_swap_wrong_only_when_decoding_keeps_the_grid_on_eager(tmp_path, monkeypatch):
    """A swap exact on the prompt (query as long as the keys) but that forgets the KV cache
    when decoding: training's proof cannot see it; the inference proof must."""
    exact = hf_integration._attend_mask

    def forgets_the_cache(mask, batch, sq, sk, window, query):
        attend = exact(mask, batch, sq, sk, window, query)
        if sq == sk:
            return attend
        last = torch.zeros(batch, 1, sq, sk, dtype=torch.bool)
        last[..., -1] = True
        return last

    from hyport_lib.models.tiny import ensure_tiny_model

    tiny = str(ensure_tiny_model())
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))  # no proof cached by another test
    monkeypatch.setattr(hf_integration, "_attend_mask", forgets_the_cache)
    plan = _plan(tmp_path, device="cpu", model_path=tiny, attn_implementation="hyport_npu_emulated")
    proof = plan.attention.proof
    assert not proof.passed and "cached decoding: logits differ from eager" in proof.reason
    assert proof.max_abs_logits is not None and proof.max_abs_logits < 1e-3  # the prompt itself was exact
    assert plan.config.attn_implementation == "eager"
    assert any(n.startswith("attention: hyport_npu_emulated not used:") and "keeps eager" in n
               for n in plan.notes)


def test_the_plan_reckons_host_ram_from_the_model(tmp_path):
    from hyport_lib.models.tiny import ensure_tiny_model

    plan = _plan(tmp_path, device="cpu", model_path=str(ensure_tiny_model()))
    (ram,) = [n for n in plan.notes if n.startswith("host RAM:")]
    assert "parameters x 4 B (float32 weights)" in ram and "(inference, cpu)" in ram


def test_a_tied_embedding_is_counted_once_in_the_host_ram_need(tmp_path):
    """build_empty_model ties weights as loading does: a tied lm_head is not a second matrix."""
    from transformers import LlamaConfig

    from hyport_lib.models.loading import build_empty_model

    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    config.save_pretrained(tmp_path)
    model = build_empty_model(str(tmp_path))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) < 1000 * 64 * 2


@pytest.mark.parametrize("family", ["qwen2_vl", "idefics3", "mllama"])
def test_vlm_prompts_prove_the_swap_they_used_to_fail(family, zoo, tmp_path, monkeypatch):
    """A left pad position predicts the first real token; eager and the swap may differ in
    that unread output. Its label used to count, so Qwen2-VL and Idefics3 failed their proof
    on gradients while every real logit matched; mllama's image token (an id past the text
    vocabulary) made the proof's loss raise."""
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    plan = _plan(tmp_path, device="cpu", model_path=str(zoo[family]), attn_implementation="hyport_npu_emulated",
                 skip_not_applicable=True)
    assert plan.attention.proof.passed, plan.attention.proof.reason
    assert plan.attention.proof.decode_steps == DECODE_STEPS - 1  # the image prompts decoded too
    assert plan.config.attn_implementation == "hyport_npu_emulated"


def test_auto_means_eager_in_training_and_in_the_reload(tmp_path, monkeypatch):
    from hyport_lib.models.tiny import ensure_tiny_model

    from hyport_lib.proof.choice import TRAINING, choose_attention

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
    from hyport_lib.proof.choice import GRID, choose_attention

    choice = choose_attention("auto", "npu", GRID, "org/some-model", lambda folder: [])
    assert choice.attn_implementation == "eager" and choice.proof is None
    assert "not a local folder" in choice.note
