"""The one flash-attn implementation (``flash_attn_ascend``, the module the port writes
and hyport runs): NPU branch (through the torch_npu double) vs SDPA vs float64, its
module-level switches, bert_padding, rotary, and the file the port copies."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from hyport_lib.npu_attention import emulation
from hyport_lib.npu_attention.flash_api import FlashAttnAPI
from hyport_lib.port.generated import flash_attn_ascend as fa
from hyport_lib.port.generated.flash_attn_ascend import HOST_CACHE, FlashAttnUnsupported
from hyport_lib.port.tree import GENERATED_SOURCE, port_tree


def reference(q, k, v, scale, causal=False, window=(-1, -1), align="bottom_right"):
    """One sequence, float64: q (Sq, N, D), k/v (Sk, Nkv, D) -> (Sq, N, D)."""
    q, k, v = q.double(), k.double(), v.double()
    sq, sk = q.shape[0], k.shape[0]
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = torch.einsum("qnd,knd->nqk", q, k) * scale
    shift = sk - sq if align == "bottom_right" else 0
    offset = torch.arange(sk)[None, :] - (torch.arange(sq)[:, None] + shift)
    keep = torch.ones(sq, sk, dtype=torch.bool)
    right = 0 if causal else (None if window[1] < 0 else window[1])
    if right is not None:
        keep &= offset <= right
    if window[0] >= 0:
        keep &= offset >= -window[0]
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1).nan_to_num(0.0)
    return torch.einsum("nqk,knd->qnd", probs, v)


def cu(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32)


def assert_flash_criterion(out, ref, low_precision):
    """flash-attn's rule: error <= 2 x the error of plain PyTorch in the same dtype (+ slack)."""
    err = (out.double() - ref).abs().max().item()
    floor = (low_precision.double() - ref).abs().max().item()
    assert err <= 2 * floor + 1e-6, (err, floor)


TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


@pytest.fixture
def apis(fake_npu):
    HOST_CACHE.clear()
    return FlashAttnAPI("npu"), FlashAttnAPI("sdpa")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(6, 6), (5, 9), (11, 4)])
def test_func_npu_matches_sdpa_and_reference(apis, dtype, causal, sq, sk):
    npu, sdpa = apis
    torch.manual_seed(sq * 31 + sk)
    q = torch.randn(2, sq, 4, 32, dtype=dtype)
    k = torch.randn(2, sk, 2, 32, dtype=dtype)  # GQA 4:2
    v = torch.randn(2, sk, 2, 32, dtype=dtype)
    out_npu = npu.flash_attn_func(q, k, v, causal=causal)
    out_sdpa = sdpa.flash_attn_func(q, k, v, causal=causal)
    torch.testing.assert_close(out_npu, out_sdpa, **TOL[dtype])
    scale = 1 / math.sqrt(32)
    ref = torch.stack([reference(q[b], k[b], v[b], scale, causal) for b in range(2)])
    low = torch.stack([reference(q[b], k[b], v[b], scale, causal) for b in range(2)]).to(dtype)
    for out in (out_npu, out_sdpa):
        assert out.shape == q.shape and out.dtype == dtype
        assert_flash_criterion(out, ref, low)
    if causal and sq > sk:  # bottom-right: the first sq - sk rows see nothing -> 0
        assert out_npu[:, : sq - sk].abs().max() == 0
        assert out_sdpa[:, : sq - sk].abs().max() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_npu_matches_sdpa_and_reference(apis, dtype, causal):
    npu, sdpa = apis
    torch.manual_seed(7)
    lq, lk = [3, 8, 1, 5, 5], [6, 2, 4, 5, 5]  # Sq != Skv per sequence, one equal pair
    q = torch.randn(sum(lq), 4, 16, dtype=dtype)
    k = torch.randn(sum(lk), 1, 16, dtype=dtype)  # MQA
    v = torch.randn(sum(lk), 1, 16, dtype=dtype)
    cq, ck = cu(lq), cu(lk)
    out_npu = npu.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal)
    out_sdpa = sdpa.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal)
    torch.testing.assert_close(out_npu, out_sdpa, **TOL[dtype])
    pieces = [reference(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], 0.25, causal)
              for i in range(len(lq))]
    ref = torch.cat(pieces)
    for out in (out_npu, out_sdpa):
        assert_flash_criterion(out, ref, ref.to(dtype))


