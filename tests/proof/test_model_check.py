"""Stage 02's model check (proof/model_check.py): the numerics on the training proof's shrunk
model (eager then switched to the swap, compared on a padded batch, a packed row, greedy tokens),
the behaviour on the whole model loaded once (greedy answers on real weights); a wrong,
bypassed, refused or non-finite swap is said, and so is a behaviour check left out for memory."""

from __future__ import annotations

import json

from hyport_lib.npu_attention import hf_integration
from hyport_lib.proof import behaviour, model_check
from hyport_lib.proof.model_check import ModelComparison, compare_model
from leaky_convolution_model import write_leaky_lfm2


def test_model_level_tiny_model_pass(monkeypatch):
    from hyport_lib.npu_attention import emulation

    calls = []
    real = emulation.npu_fusion_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("input_layout", args[4] if len(args) > 4 else None))
        return real(*args, **kwargs)

    monkeypatch.setattr(emulation, "npu_fusion_attention", counting)
    m = compare_model("tiny", backend="npu-emulated", device="cpu", max_new_tokens=4)
    assert calls, "the swapped model never reached the NPU emulation"
    assert m.verdict == "PASS", m.detail
    assert m.attn_implementation and m.source == "npu-emulated (CPU)"
    assert m.top1_agreement == 1.0 and m.greedy_identical and m.new_tokens == 4
    assert m.max_abs_logits < 1e-3 and 0 <= m.kl_divergence < 1e-6
    assert m.positions > 0
    # the packed row keeps its samples apart, with eager and with the swap
    assert [(i.attention, i.passed) for i in m.packed_isolation] == [("eager", True), (m.attn_implementation, True)]
    # random weights: greedy answers and perplexity would mean nothing, and the record says so
    assert m.behaviour.meaningful is False and m.behaviour.pairs == []
    assert m.behaviour.why == "random weights: not meaningful (the embedded tiny model)"


def test_model_level_catches_a_broken_attention(monkeypatch):
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def broken(module, query, key, value, attention_mask, scaling=None, **kwargs):
        scaling = (scaling or query.shape[-1] ** -0.5) * 4  # a wrong softmax scale
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      scaling=scaling, **kwargs)

    AttentionInterface.register("hyport_test_broken", broken)
    AttentionMaskInterface.register("hyport_test_broken", sdpa_mask)
    monkeypatch.setattr(hf_integration, "register_hyport_attention",
                        lambda backend="auto": "hyport_test_broken")
    m = compare_model("tiny", backend="npu-emulated", device="cpu", max_new_tokens=4)
    assert m.verdict in ("FAIL", "WARN") and m.max_abs_logits > 1e-3
    assert m.kl_divergence > 0


