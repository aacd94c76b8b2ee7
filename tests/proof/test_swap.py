"""The swap proves itself on the user's model before a launch (proof/swap.py): eager and the
swap on the same weights of the model shrunk from its config; a swap that computes
something else, raises, or gives a NaN or an Inf anywhere fails; a model that declares it
cannot take such a kernel is refused; proofs are cached per model, batch and code."""

from __future__ import annotations

import os

import pytest
import torch

from hyport_lib.npu_attention import hf_integration
from hyport_lib.proof import runs, swap
from hyport_lib.proof.swap import prove_swap
from hyport_lib.proof.tolerance import NOISE_MARGIN
from biased_attention_model import write_biased_model
from leaky_convolution_model import write_leaky_lfm2


@pytest.fixture(scope="module")
def biased_model(tmp_path_factory, zoo):
    return str(write_biased_model(tmp_path_factory.mktemp("biased"), zoo["llama"]))


def _text_batch(seed=0, packed=True):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 500, (1, 24), generator=generator)
    labels = ids.clone()
    labels[0, :3] = -100
    batch = {"input_ids": ids, "labels": labels}
    if packed:
        batch["position_ids"] = torch.tensor([list(range(10)) + list(range(14))])
        batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = torch.tensor([0, 10, 24], dtype=torch.int32)
    else:
        batch["attention_mask"] = torch.ones_like(ids)
    return batch


@pytest.fixture
def proof_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attention-proofs"


def test_the_proof_passes_a_model_the_swap_serves(zoo, proof_cache):
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa")
    assert proof.verdict == "PASS", proof.reason
    assert proof.packed and proof.swapped_calls == 2  # one call per decoder layer
    assert proof.max_abs_logits < 1e-5 and abs(proof.loss_eager - proof.loss_swapped) < 1e-6
    assert proof.grad_parameters > 10 and not proof.grads_only_eager and not proof.grads_only_swapped
    assert proof.source == "CPU, float32"


def test_the_proof_is_cached_per_model_and_batch(zoo, proof_cache):
    first = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa")
    again = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa")
    other = prove_swap(str(zoo["llama"]), _text_batch(seed=1), backend="sdpa")
    assert not first.cached and again.cached and not other.cached
    assert again.max_abs_logits == first.max_abs_logits
    assert len(list(proof_cache.glob("*.json"))) == 2


def test_the_proof_refuses_an_argument_the_model_hands_over(biased_model, proof_cache):
    proof = prove_swap(biased_model, _text_batch(), backend="sdpa", trust_remote_code=True)
    assert proof.verdict == "FAIL"
    assert "UnsupportedAttentionArgument" in proof.reason and "position_bias" in proof.reason


@pytest.mark.parametrize("backend", ["sdpa", "npu-emulated"])
def test_the_proof_catches_a_swap_that_drops_an_argument(biased_model, proof_cache, monkeypatch, backend):
    """What hyport did before the contract: position_bias dropped. The logits, the loss and
    the gradients then differ from eager, and the proof fails on them."""
    monkeypatch.setattr(hf_integration, "PASSED_THROUGH_ARGUMENTS",
                        hf_integration.PASSED_THROUGH_ARGUMENTS | {"position_bias"})
    proof = prove_swap(biased_model, _text_batch(), backend=backend, trust_remote_code=True, use_cache=False)
    assert proof.verdict == "FAIL"
    assert proof.max_abs_logits > 1e-2 and "logits differ from eager" in proof.reason
    assert "gradients differ" in proof.reason