@pytest.mark.parametrize("window,causal", [((2, 1), False), ((3, -1), True), ((-1, 2), False)])
def test_window_size_band(apis, window, causal):
    npu, sdpa = apis
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 7, 2, 8), torch.randn(1, 10, 2, 8), torch.randn(1, 10, 2, 8)
    ref = reference(q[0], k[0], v[0], 8 ** -0.5, causal, window)[None]
    for api in (npu, sdpa):
        out = api.flash_attn_func(q, k, v, causal=causal, window_size=window)
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    lens = [4, 7]
    qv, kv = torch.randn(11, 2, 8), torch.randn(11, 2, 8)
    ref = torch.cat([reference(qv[a:b], kv[a:b], kv[a:b], 8 ** -0.5, causal, window)
                     for a, b in ((0, 4), (4, 11))])
    for api in (npu, sdpa):
        out = api.flash_attn_varlen_func(qv, kv, kv, cu(lens), cu(lens), 7, 7, causal=causal,
                                         window_size=window)
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_npu_arguments_are_the_documented_ones(apis, fake_npu, monkeypatch):
    npu, _ = apis
    calls = []
    real = fake_npu.npu_fusion_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(fake_npu, "npu_fusion_attention", spy)
    q = torch.randn(2, 5, 4, 64)
    npu.flash_attn_func(q, q, q, dropout_p=0.0, causal=True)
    call = calls[-1]
    assert call["input_layout"] == "BSND" and call["head_num"] == 4
    assert call["scale"] == pytest.approx(1 / 8)  # softmax_scale=None -> 1/sqrt(d), never 1.0
    assert call["keep_prob"] == 1.0 and call["sparse_mode"] == 3
    mask = call["atten_mask"]
    assert mask.dtype == torch.bool and mask.shape == (2048, 2048)
    assert torch.equal(mask, torch.ones(2048, 2048, dtype=torch.bool).triu(1))
    npu.flash_attn_func(q, q, q, softmax_scale=0.3)
    assert calls[-1]["scale"] == pytest.approx(0.3) and calls[-1]["atten_mask"] is None
    qt = torch.randn(9, 4, 64)
    npu.flash_attn_varlen_func(qt, qt, qt, cu([2, 3, 4]), cu([2, 3, 4]), 4, 4, causal=True)
    call = calls[-1]
    assert call["input_layout"] == "TND"
    assert call["actual_seq_qlen"] == [2, 5, 9] == call["actual_seq_kvlen"]
    assert all(type(x) is int for x in call["actual_seq_qlen"])
    npu.flash_attn_varlen_func(qt, qt, qt, cu([9]), cu([9]), 9, 9, window_size=(2, 0))
    assert calls[-1]["sparse_mode"] == 4
    assert (calls[-1]["pre_tockens"], calls[-1]["next_tockens"]) == (2, 0)


def test_dropout_maps_to_keep_prob(apis, fake_npu, monkeypatch):
    npu, sdpa = apis
    seen = []
    real = fake_npu.npu_fusion_attention
    monkeypatch.setattr(fake_npu, "npu_fusion_attention",
                        lambda *a, **kw: seen.append(kw["keep_prob"]) or real(*a, **kw))
    q = torch.randn(1, 16, 2, 8)
    torch.manual_seed(0)
    dropped = npu.flash_attn_func(q, q, q, dropout_p=0.25)
    assert seen[-1] == pytest.approx(0.75)
    assert not torch.allclose(dropped, npu.flash_attn_func(q, q, q))
    torch.manual_seed(0)
    assert not torch.allclose(sdpa.flash_attn_func(q, q, q, dropout_p=0.5), sdpa.flash_attn_func(q, q, q))
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa.flash_attn_func(q, q, q, dropout_p=1.5)


