"""hyport's attention accepts exactly what it computes with, and the swap proves itself on
the user's model before a launch: refused arguments are named, MLA's head dims are
served exactly, and a model the swap cannot serve is kept on eager or stopped."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.models import attention_proof
from hyport_lib.models.attention_proof import prove_swap, sdpa_refusal
from hyport_lib.models.shrunk_model import shrunk_config
from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.port.generated.flash_attn_ascend import FlashAttnUnsupported
from hyport_lib.npu_attention.hf_integration import (UnsupportedAttentionArgument, attention_forward,
                                                     check_attention_arguments)
from biased_attention_model import write_biased_model


class _Attention(torch.nn.Module):
    is_causal = True

    def __init__(self, layer_idx=3):
        super().__init__()
        self.layer_idx = layer_idx


def _qkv(batch=1, heads=4, kv_heads=2, seq=9, dim=16, value_dim=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, dim, generator=generator)
    k = torch.randn(batch, kv_heads, seq, dim, generator=generator)
    v = torch.randn(batch, kv_heads, seq, value_dim or dim, generator=generator)
    return q, k, v


def _reference(q, k, v, scale, segments=None):
    """float64 causal attention (within each packed segment): (B, S, N, Dv)."""
    groups = q.shape[1] // k.shape[1]
    k, v = (t.double().repeat_interleave(groups, dim=1) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) * scale
    seq = q.shape[2]
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril()
    if segments:
        ids = torch.repeat_interleave(torch.arange(len(segments)), torch.tensor(segments))
        allowed &= ids.unsqueeze(0) == ids.unsqueeze(1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


# --- the contract ------------------------------------------------------------------------


@pytest.mark.parametrize("name,value,shown", [
    ("position_bias", torch.zeros(1, 4, 9, 9), "position_bias=<tensor (1, 4, 9, 9) float32>"),
    ("sinks", torch.zeros(1, 4, 9, 1), "sinks=<tensor (1, 4, 9, 1) float32>"),
    ("s_aux", torch.zeros(4), "s_aux=<tensor (4,) float32>"),
    ("softcap", 50.0, "softcap=50.0"),
    ("brand_new_flag", True, "brand_new_flag=True"),
])
def test_an_argument_hyport_does_not_compute_with_is_refused_by_name(name, value, shown):
    q, k, v = _qkv()
    with pytest.raises(UnsupportedAttentionArgument) as raised:
        attention_forward(FlashAttnAPI("sdpa"), _Attention(), q, k, v, **{name: value})
    message = str(raised.value)
    assert message.startswith("hyport attention: _Attention (layer 3) passed ")
    assert shown in message and "attn_implementation='eager'" in message
    assert "\n" not in message
    assert isinstance(raised.value, FlashAttnUnsupported)  # caught wherever refusals are


@pytest.mark.parametrize("kwargs", [
    {"position_bias": None, "sinks": None, "softcap": None, "s_aux": None},
    {"softcap": 0.0, "brand_new_flag": False},
    {"use_cache": True, "output_attentions": False, "num_items_in_batch": torch.tensor(7),
     "logits_to_keep": 0, "image_sizes": None, "cache_position": torch.arange(9)},
])
def test_arguments_that_ask_for_nothing_or_carry_no_attention_input_pass(kwargs):
    q, k, v = _qkv()
    out, _ = attention_forward(FlashAttnAPI("sdpa"), _Attention(), q, k, v, **kwargs)
    expected = _reference(q, k, v, 16 ** -0.5)
    assert torch.allclose(out.double(), expected, atol=1e-5)


def test_the_understood_and_passed_through_sets_do_not_overlap_refused_names():
    for refused in ("position_bias", "sinks", "s_aux", "softcap", "alibi_slopes"):
        assert refused not in hf_integration.UNDERSTOOD_ARGUMENTS | hf_integration.PASSED_THROUGH_ARGUMENTS
        with pytest.raises(UnsupportedAttentionArgument):
            check_attention_arguments(_Attention(), {refused: torch.ones(1)})


def test_a_real_model_handing_sinks_and_a_bias_is_refused_not_dropped():
    """Inkling2 (transformers 5.x) passes a relative position bias and per-token sinks to
    its attention function and declares _supports_sdpa = False."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Inkling2ForCausalLM"):
        pytest.skip("this transformers has no Inkling2")
    from transformers import Inkling2ForCausalLM, Inkling2TextConfig

    name = hf_integration.register_hyport_attention("sdpa")
    config = Inkling2TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = Inkling2ForCausalLM(config).eval()
    assert "_supports_sdpa = False" in sdpa_refusal(model)
    model.config._attn_implementation = name  # what registering under a new name used to allow
    with pytest.raises(UnsupportedAttentionArgument, match=r"passed (position_bias|sinks)="):
        model(input_ids=torch.arange(1, 9).unsqueeze(0))