def _register_a_bypassed_swap(monkeypatch) -> None:
    """The swap registered under a name whose function is plain sdpa: a model "switched" to
    it never calls hyport (remote code that bypasses attn_implementation)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    real = hf_integration.register_hyport_attention

    def bypassed(backend="auto", name=None):
        registered = real(backend, "hyport_test_bypassed")
        AttentionInterface.register(registered, sdpa_attention_forward)  # never calls hyport
        return registered

    monkeypatch.setattr(hf_integration, "register_hyport_attention", bypassed)


def test_a_forward_that_never_reaches_the_swapped_attention_is_a_warn(monkeypatch):
    """A "ported" model whose code bypasses attn_implementation (remote code running its
    flash path only `if q.is_cuda:`) makes no swapped-attention call: WARN, naming why."""
    _register_a_bypassed_swap(monkeypatch)
    m = compare_model("tiny", backend="npu-emulated", device="cpu", max_new_tokens=2)
    assert m.swapped_calls == 0 and m.verdict == "WARN" and "is_cuda" in m.detail
    monkeypatch.undo()
    ok = compare_model("tiny", backend="npu-emulated", device="cpu", max_new_tokens=2)
    assert ok.swapped_calls >= 4  # vision tower and text model layers, one forward


REMOTE_MODEL = '''
import torch
from flash_attn import flash_attn_func  # remote code imports flash_attn at module level
from transformers import LlavaForConditionalGeneration

LOADED = []


class GatedLlava(LlavaForConditionalGeneration):
    def __init__(self, config):
        super().__init__(config)
        LOADED.append(flash_attn_func.__module__)

        def own_flash_call(module, args):  # the remote code's own flash-attn call, once a forward
            q = torch.randn(1, 4, 2, 8)
            flash_attn_func(q, q, q)
        self.register_forward_pre_hook(own_flash_call)
'''


def test_the_model_check_loads_remote_code_only_when_asked_with_the_shim_in_place(tmp_path):
    """trust_remote_code reaches the model check: the checkpoint's own class is loaded
    (its module-level `from flash_attn import ...` served by the shim), the record says
    so, and the shim is gone afterwards; off, the library's class is loaded."""
    import shutil
    import sys

    from hyport_lib.npu_attention.flash_api import current_shim
    from hyport_lib.models.tiny import ensure_tiny_model

    folder = tmp_path / "remote"
    shutil.copytree(ensure_tiny_model(), folder)
    (folder / "modeling_gated.py").write_text(REMOTE_MODEL)
    # Weights under the class's own names: transformers renames a legacy checkpoint's keys
    # for its own classes, not for remote ones.
    from safetensors.torch import save_file
    from transformers import AutoModelForImageTextToText

    state = AutoModelForImageTextToText.from_pretrained(folder).state_dict()
    for old in list(folder.glob("model*.safetensors*")):
        old.unlink()
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForImageTextToText": "modeling_gated.GatedLlava"}
    (folder / "config.json").write_text(json.dumps(config))

    plain = compare_model(str(folder), max_new_tokens=2)
    assert plain.trust_remote_code is False and "modeling_gated" not in plain.model_class
    assert plain.verdict == "PASS", plain.detail
    remote = compare_model(str(folder), max_new_tokens=2, trust_remote_code=True,
                           flash_attn_version="2.5.8")
    assert remote.trust_remote_code is True and remote.model_class.endswith("modeling_gated.GatedLlava")
    module = sys.modules[type_module(remote.model_class)]
    assert module.LOADED and module.LOADED[0] == "hyport_lib.port.generated.flash_attn_ascend"  # the shim serves it
    assert remote.verdict == "PASS" and remote.swapped_calls > 0, remote.detail
    assert current_shim() is None and "flash_attn" not in sys.modules
    # again in the same process (a notebook cell re-run): the model code imports this check's
    # shim, not the first one's, so its flash-attn call is counted again
    again = compare_model(str(folder), max_new_tokens=2, trust_remote_code=True)
    assert again.swapped_calls == remote.swapped_calls
    # a shim the user installed is back afterwards, as it was
    from hyport_lib.npu_attention.flash_api import install_flash_attn_shim, uninstall_flash_attn_shim

    install_flash_attn_shim("sdpa", version="2.5.8")
    try:
        compare_model(str(folder), max_new_tokens=2, trust_remote_code=True)
        assert current_shim() is not None and current_shim().version == "2.5.8"
        assert current_shim().backend == "sdpa"
    finally:
        uninstall_flash_attn_shim()


def type_module(qualified: str) -> str:
    return qualified.rsplit(".", 1)[0]


def test_the_model_check_runs_in_the_runs_dtype_and_judges_half_precision_near_ties_as_warn():
    from hyport_lib.proof.model_check import _padded_verdict, model_check_dtype
    from hyport_lib.proof.tolerance import LOGITS, Compared

    assert model_check_dtype("auto", "npu") == "bfloat16"  # the dtype an NPU run trains and serves in
    assert model_check_dtype("auto", "cpu") == model_check_dtype("auto", "cuda") == "float32"
    assert model_check_dtype("float16", "npu") == "float16"

    def verdict(dtype, top1, greedy=True):
        m = ModelComparison("m", "hyport_npu_emulated", "npu-emulated", dtype, "cpu", max_abs_logits=0.01,
                            top1_agreement=top1, greedy_identical=greedy, swapped_calls=2)
        logits = Compared(LOGITS, dtype, 0.01, 1.0, True, 1.0, top1, 0.0)
        return _padded_verdict(m, "hyport_npu_emulated", "hyport_npu_emulated", logits)[0]

    assert verdict("float32", 0.995) == "FAIL"  # exact math: any flip is a wrong attention
    assert verdict("bfloat16", 0.995) == "WARN" and verdict("bfloat16", 1.0, greedy=False) == "WARN"
    assert verdict("bfloat16", 0.9) == "FAIL"  # more than near-ties
    m = compare_model("tiny", backend="npu-emulated", device="cpu", dtype="bfloat16", max_new_tokens=2)
    assert m.dtype == "bfloat16" and m.verdict in ("PASS", "WARN") and m.swapped_calls > 0, m.detail