def test_a_model_that_declares_no_sdpa_is_refused_before_running(zoo, proof_cache, monkeypatch):
    """A pretrained class of the model (here Llama's, as Gemma2's and GPT-OSS's do) says
    it cannot take an SDPA-like kernel: refused without running either attention."""
    from transformers.models.llama.modeling_llama import LlamaPreTrainedModel

    calls = []
    monkeypatch.setattr(runs, "forward_backward", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(LlamaPreTrainedModel, "_supports_sdpa", False)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.verdict == "REFUSED" and "LlamaForCausalLM declares _supports_sdpa = False" in proof.reason
    assert not calls


def test_a_padded_batch_of_several_rows_compares_the_real_tokens_of_each(zoo, proof_cache):
    batch = _text_batch(packed=False)
    batch = {k: torch.cat([v, v]) for k, v in batch.items()}
    batch["attention_mask"][1, 20:] = 0  # the second row right-padded, as the collator pads
    batch["labels"][1, 20:] = -100
    proof = prove_swap(str(zoo["llama"]), batch, backend="sdpa")
    assert proof.verdict == "PASS" and not proof.packed, proof.reason
    assert proof.batch == "padded batch (2, 24)"


def test_the_cache_follows_the_models_own_code(biased_model, proof_cache, tmp_path):
    """A remote-code model whose modeling file changed is proven again, not served the old
    verdict."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(biased_model, folder)
    modeling = folder / "modeling_biased.py"
    source = modeling.read_text()
    # revision 1: no bias at all (neither attention gets one): the swap serves it
    modeling.write_text(source.replace("position_bias=bias, **kwargs)", "**kwargs)"))
    first = prove_swap(str(folder), _text_batch(), backend="sdpa", trust_remote_code=True)
    assert first.verdict == "PASS", first.reason
    modeling.write_text(source)  # revision 2: the bias handed over, so refused by name
    second = prove_swap(str(folder), _text_batch(), backend="sdpa", trust_remote_code=True)
    assert not second.cached and second.verdict == "FAIL" and "position_bias" in second.reason


def test_a_model_whose_shrunk_config_cannot_run_fails_the_proof_in_one_line(zoo, proof_cache, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("The set of layer types producing a cache is different\nsecond line")

    monkeypatch.setattr(swap, "_build", broken)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.verdict == "FAIL"
    assert proof.reason == ("the proof could not run: eager on the model shrunk from its config raised "
                            "ValueError: The set of layer types producing a cache is different")


def _swapped_run_altered(monkeypatch, alter):
    """``runs.forward_backward`` with ``alter(logits, loss, grads)`` applied to the swap's run (the
    second); returns the list of runs made."""
    real, made = runs.forward_backward, []

    def altered(*args, **kwargs):
        logits, loss, grads, lengths = real(*args, **kwargs)
        made.append(len(made))
        if len(made) == 2:
            logits, loss, grads = alter(logits, loss, grads)
        return logits, loss, grads, lengths

    monkeypatch.setattr(runs, "forward_backward", altered)
    return made


def test_a_nan_in_one_gradient_of_the_swap_fails_the_proof(zoo, proof_cache, monkeypatch):
    """``max_rel_grad > tolerance`` is False for a NaN: the proof used to pass it."""

    planted = []

    def nan_in_one_gradient(logits, loss, grads):
        planted.append(sorted(grads)[0])
        grads[planted[0]].view(-1)[0] = float("nan")
        return logits, loss, grads

    made = _swapped_run_altered(monkeypatch, nan_in_one_gradient)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    # The third run: eager on the packed rows, whose gradients are finite: the NaN is the swap's.
    assert made == [0, 1, 2]
    assert proof.verdict == "FAIL" and proof.reason == (
        f"non-finite gradients with the swapped attention (first: {planted[0]})")
    assert proof.max_abs_logits < 1e-5  # the logits and the loss alone would have passed


def test_nan_logits_of_the_swap_fail_the_proof(zoo, proof_cache, monkeypatch):
    def nan_logits(logits, loss, grads):
        logits[0][0, 0] = float("nan")
        return logits, loss, grads

    made = _swapped_run_altered(monkeypatch, nan_logits)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert made == [0, 1]
    assert proof.verdict == "FAIL" and "non-finite logits (eager or swapped)" in proof.reason


def test_a_swap_that_lets_packed_samples_meet_is_the_attentions_fault(zoo, proof_cache, monkeypatch):
    """Eager keeps the samples apart, the swap attends across the row: the attention's
    finding (packing_leak empty, so the refusal says the attention), never a model layer's."""
    real = hf_integration._varlen_forward

    def whole_row(api, query, key, value, segments, *args):
        return real(api, query, key, value, [sum(segments)], *args)

    monkeypatch.setattr(hf_integration, "_varlen_forward", whole_row)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    eager, swapped = proof.isolation
    assert eager.passed and eager.leak == 0.0 and not swapped.passed
    assert proof.verdict == "FAIL" and not proof.packing_leak and proof.eager_ran
    assert "hyport's attention lets packed samples reach one another" in proof.reason
    assert "from model.layers.0.self_attn (class LlamaAttention)" in proof.reason


def test_a_layer_that_mixes_samples_with_eager_too_is_the_models(tmp_path, zoo, proof_cache):
    write_leaky_lfm2(tmp_path, zoo["llama"])
    proof = prove_swap(str(tmp_path), _text_batch(), backend="sdpa", use_cache=False)
    assert [i.passed for i in proof.isolation] == [False, False]
    assert proof.verdict == "FAIL" and proof.reason == proof.packing_leak
    assert proof.packing_leak.startswith("layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes tokens")


