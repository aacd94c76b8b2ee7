"""hyport attention registered with transformers (npu_attention/hf_integration.py): the same
logits as eager on tiny models; it accepts exactly what it computes with (refused arguments
are named), serves MLA's head dims exactly, reads packed rows and spans from the model's
keywords; the workers train without the KV cache the proof runs without (the proof
itself: tests/proof/)."""

from __future__ import annotations

import pytest
import torch

from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.npu_attention.hf_integration import (UnsupportedAttentionArgument, attention_forward,
                                                     check_attention_arguments, register_hyport_attention,
                                                     sdpa_refusal)
from hyport_lib.port.generated.flash_attn_ascend import FlashAttnUnsupported

transformers = pytest.importorskip("transformers")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def _logits(model, impl, **inputs):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(**inputs).logits


@pytest.fixture(scope="module")
def llama():
    return _tiny_llama()


@pytest.fixture(params=["sdpa", "npu"])
def impl(request):
    """Registered name for each backend; the npu one runs through the torch_npu double."""
    if request.param == "npu":
        request.getfixturevalue("fake_npu")
    return register_hyport_attention(request.param)


@pytest.fixture
def varlen_calls(monkeypatch):
    calls = []
    real = hf_integration._varlen_forward

    def spy(*args, **kwargs):
        calls.append(args[4])  # segments
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_integration, "_varlen_forward", spy)
    return calls


def test_registered_names_avoid_flash():
    assert register_hyport_attention("sdpa") == "hyport_torch"
    assert register_hyport_attention("npu-emulated") == "hyport_npu_emulated"
    assert "flash" not in register_hyport_attention("cpu", name="hyport_custom")
    with pytest.raises(ValueError, match="flash"):
        register_hyport_attention("sdpa", name="my_flash_attention")
    for reserved in ("my_sdpa", "flex_attention_x", "paged_thing"):
        with pytest.raises(ValueError, match="specially"):
            register_hyport_attention("sdpa", name=reserved)


def test_a_model_without_sdpa_support_accepts_the_cpu_name():
    """transformers checks SDPA support for any name containing 'sdpa'; ours avoids it."""
    from transformers import LlamaForCausalLM

    class NoSdpaLlama(LlamaForCausalLM):
        _supports_sdpa = False

    model = NoSdpaLlama._from_config(_tiny_llama().config, attn_implementation="eager").eval()
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        model.set_attn_implementation("sdpa")  # the check a name with "sdpa" would trigger
    name = register_hyport_attention("sdpa")
    model.set_attn_implementation(name)
    assert model.config._attn_implementation == name


def test_attention_sinks_are_refused_not_dropped():
    api = FlashAttnAPI("sdpa")
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(FlashAttnUnsupported, match="s_aux"):
        hf_integration.attention_forward(api, None, q, q, q, s_aux=torch.zeros(2))


def test_left_padded_batch_matches_eager(llama, impl):
    ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :1] = 0
    eager = _logits(llama, "eager", input_ids=ids, attention_mask=mask)
    ours = _logits(llama, impl, input_ids=ids, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(ours[real], eager[real], rtol=1e-4, atol=1e-5)
    assert torch.isfinite(ours).all()


def test_packed_batch_matches_eager_and_separate_samples(llama, impl, varlen_calls):
    ids = torch.randint(0, 64, (1, 10), generator=torch.Generator().manual_seed(2))
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]])
    eager = _logits(llama, "eager", input_ids=ids, position_ids=position_ids, use_cache=False)
    ours = _logits(llama, impl, input_ids=ids, position_ids=position_ids, use_cache=False)
    torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-5)
    assert varlen_calls and all(seg == (4, 3, 3) for seg in varlen_calls)  # the mask was verified
    separate = torch.cat([_logits(llama, "eager", input_ids=ids[:, a:b])
                          for a, b in ((0, 4), (4, 7), (7, 10))], dim=1)
    varlen_calls.clear()
    # with the default use_cache=True transformers' masks ignore packing; like FlashAttention-2,
    # hyport honours the restarting position_ids anyway
    ours_cached = _logits(llama, impl, input_ids=ids, position_ids=position_ids)
    torch.testing.assert_close(ours_cached, separate, rtol=1e-4, atol=1e-5)
    assert varlen_calls