@pytest.mark.parametrize("backend", ["npu", "sdpa"])
def test_cu_seqlens_reach_the_host_once_per_batch(apis, backend):
    api = apis[0] if backend == "npu" else apis[1]
    q = torch.randn(12, 2, 8)
    cu_seqlens = cu([5, 7])
    before = HOST_CACHE.misses
    for _layer in range(24):
        api.flash_attn_varlen_func(q, q, q, cu_seqlens, cu_seqlens, 7, 7, causal=True)
    assert HOST_CACHE.misses - before == 1
    cu_seqlens.copy_(cu([6, 6]))  # edited in place: the cached host copy is stale
    api.flash_attn_varlen_func(q, q, q, cu_seqlens, cu_seqlens, 6, 6, causal=True)
    assert HOST_CACHE.misses - before == 2
    api.flash_attn_varlen_func(q, q, q, cu([6, 6]), cu([6, 6]), 6, 6)  # new batch, new tensors
    assert HOST_CACHE.misses - before == 4


@pytest.mark.parametrize("backend", ["npu", "sdpa"])
def test_a_reused_buffer_refilled_in_inference_mode_is_not_stale(apis, backend):
    """Inference-mode tensors have no version counter: nothing may be cached for them."""
    api = apis[0] if backend == "npu" else apis[1]
    torch.manual_seed(3)
    q = torch.randn(8, 2, 8)
    with torch.inference_mode():
        buffer = torch.empty(3, dtype=torch.int32)
        buffer.copy_(cu([4, 4]))
        api.flash_attn_varlen_func(q, q, q, buffer, buffer, 4, 4, causal=True)
        buffer.copy_(cu([2, 6]))  # the same buffer, the next batch's lengths
        out = api.flash_attn_varlen_func(q, q, q, buffer, buffer, 6, 6, causal=True)
    ref = torch.cat([reference(q[0:2], q[0:2], q[0:2], 8 ** -0.5, True),
                     reference(q[2:8], q[2:8], q[2:8], 8 ** -0.5, True)])
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_packed_variants_equal_unpacked(apis):
    for api in apis:
        torch.manual_seed(1)
        qkv = torch.randn(2, 6, 3, 2, 8)
        base = api.flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
        torch.testing.assert_close(api.flash_attn_qkvpacked_func(qkv, causal=True), base)
        torch.testing.assert_close(api.flash_attn_kvpacked_func(qkv[:, :, 0], qkv[:, :, 1:], causal=True), base)
        flat = qkv.reshape(12, 3, 2, 8)
        c = cu([6, 6])
        var = api.flash_attn_varlen_qkvpacked_func(flat, c, 6, causal=True)
        torch.testing.assert_close(var, base.reshape(12, 2, 8))
        var_kv = api.flash_attn_varlen_kvpacked_func(flat[:, 0], flat[:, 1:], c, c, 6, 6, causal=True)
        torch.testing.assert_close(var_kv, base.reshape(12, 2, 8))


def test_varlen_equals_per_sample_padded_func(apis):
    for api in apis:
        torch.manual_seed(2)
        lens = [3, 6, 2]
        q = torch.randn(sum(lens), 2, 8)
        out = api.flash_attn_varlen_func(q, q, q, cu(lens), cu(lens), 6, 6, causal=True)
        start = 0
        for n in lens:
            single = api.flash_attn_func(q[None, start:start + n], q[None, start:start + n],
                                         q[None, start:start + n], causal=True)[0]
            torch.testing.assert_close(out[start:start + n], single)
            start += n