def test_stage_02_keeps_the_padded_verdict_when_the_packed_row_raises(zoo, monkeypatch):
    """A model whose own code cannot take a packed row (Qwen3-Next's linear attention without
    flash-linear-attention) is said to, with the padded comparison kept: no traceback."""
    def raises(*args, **kwargs):
        raise ValueError("chunk_gated_delta_rule can't keep packed sequences apart")

    monkeypatch.setattr(hf_integration, "_varlen_forward", raises)  # only the packed row runs it
    result = compare_model(str(zoo["llama"]), max_new_tokens=2)
    assert result.verdict == "WARN" and result.greedy_identical and result.packed_refused
    assert result.detail.startswith("same top-1 and greedy tokens")
    assert "not compared, the model raised ValueError on the packed row" in result.detail


def test_stage_02_says_packing_would_be_refused_for_a_layer_that_mixes_samples(zoo, tmp_path):
    """The swap is exact (eager and the swap leak alike on the packed row): the verdict is a
    WARN naming the convolution, never a FAIL of the attention."""
    write_leaky_lfm2(tmp_path, zoo["llama"])
    result = compare_model(str(tmp_path), backend="sdpa", max_new_tokens=2)
    assert result.verdict == "WARN" and result.greedy_identical and result.max_abs_logits < 1e-5
    assert [i.passed for i in result.packed_isolation] == [False, False]  # eager leaks as the swap does
    isolation = result.packed_isolation[-1]
    assert not isolation.passed and isolation.module_class == "Lfm2ShortConv"
    assert 2e-5 < isolation.leak < 5e-4 and isolation.bound < 1e-5
    assert ("packed training would be refused: layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes "
            "tokens across samples") in result.detail


def test_stage_02_fails_a_swap_that_lets_packed_samples_meet(zoo, monkeypatch):
    """Eager keeps the row's samples apart and the swap does not: a FAIL of the attention,
    never a WARN that blames a model layer."""
    real = hf_integration._varlen_forward

    def whole_row(api, query, key, value, segments, *args):
        return real(api, query, key, value, [sum(segments)], *args)

    monkeypatch.setattr(hf_integration, "_varlen_forward", whole_row)
    result = compare_model(str(zoo["llama"]), backend="sdpa", max_new_tokens=2)
    eager, swapped = result.packed_isolation
    assert eager.passed and not swapped.passed
    assert result.verdict == "FAIL" and "hyport's attention lets packed samples reach one another" in result.detail
    assert "packed training would be refused" not in result.detail


def test_stage_02_says_a_model_keeps_packed_samples_apart(zoo):
    result = compare_model(str(zoo["llama"]), backend="sdpa", max_new_tokens=2)
    assert result.verdict == "PASS" and all(i.passed for i in result.packed_isolation), result.detail
    assert [i.attention for i in result.packed_isolation] == ["eager", "hyport_torch"]
    assert ", samples kept apart (a sample's logits moved by" in result.detail