def test_packed_training_gradients_match_eager(impl):
    model = _tiny_llama().train()
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(7))
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    grads = {}
    for name in ("eager", impl):
        model.set_attn_implementation(name)
        model.zero_grad()
        out = model(input_ids=ids, position_ids=position_ids, labels=ids, use_cache=False)
        out.loss.backward()
        grads[name] = model.model.layers[0].self_attn.q_proj.weight.grad.clone()
    torch.testing.assert_close(grads[impl], grads["eager"], rtol=1e-4, atol=1e-6)


def test_mask_that_is_not_packing_is_used_densely(llama, impl, varlen_calls):
    # restarting position_ids *and* a padding mask: transformers builds a padded causal
    # mask without packing (as FlashAttention-2 does, which unpads by the mask); the 4-D
    # mask fails hyport's "is this packing?" check, so the mask wins over the positions
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(3))
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]])
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[0, -1] = 0
    eager = _logits(llama, "eager", input_ids=ids, attention_mask=mask, position_ids=position_ids,
                    use_cache=False)
    ours = _logits(llama, impl, input_ids=ids, attention_mask=mask, position_ids=position_ids,
                   use_cache=False)
    torch.testing.assert_close(ours[:, :-1], eager[:, :-1], rtol=1e-4, atol=1e-5)
    assert not varlen_calls


def _additive(keep: torch.Tensor) -> torch.Tensor:
    return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)


def _hand_span_mask(spans, attention_mask):
    """(B, 1, S, S) keep mask: a real key, and causal or the query's own span."""
    batch, seqlen = spans.shape
    hand = torch.zeros(batch, 1, seqlen, seqlen, dtype=torch.bool)
    for b in range(batch):
        for i in range(seqlen):
            for j in range(seqlen):
                same_span = spans[b, i] != 0 and spans[b, i] == spans[b, j]
                hand[b, 0, i, j] = bool(attention_mask[b, j] and (j <= i or same_span))
    return hand


def test_span_kwarg_matches_eager_with_hand_mask(llama, impl):
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(4))
    spans = torch.tensor([[0, 1, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 2, 2, 0]])
    attention_mask = torch.ones(2, 8, dtype=torch.long)
    keep = _hand_span_mask(spans, attention_mask)
    assert keep[0, 0, 1, 3] and not keep[0, 0, 4, 5]  # image looks ahead; text stays causal
    eager = _logits(llama, "eager", input_ids=ids, attention_mask=_additive(keep))
    plain = _logits(llama, impl, input_ids=ids, attention_mask=attention_mask)
    ours = _logits(llama, impl, input_ids=ids, attention_mask=attention_mask, hyport_span_ids=spans)
    torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-5)
    assert (plain - eager).abs().max() > 1e-3  # the spans do change the result


@pytest.mark.parametrize("backend", ["sdpa", "npu-emulated"])
def test_a_span_never_reaches_across_packed_sequences(backend):
    q, k, v = (torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 2]])
    spans = torch.tensor([[0, 1, 1, 1, 1, 0]])  # one id on both sides of the boundary
    out, _ = attention_forward(FlashAttnAPI(backend), None, q, k, v, scaling=0.5, is_causal=True,
                               position_ids=position_ids, hyport_span_ids=spans)
    seq, i = torch.tensor([0, 0, 0, 1, 1, 1]), torch.arange(6)
    same_span = (spans[0, :, None] == spans[0, None, :]) & (spans[0, :, None] != 0)
    keep = (seq[:, None] == seq[None, :]) & ((i[None, :] <= i[:, None]) | same_span)
    assert keep[1, 2] and keep[3, 4] and not keep[2, 3] and not keep[3, 2]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.5)
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_packed_segments_are_read_from_positions_restarting_at_0():
    segments = hf_integration.packed_segments
    assert segments(torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])) == (3, 2, 4)
    assert segments(torch.tensor([0, 1, 0, 1, 2])) == (2, 3)
    assert segments(torch.arange(4).repeat(2, 1)) is None  # one arange per row: not packed
    assert segments(torch.tensor([[1, 1, 0, 1, 2]])) is None  # left padding: pads carry position 1
    assert segments(torch.tensor([[0, 1, 5, 6]])) is None  # a run that starts elsewhere than 0


