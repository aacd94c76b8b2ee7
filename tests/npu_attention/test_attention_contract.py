"""hyport's attention accepts exactly what it computes with: refused arguments are named,
MLA's head dims are served exactly, and the workers train without the KV cache the proof
runs without (the proof itself: tests/proof/)."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.port.generated.flash_attn_ascend import FlashAttnUnsupported
from hyport_lib.npu_attention.hf_integration import (UnsupportedAttentionArgument, attention_forward,
                                                     check_attention_arguments, sdpa_refusal)


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



# --- training without a KV cache -------------------------------------------------------


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