@pytest.mark.parametrize("backend", ["sdpa", "npu-emulated"])
def test_vision_code_cu_seqlens_keep_images_apart(backend):
    """Older vision towers hand the whole patch sequence with ``cu_seqlens``: understood,
    never dropped (dropping it lets one image attend to another)."""
    q, k, v = _qkv(heads=2, kv_heads=2, seq=10)
    out, _ = attention_forward(FlashAttnAPI(backend), _Attention(), q, k, v, is_causal=False,
                               scaling=0.25, cu_seqlens=torch.tensor([0, 4, 10]), max_seqlen=6)
    for start, end in ((0, 4), (4, 10)):
        alone = torch.nn.functional.scaled_dot_product_attention(
            q[:, :, start:end].double(), k[:, :, start:end].double(), v[:, :, start:end].double(), scale=0.25)
        assert torch.allclose(out[:, start:end].double(), alone.transpose(1, 2), atol=1e-5)


# --- MLA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sdpa", "npu-emulated"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_mla_value_head_dim_is_served_exactly(backend, packed):
    """DeepSeek-V3's MLA: q/k head dim 24, v head dim 16 (NFA takes one head dim)."""
    q, k, v = _qkv(seq=10, dim=24, value_dim=16)
    scale = 24 ** -0.5
    kwargs = {}
    segments = None
    if packed:
        segments = [4, 6]
        kwargs["position_ids"] = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4, 5]])
    out, _ = attention_forward(FlashAttnAPI(backend), _Attention(), q, k, v, scaling=scale, **kwargs)
    assert out.shape == (1, 10, 4, 16)
    assert torch.allclose(out.double(), _reference(q, k, v, scale, segments), atol=1e-5)


# --- the proof before launch -------------------------------------------------------------


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
    monkeypatch.setattr(attention_proof, "_forward_backward", lambda *a, **k: calls.append(a))
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

    monkeypatch.setattr(attention_proof, "_build", broken)
    proof = prove_swap(str(zoo["llama"]), _text_batch(), backend="sdpa", use_cache=False)
    assert proof.verdict == "FAIL"
    assert proof.reason == ("the proof could not run: eager on the model shrunk from its config raised "
                            "ValueError: The set of layer types producing a cache is different")


def test_the_shrunk_config_keeps_one_layer_of_every_kind():
    from transformers import Gemma3TextConfig, LlamaConfig

    gemma = Gemma3TextConfig(num_hidden_layers=12, sliding_window_pattern=6)
    small, said = shrunk_config(gemma)
    assert small.num_hidden_layers == 6 and said == "6 of 12 decoder layers"
    assert set(small.layer_types) == {"sliding_attention", "full_attention"}
    assert gemma.num_hidden_layers == 12  # the caller's config is untouched
    llama, said = shrunk_config(LlamaConfig(num_hidden_layers=32))
    assert llama.num_hidden_layers == 2 and said == "2 of 32 decoder layers"
    assert shrunk_config(LlamaConfig(num_hidden_layers=2))[1] == "all 2 decoder layers"


def test_a_cross_attention_model_keeps_its_first_cross_attention_layer():
    from transformers import MllamaTextConfig

    text = MllamaTextConfig(num_hidden_layers=8, cross_attention_layers=[3, 7])
    small, said = shrunk_config(text)
    assert small.num_hidden_layers == 4 and small.cross_attention_layers == [3]


def test_per_layer_lists_and_shared_kv_layers_are_cut_with_the_layers():
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=6)
    config.activation_sparsity_pattern = [0.95, 0.95, 0, 0, 0, 0]
    config.num_kv_shared_layers = 3
    small, _ = shrunk_config(config)
    assert small.num_hidden_layers == 2 and small.activation_sparsity_pattern == [0.95, 0.95]
    assert small.num_kv_shared_layers == 0