def test_a_weights_file_that_does_not_read_is_said_as_such(tmp_path, zoo, proof_cache):
    import shutil

    folder = tmp_path / "cut"
    shutil.copytree(zoo["llama"], folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    proof = prove_swap(str(folder), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.verdict == "FAIL" and not proof.eager_ran
    assert proof.reason.startswith("the proof could not run: the checkpoint's weights could not be read (")


def test_the_logits_bound_comes_from_float32s_own_error_not_from_1e_3(zoo, proof_cache, monkeypatch):
    """A swap 5e-5 off on one logit passed the table's 1e-3; float32's own error on this model
    and batch (eager against float64) is a few 1e-7, and the bound is 8 times that."""
    exact = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert exact.passed and 0 < exact.float32_noise < 1e-5
    assert NOISE_MARGIN * exact.float32_noise <= exact.logits_bound < 1e-4
    assert exact.max_abs_logits <= exact.logits_bound
    assert f"set from float32's own error here, {exact.float32_noise:.1e})" in exact.line()

    def off_by_5e_5(logits, loss, grads):
        logits[0][0, 0] += 5e-5
        return logits, loss, grads

    _swapped_run_altered(monkeypatch, off_by_5e_5)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.verdict == "FAIL"
    assert proof.reason == f"logits differ from eager by {proof.max_abs_logits:.3g} (> {proof.logits_bound:g})"


def test_a_model_without_a_float64_path_keeps_the_tables_bound(zoo, proof_cache, monkeypatch):
    def no_float64(*args, **kwargs):
        return None

    monkeypatch.setattr(runs, "float32_noise", no_float64)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.passed and proof.float32_noise is None and proof.logits_bound == 1e-3
    assert "≤ 0.001, no float64 run to measure by" in proof.line()


def test_an_inf_loss_of_the_swap_fails_the_proof(zoo, proof_cache, monkeypatch):
    made = _swapped_run_altered(monkeypatch, lambda logits, loss, grads: (logits, float("inf"), grads))
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert made == [0, 1]
    assert proof.verdict == "FAIL" and "a non-finite loss (eager " in proof.reason and "swapped inf" in proof.reason


def test_the_proof_runs_on_the_checkpoints_weights_and_says_so(zoo, proof_cache):
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa")
    assert proof.weights == "checkpoint weights for 21 of 21 tensors"
    assert f"; {proof.weights}; packed batch" in proof.line()


@pytest.fixture(scope="module")
def tiny_default():
    from hyport_lib.models.tiny import ensure_tiny_model

    return str(ensure_tiny_model())  # before proof_cache moves HYPORT_CACHE: the shared copy


def test_the_tiny_default_and_a_folder_without_safetensors_say_their_weights_are_random(
        zoo, tiny_default, proof_cache, tmp_path):
    import shutil

    tiny = prove_swap(tiny_default, _text_batch(), backend="sdpa")
    assert tiny.verdict == "PASS", tiny.reason
    assert tiny.weights == "random weights (seeded): the tiny default's random weights" and tiny.weights in tiny.line()
    folder = tmp_path / "no-weights"
    shutil.copytree(zoo["llama"], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    bare = prove_swap(str(folder), _text_batch(), backend="sdpa")
    assert bare.verdict == "PASS", bare.reason
    assert bare.weights == ("random weights (seeded): no-weights holds no safetensors weights "
                            "(model.safetensors or model.safetensors.index.json)")


def test_the_cache_follows_the_weights(zoo, proof_cache, tmp_path):
    """Other weights are proven again, and the proof runs on them (another loss)."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(zoo["llama"], folder)
    first = prove_swap(str(folder), _text_batch(), backend="sdpa")
    weights = folder / "model.safetensors"
    save_file({k: v * 2 for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
    second = prove_swap(str(folder), _text_batch(), backend="sdpa")
    assert not first.cached and not second.cached and second.verdict == "PASS", second.reason
    assert abs(second.loss_eager - first.loss_eager) > 1e-3
    os.utime(weights, ns=(1, 1))  # the same bytes, another mtime: proven again (cheap key, no hash)
    assert not prove_swap(str(folder), _text_batch(), backend="sdpa").cached
    assert prove_swap(str(folder), _text_batch(), backend="sdpa").cached


def test_a_shard_outside_the_folder_stops_the_proof_in_one_line(zoo, proof_cache, tmp_path):
    import json
    import shutil

    from hyport_lib.checkpoint_files.weight_files import UnsafeCheckpoint

    folder = tmp_path / "model"
    shutil.copytree(zoo["llama"], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "/etc/passwd"}}))
    with pytest.raises(UnsafeCheckpoint, match="names the shard '/etc/passwd', not a file name inside"):
        prove_swap(str(folder), _text_batch(), backend="sdpa")