def test_flash_attn_unpadded_func_is_top_left_causal(apis):
    for api in apis:
        torch.manual_seed(4)
        lq, lk = [3, 5], [6, 2]
        q, k = torch.randn(8, 2, 8), torch.randn(8, 2, 8)
        out = api.flash_attn_unpadded_func(q, k, k, cu(lq), cu(lk), 5, 6, 0.0, causal=True)
        ref = torch.cat([reference(q[0:3], k[0:6], k[0:6], 8 ** -0.5, True, align="top_left"),
                         reference(q[3:8], k[6:8], k[6:8], 8 ** -0.5, True, align="top_left")])
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
        bottom_right = api.flash_attn_varlen_func(q, k, k, cu(lq), cu(lk), 5, 6, causal=True)
        assert (bottom_right - out).abs().max() > 0.1  # the two conventions differ here


def test_with_kvcache_appends_and_attends(apis):
    for api in apis:
        torch.manual_seed(5)
        k_cache, v_cache = torch.zeros(2, 8, 2, 8), torch.zeros(2, 8, 2, 8)
        past_k, past_v = torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8)
        k_cache[:, :4], v_cache[:, :4] = past_k, past_v
        lens = torch.tensor([4, 2], dtype=torch.int32)  # sample 1 holds only 2 cached tokens
        q, k_new, v_new = torch.randn(2, 1, 2, 8), torch.randn(2, 1, 2, 8), torch.randn(2, 1, 2, 8)
        out = api.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                          causal=True)
        assert torch.equal(k_cache[0, 4], k_new[0, 0]) and torch.equal(k_cache[1, 2], k_new[1, 0])
        for b, n in enumerate([5, 3]):
            ref = reference(q[b], k_cache[b, :n], v_cache[b, :n], 8 ** -0.5, True)
            torch.testing.assert_close(out[b].double(), ref, rtol=1e-5, atol=1e-5)
        with pytest.raises(FlashAttnUnsupported, match="rotary_cos.*apply_rotary_emb"):
            api.flash_attn_with_kvcache(q, k_cache, v_cache, rotary_cos=torch.ones(8, 4),
                                        rotary_sin=torch.zeros(8, 4))


@pytest.mark.parametrize("option,value", [("return_attn_probs", True), ("softcap", 30.0),
                                          ("alibi_slopes", torch.ones(2))])
def test_unsupported_options_name_the_option(option, value):
    api = FlashAttnAPI("sdpa")
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(FlashAttnUnsupported, match=option):
        api.flash_attn_func(q, q, q, **{option: value})
    qt = torch.randn(4, 2, 8)
    with pytest.raises(FlashAttnUnsupported, match=option):
        api.flash_attn_varlen_func(qt, qt, qt, cu([4]), cu([4]), 4, 4, **{option: value})
    with pytest.raises(FlashAttnUnsupported, match="block_table"):
        api.flash_attn_varlen_func(qt, qt, qt, cu([4]), cu([4]), 4, 4, block_table=torch.zeros(1))