def test_the_whole_model_is_loaded_once_and_runs_eager_then_the_swap_in_each_dtype(zoo, monkeypatch):
    """The numerics run on the training proof's shrunk model (built, never loaded); the
    behaviour loads the whole model once, in the check's dtype, and switches it in place:
    eager, the swap, then in bfloat16 eager and the swap, each seen calling its attention."""
    import torch
    from transformers import PreTrainedModel
    from transformers.models.llama import modeling_llama

    loads, whole, calls, pretrained = [], [], [], []
    real_load, real_swap = behaviour.load_model, hf_integration.attention_forward
    real_from_pretrained = PreTrainedModel.from_pretrained.__func__

    def load_counted(config):
        model, loaded = real_load(config)
        loads.append((config.attn_implementation, config.dtype))
        whole.append(model)
        return model, loaded

    def from_pretrained(cls, *args, **kwargs):
        pretrained.append(cls.__name__)
        return real_from_pretrained(cls, *args, **kwargs)

    def counting_eager(real):
        def eager(module, query, *args, **kwargs):
            calls.append(("eager", module, query.dtype))  # kept alive: ids stay unique
            return real(module, query, *args, **kwargs)
        return eager

    def swap(api, module, query, *args, **kwargs):
        calls.append(("swap", module, query.dtype))
        return real_swap(api, module, query, *args, **kwargs)

    monkeypatch.setattr(behaviour, "load_model", load_counted)
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(from_pretrained))
    monkeypatch.setattr(modeling_llama, "eager_attention_forward",
                        counting_eager(modeling_llama.eager_attention_forward))
    monkeypatch.setattr(hf_integration, "attention_forward", swap)
    # the zoo's weights are random: taken as pretrained here, so the behaviour runs whole
    for module in (model_check, behaviour):
        monkeypatch.setattr(module, "random_weights_reason", lambda path, mean_top1=None: None)
    m = compare_model(str(zoo["llama"]), backend="sdpa", max_new_tokens=2)
    assert loads == [("eager", "float32")] and pretrained == ["LlamaForCausalLM"], (loads, pretrained)
    on_whole = {id(module) for module in whole[0].modules()}
    ran = list(dict.fromkeys((kind, dtype) for kind, module, dtype in calls if id(module) in on_whole))
    assert ran == [("eager", torch.float32), ("swap", torch.float32), ("eager", torch.bfloat16),
                   ("swap", torch.bfloat16)]
    # the numerics ran on another model: the shrunk one, with the checkpoint's weights
    assert {kind for kind, module, _ in calls if id(module) not in on_whole} == {"eager", "swap"}
    assert "checkpoint weights for" in m.numerics_model and m.swapped_calls > 0
    name = m.attn_implementation
    assert m.behaviour.meaningful and m.behaviour.ran[0::2] == ["eager", "eager, bfloat16"]
    assert [said.split(":")[0] for said in m.behaviour.ran[1::2]] == [name, f"{name}, bfloat16"]
    assert all(pair.swapped_calls > 0 and f"{pair.swapped_calls:,} swapped calls" in said
               for pair, said in zip(m.behaviour.pairs, m.behaviour.ran[1::2]))
    assert [pair.dtype for pair in m.behaviour.pairs] == ["float32", "bfloat16"]
    assert m.verdict in ("PASS", "WARN"), m.detail


def test_a_swap_the_whole_model_never_calls_is_not_said_to_have_run(monkeypatch):
    """The behaviour's pairs once said the swap ran, and its answers were identical, from the
    switch alone: a model whose code bypasses the registered swap answered as eager does."""
    _register_a_bypassed_swap(monkeypatch)
    # the tiny model's weights are random: taken as pretrained here, so the behaviour runs whole
    for module in (model_check, behaviour):
        monkeypatch.setattr(module, "random_weights_reason", lambda path, mean_top1=None: None)
    m = compare_model("tiny", backend="npu-emulated", device="cpu", max_new_tokens=2)
    assert m.behaviour.meaningful and m.behaviour.ran == ["eager", "eager, bfloat16"]
    assert len(m.behaviour.pairs) == 2
    for pair in m.behaviour.pairs:
        assert pair.swapped_calls == 0 and not pair.identical and pair.answers == []
        assert pair.not_compared == "not compared: the swap was never called"
    assert m.behaviour.line() == ("behaviour: hyport_test_bypassed, float32: not compared: the swap was never "
                                  "called; NPU emulation, bfloat16: not compared: the swap was never called")
    assert m.verdict == "WARN"


def test_a_behaviour_check_left_out_for_memory_loads_nothing_and_says_why(monkeypatch):
    loads = []
    monkeypatch.setattr(behaviour, "load_model", lambda config: loads.append(config) or None)
    for module in (model_check, behaviour):
        monkeypatch.setattr(module, "random_weights_reason", lambda path, mean_top1=None: None)
    why = "30.1 GiB of host RAM for 1 process > the host's 16.0 GiB"
    m = compare_model("tiny", max_new_tokens=2, behaviour_left_out=why)
    assert loads == [] and m.left_out == why
    assert not m.behaviour.meaningful and m.behaviour.line() == f"behaviour: left out: {why}"
    assert m.verdict == "PASS" and m.max_abs_logits is not None, m.detail  # the numerics still ran


def test_nan_logits_of_the_swap_fail_the_model_check(monkeypatch):
    """A swap whose output is NaN: every comparison with it is false, none may pass."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def nan_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
        return out * float("nan"), weights

    AttentionInterface.register("hyport_test_nan", nan_attention)
    AttentionMaskInterface.register("hyport_test_nan", sdpa_mask)
    monkeypatch.setattr(hf_integration, "register_hyport_attention", lambda backend="auto": "hyport_test_nan")
    m = compare_model("tiny", max_new_tokens=2)
    assert m.verdict == "FAIL" and "non-finite logits (eager or swapped)" in m.detail
    assert m.max_abs_logits == float("inf") and m.top1_agreement is None