def test_a_slim_config_keeps_attention_and_cuts_mlps_and_experts():
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(num_hidden_layers=61, n_routed_experts=256, num_experts_per_tok=8,
                              n_group=8, topk_group=4)
    small, said = shrunk_config(config, slim=True)
    assert said == "2 of 61 decoder layers, MLPs and experts slimmed"
    assert small.n_routed_experts == 8 and small.n_group == 1 and small.topk_group == 1
    assert small.intermediate_size == 128 and small.moe_intermediate_size == 128
    for kept in ("hidden_size", "num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim", "kv_lora_rank", "q_lora_rank", "vocab_size"):
        assert getattr(small, kept) == getattr(config, kept), kept


@pytest.mark.parametrize("name", ["llama", "qwen2_vl"])
def test_the_workers_train_without_a_kv_cache_as_the_proof_ran(zoo, name):
    """transformers 4.57's Mistral, Phi-3, Qwen2 and Starcoder2 create a cache in training
    when use_cache is on, and then skip the packed-sequence mask: the workers turn it off on
    every config the model reads."""
    from hyport_lib.train.params import Params
    from hyport_lib.train.worker import _load_model

    spec = {"model_path": str(zoo[name]), "attn_implementation": "eager"}
    model, _ = _load_model(spec, Params(model_path=str(zoo[name])))
    configs = [model.config] + ([model.config.text_config] if hasattr(model.config, "text_config") else [])
    flags = [config.use_cache for config in configs if hasattr(config, "use_cache")]
    assert flags and not any(flags)  # Qwen2-VL keeps it on its text config only


def test_a_vlm_whose_first_rows_hold_no_image_is_also_proven_on_an_image_row(zoo, proof_cache, tmp_path, monkeypatch):
    """The Trainer draws rows at random: the vision tower's attention is proven too."""
    import json as json_module

    from hyport_lib.models.loading import load_processor
    from hyport_lib.train.attention_choice import choose_attention
    from hyport_lib.train.dataset import load_dataset
    from hyport_lib.train.params import Params
    from zoo import mixed_dataset

    data = mixed_dataset(tmp_path / "data")
    records = json_module.loads(data.read_text())
    data.write_text(json_module.dumps(records[::-1]))  # the text-only record first
    loaded = load_processor(str(zoo["qwen2_vl"]))
    params = Params(model_path=str(zoo["qwen2_vl"]), packing=False, attn_implementation="hyport_torch")
    proven = []
    real = attention_proof._run_proof
    monkeypatch.setattr(attention_proof, "_run_proof",
                        lambda proof, config, batch, *a: proven.append(set(batch)) or real(proof, config, batch, *a))
    choice = choose_attention(params, "cpu", str(zoo["qwen2_vl"]), loaded, load_dataset(data).records, [])
    assert choice.proof.passed and len(choice.proof.also) == 1 and "PASS" in choice.proof.also[0]
    assert "pixel_values" not in proven[0] and "pixel_values" in proven[1]
    assert "and on an image row: attention proof PASS" in choice.note


def test_stage_02_keeps_the_padded_verdict_when_the_packed_row_raises(zoo, monkeypatch):
    """A model whose own code cannot take a packed row (Qwen3-Next's linear attention without
    flash-linear-attention) is said to, with the padded comparison kept: no traceback."""
    from hyport_lib.attention.model_check import compare_model

    def raises(*args, **kwargs):
        raise ValueError("chunk_gated_delta_rule can't keep packed sequences apart")

    monkeypatch.setattr(hf_integration, "_varlen_forward", raises)  # only the packed row runs it
    result = compare_model(str(zoo["llama"]), max_new_tokens=2)
    assert result.verdict == "WARN" and result.greedy_identical and result.packed_refused
    assert result.detail.startswith("same top-1 and greedy tokens")
    assert "not compared, the model raised ValueError on the packed row" in result.detail


def test_the_compact_vocabulary_keeps_the_batchs_tokens_and_the_configs_special_ids():
    from transformers import LlamaConfig

    from hyport_lib.models.shrunk_model import compact_vocabulary

    config = LlamaConfig(vocab_size=151936, bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=None)
    ids = torch.tensor([[5, 900, 151645, 5]])
    labels = torch.tensor([[-100, 900, 151645, -100]])
    small, remap = compact_vocabulary(config, [ids, labels])
    assert small.vocab_size == 4 and config.vocab_size == 151936
    assert remap(ids).tolist() == [[0, 1, 3, 0]] and remap(labels).tolist() == [[-100, 1, 3, -100]]
    assert small.bos_token_id == 2 and small.eos_token_id == [3, 2] and small.pad_token_id is None