def test_segment_ids_grow_wherever_the_position_does_not_grow_by_1():
    ids = hf_integration.segment_ids_from_position_ids(torch.tensor([[0, 1, 2, 0, 1], [3, 4, 0, 0, 1]]))
    assert ids.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 2, 2]]
    with pytest.raises(ValueError, match=r"position_ids must be \(batch, seqlen\)"):
        hf_integration.segment_ids_from_position_ids(torch.arange(4))


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_vision_tower_matches_eager(impl, family):
    if family == "clip":
        from transformers import CLIPVisionConfig as Config, CLIPVisionModel as Model
    else:
        from transformers import SiglipVisionConfig as Config, SiglipVisionModel as Model
    torch.manual_seed(5)
    config = Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, image_size=32, patch_size=8)
    model = Model(config).eval()
    pixels = torch.randn(2, 3, 32, 32)
    outs = {}
    for name in ("eager", impl):
        model.set_attn_implementation(name)
        with torch.no_grad():
            outs[name] = model(pixel_values=pixels).last_hidden_state
    torch.testing.assert_close(outs[impl], outs["eager"], rtol=1e-4, atol=1e-5)


def test_qwen2_vl_vision_tower_matches_eager(impl):
    # its attention passes attention_mask by keyword and splits images by cu_seqlens
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

    torch.manual_seed(6)
    config = Qwen2VLVisionConfig(depth=2, embed_dim=32, num_heads=4, hidden_size=32, mlp_ratio=2,
                                 patch_size=2, temporal_patch_size=2, in_channels=3,
                                 spatial_merge_size=2)
    model = Qwen2VisionTransformerPretrainedModel(config).eval()
    grid = torch.tensor([[1, 4, 4], [1, 2, 4]])  # two images of different sizes
    patches = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 2 * 2)
    outs = {}
    for name in ("eager", impl):
        model.set_attn_implementation(name)
        with torch.no_grad():
            out = model(patches, grid_thw=grid)
        outs[name] = out if torch.is_tensor(out) else out[0]
    torch.testing.assert_close(outs[impl], outs["eager"], rtol=1e-4, atol=1e-5)


def test_attention_mask_by_keyword_like_qwen2_vl_vision(fake_npu):
    # Qwen2-VL's vision blocks call attention_interface(..., attention_mask=None, is_causal=False)
    fn = hf_integration.make_attention_forward(FlashAttnAPI("npu"))
    module = torch.nn.Module()
    q = torch.randn(1, 2, 6, 8)
    out, weights = fn(module, q, q, q, attention_mask=None, scaling=0.5, dropout=0.0,
                      is_causal=False, cu_seqlens=torch.tensor([0, 6]))
    ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, scale=0.5).transpose(1, 2)
    assert weights is None and out.shape == (1, 6, 2, 8)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_npu_mask_conversion(fake_npu, monkeypatch):
    calls = []
    real = fake_npu.npu_fusion_attention
    monkeypatch.setattr(fake_npu, "npu_fusion_attention",
                        lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    fn = hf_integration.make_attention_forward(FlashAttnAPI("npu"))
    module = torch.nn.Module()
    module.is_causal = True
    q = torch.randn(2, 2, 4, 8)
    keep = torch.ones(2, 1, 4, 4, dtype=torch.bool).tril()
    keep[1, :, :, 0] = False  # sample 1: first token is padding
    fn(module, q, q, q, keep)
    sent = calls[-1]["atten_mask"]
    assert calls[-1]["input_layout"] == "BNSD" and sent.dtype == torch.bool
    expected = ~keep
    expected[1, 0, 0] = False  # a row that sees nothing is opened up (no NaN on device)
    assert torch.equal(sent, expected)
    float_mask = _additive(keep).clone()
    fn(module, q, q, q, float_mask)
    assert torch.equal(calls[-1]["atten_mask"], expected)
    float_mask[0, 0, 3, 0] = -1.5  # a bias, not a pattern
    with pytest.raises(FlashAttnUnsupported, match="bias"):
        fn(module, q, q, q, float_mask)


# --- the contract: what is computed with, what is refused ------------------------------

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