def test_bad_inputs_name_the_argument():
    api = FlashAttnAPI("sdpa")
    q = torch.randn(1, 4, 3, 8)
    with pytest.raises(ValueError, match="multiple"):
        api.flash_attn_func(q, torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        api.flash_attn_varlen_func(q[0], q[0], q[0], cu([3]), cu([4]), 3, 4)
    with pytest.raises(ValueError, match="backend"):
        FlashAttnAPI("tpu")


def test_backend_resolution(fake_npu):
    assert FlashAttnAPI("cpu").backend == "sdpa" and FlashAttnAPI("cuda").backend == "sdpa"
    assert FlashAttnAPI("auto").backend == "npu"  # the double reports NPUs
    assert FlashAttnAPI("npu-emulated").backend == "npu-emulated"


def test_npu_backend_without_torch_npu_says_what_to_use():
    api = FlashAttnAPI("npu")  # no double here: torch_npu is absent on this host
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(RuntimeError, match="npu-emulated"):
        api.flash_attn_func(q, q, q)


def test_npu_emulated_backend_runs_without_the_double():
    q = torch.randn(1, 5, 2, 8)
    out = FlashAttnAPI("npu-emulated").flash_attn_func(q, q, q, causal=True)
    torch.testing.assert_close(out, FlashAttnAPI("sdpa").flash_attn_func(q, q, q, causal=True))


def test_identity_cache_eviction_does_not_deadlock():
    """Evicting an entry can free a tensor that keys another entry (its weakref callback
    then runs while the cache holds its lock)."""
    import threading

    def scenario():
        cache = fa.IdentityCache(maxsize=2)
        key_a, key_c = torch.zeros(1), torch.zeros(1)
        value = torch.ones(1)
        cache.get("a", (key_a,), lambda: value)
        cache.get("b", (value,), lambda: 1)
        del_value = [value]
        del value
        del_value.clear()
        cache.get("c", (key_c,), lambda: 2)  # evicts "a": the last reference to value
        assert len(cache) == 1 and cache.get("c", (key_c,), lambda: 3) == 2

    worker = threading.Thread(target=scenario, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "IdentityCache deadlocked on eviction"


@pytest.mark.parametrize("backend", ["npu", "sdpa"])
def test_varlen_gradients_match_per_sequence(apis, backend):
    api = apis[0] if backend == "npu" else apis[1]
    torch.manual_seed(8)
    lens = [3, 3, 5, 2]  # a run of two equal lengths, then singletons
    q, k, v = (torch.randn(13, n, 8, requires_grad=True) for n in (2, 1, 1))
    out = api.flash_attn_varlen_func(q, k, v, cu(lens), cu(lens), 5, 5, causal=True)
    weight = torch.randn_like(out)
    grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
    pieces, start = [], 0
    for n in lens:
        sl = slice(start, start + n)
        pieces.append(FlashAttnAPI("sdpa").flash_attn_func(q[None, sl], k[None, sl], v[None, sl],
                                                           causal=True)[0])
        start += n
    expected = torch.autograd.grad((torch.cat(pieces) * weight).sum(), (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_sequence_without_keys_gives_zero_rows():
    api = FlashAttnAPI("sdpa")
    q, k = torch.randn(5, 2, 8), torch.randn(3, 2, 8)
    out = api.flash_attn_varlen_func(q, k, k, cu([2, 3]), cu([0, 3]), 3, 3)
    assert out[:2].abs().max() == 0
    torch.testing.assert_close(out[2:].double(), reference(q[2:], k, k, 8 ** -0.5), rtol=1e-5,
                               atol=1e-5)


def test_varlen_dispatch_rule():
    """Grouped SDPA while few runs of equal lengths remain, the fused kernel from 9 runs
    on (measured on an H200), and only where the fused kernel can serve the call."""
    def path(runs, device="cuda", dtype=torch.bfloat16, head_dim=128, dropout=0.0, empty=False,
             available=True):
        return fa.choose_varlen_path(device, dtype, head_dim, dropout, runs, empty, available)

    assert fa.FUSED_MIN_RUNS == 9
    assert path(1) == path(8) == "grouped"  # 8 x 2048, 64 x 256, 8 mixed lengths
    assert path(16) == "fused"  # 16 distinct lengths: grouped was 8.1x slower
    for kwargs in ({"device": "cpu"}, {"dtype": torch.float32}, {"dropout": 0.1},
                   {"head_dim": 100}, {"head_dim": 512}, {"empty": True}, {"available": False}):
        assert path(16, **kwargs) == "grouped", kwargs


def test_many_lengths_on_a_gpu_go_to_the_fused_kernel(monkeypatch):
    """The dispatch inside sdpa_varlen, with the device and the fused kernel stood in for:
    16 distinct lengths call the fused op (with host lengths turned into device tensors
    once), 4 runs do not; the results equal the grouped path's."""
    calls = []

    def fake_fused(q, k, v, cq, ck, max_q, max_k, scale=None, window_size=(-1, -1), enable_gqa=False):
        calls.append((cq.tolist(), max_q, window_size, enable_gqa))
        cu = cq.tolist()
        parts = [fa.sdpa_dense(q[a:b][None], k[a:b][None], v[a:b][None], scale, 0.0, (None, 0))[0]
                 for a, b in zip(cu, cu[1:])]  # one sequence at a time: the same math
        return torch.cat(parts)

    real_choose = fa.choose_varlen_path
    monkeypatch.setattr(fa, "fused_varlen_op", lambda: fake_fused)
    monkeypatch.setattr(fa, "choose_varlen_path",
                        lambda device_type, *a: real_choose("cuda", *a[:-1], True))
    for lengths, fused in (([1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 3, 7, 11, 17, 19], True),
                           ([16, 16, 8, 8], False)):
        calls.clear()
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        q = torch.randn(cu[-1], 4, 16, dtype=torch.bfloat16)
        k = torch.randn(cu[-1], 2, 16, dtype=torch.bfloat16)
        v = torch.randn(cu[-1], 2, 16, dtype=torch.bfloat16)
        monkeypatch.setattr(fa, "choose_varlen_path", real_choose)
        grouped = fa.sdpa_varlen(q, k, v, cu, cu, 0.25, 0.0, (None, 0))
        monkeypatch.setattr(fa, "choose_varlen_path",
                            lambda device_type, *a: real_choose("cuda", *a[:-1], True))
        got = fa.sdpa_varlen(q, k, v, cu, cu, 0.25, 0.0, (None, 0))
        assert bool(calls) == fused
        if fused:
            assert calls[0][0] == cu and calls[0][1] == max(lengths)
            assert calls[0][2] == (-1, 0) and calls[0][3] is True
        torch.testing.assert_close(got, grouped)


def test_bert_padding_round_trip_and_grad():
    torch.manual_seed(2)
    x = torch.randn(3, 5, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    x_unpad, indices, cu_seqlens, max_s, used = fa.unpad_input(x, mask)
    assert x_unpad.shape == (10, 4) and max_s == 5
    assert cu_seqlens.tolist() == [0, 3, 8, 10] and cu_seqlens.dtype == torch.int32
    assert used.tolist() == [3, 5, 2]
    back = fa.pad_input(x_unpad, indices, 3, 5)
    keep = mask.bool().unsqueeze(-1)
    torch.testing.assert_close(back, torch.where(keep, x, torch.zeros(())))
    back.sum().backward()
    torch.testing.assert_close(x.grad, keep.expand_as(x).float())
    flat = torch.randn(6, 2, requires_grad=True)
    picked = fa.index_first_axis(flat, torch.tensor([4, 0]))
    torch.testing.assert_close(picked, flat[[4, 0]])
    (picked * torch.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert flat.grad[4].tolist() == [1.0, 2.0] and flat.grad[1].abs().sum() == 0


def _rotary_direct(x, cos, sin, positions, interleaved):
    """Textbook RoPE on the first 2*cos.shape[-1] channels, float64."""
    rd = cos.shape[-1] * 2
    out = x.double().clone()
    for idx in torch.cartesian_prod(*(torch.arange(n) for n in x.shape[:-2])).reshape(-1, x.dim() - 2):
        idx = tuple(idx.tolist())
        p = positions[idx]
        for i in range(rd // 2):
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
            c, s = cos[p, i].double(), sin[p, i].double()
            xa, xb = x[idx][..., a].double(), x[idx][..., b].double()
            out[idx][..., a] = xa * c - xb * s
            out[idx][..., b] = xa * s + xb * c
    return out


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_matches_direct_formula(interleaved):
    torch.manual_seed(3)
    theta = torch.arange(12).unsqueeze(1) * (1.0 / 10000 ** (torch.arange(3) / 3)).unsqueeze(0)
    cos, sin = theta.cos(), theta.sin()  # rotary_dim 6 of headdim 8: 2 channels pass through
    x = torch.randn(2, 4, 2, 8)
    offsets = torch.tensor([0, 5])
    out = fa.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
    positions = (torch.arange(4).unsqueeze(0) + offsets.unsqueeze(1))
    torch.testing.assert_close(out.double(), _rotary_direct(x, cos, sin, positions, interleaved))
    torch.testing.assert_close(out[..., 6:], x[..., 6:])
    packed = x[:, :3].reshape(6, 2, 8)  # two sequences of 3, positions restart at 0
    out_packed = fa.apply_rotary_emb(packed, cos, sin, interleaved=interleaved,
                                  cu_seqlens=torch.tensor([0, 3, 6], dtype=torch.int32),
                                  max_seqlen=3)
    pos_packed = torch.tensor([0, 1, 2, 0, 1, 2])
    torch.testing.assert_close(out_packed.double(),
                               _rotary_direct(packed, cos, sin, pos_packed, interleaved))
    y = x.clone()
    assert fa.apply_rotary_emb(y, cos, sin, interleaved=interleaved, inplace=True) is y
    torch.testing.assert_close(y, fa.apply_rotary_emb(x, cos, sin, interleaved=interleaved))


def test_the_module_imports_nothing_of_hyport():
    """It ships inside users' ported trees: torch only (torch_npu on the NPU path)."""
    tree = ast.parse(Path(fa.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "collections", "math", "os", "threading", "weakref", "torch",
                     "torch.nn.functional", "torch.nn.attention.varlen", "torch_npu"}


def test_the_port_writes_the_very_file_hyport_runs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "modeling.py").write_text("from flash_attn import flash_attn_func\n")
    port_tree(src, tmp_path / "dst")
    written = (tmp_path / "dst" / "flash_attn_ascend.py").read_bytes()
    assert written == Path(fa.__file__).read_bytes() == GENERATED_SOURCE.read_bytes()
    assert issubclass(FlashAttnAPI, fa.FlashAttention)  # hyport's backends bind this module


def test_module_functions_follow_backend_and_hook(monkeypatch):
    """What the proof and a user set after the import: ``BACKEND`` picks the path at each
    call, ``npu_fusion_attention`` replaces torch_npu's kernel, ``CALLS`` counts per path."""
    seen = []

    def hook(*args, **kwargs):
        seen.append(kwargs)
        return emulation.npu_fusion_attention(*args, **kwargs)

    q = torch.randn(1, 6, 2, 8)
    before = dict(fa.CALLS)
    monkeypatch.setattr(fa, "BACKEND", "auto")
    want = fa.flash_attn_func(q, q, q, causal=True)  # a CPU tensor: SDPA, the hook unused
    assert not seen and fa.CALLS["sdpa"] == before.get("sdpa", 0) + 1
    monkeypatch.setattr(fa, "BACKEND", "npu")
    monkeypatch.setattr(fa, "npu_fusion_attention", hook)
    torch.testing.assert_close(fa.flash_attn_func(q, q, q, causal=True), want)
    assert seen[-1]["sparse_mode"] == 3 and fa.CALLS["npu"] == before.get("npu", 0) + 1
    varlen = fa.flash_attn_varlen_func(q[0], q[0], q[0], cu([2, 4]), cu([2, 4]), 4, 4, causal=True)
    assert seen[-1]["actual_seq_qlen"] == [2, 6]
    torch.testing.assert_close(varlen[:2], fa.FlashAttention("sdpa").flash_attn_func(
        q[:, :2], q[:, :2], q[:, :2], causal=True)[0])
    monkeypatch.setattr(fa, "BACKEND", "tpu")
    with pytest.raises(ValueError, match="FLASH_ATTN_ASCEND_BACKEND='tpu'"):
        fa.flash_attn_func(q, q, q)
