"""The flash_attn shim: unmodified imports, clean removal, the legacy unpad_input."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import pytest
import torch

from hyport_lib.npu_attention.flash_api import FlashAttnAPI, install_flash_attn_shim, uninstall_flash_attn_shim
from hyport_lib.port.generated.flash_attn_ascend import FlashAttnUnsupported

REMOTE_CODE = '''
import torch
from flash_attn import flash_attn_varlen_func
from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input
from flash_attn.flash_attn_interface import flash_attn_varlen_qkvpacked_func


def encoder_attention(x, key_padding_mask, nheads):
    """InternViT-style: unpad, packed-qkv varlen attention, pad back."""
    batch, seqlen = x.shape[:2]
    x_unpad, indices, cu_seqlens, max_s, _used = unpad_input(x, key_padding_mask)
    qkv = x_unpad.reshape(x_unpad.shape[0], 3, nheads, -1)
    out = flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_s, 0.0, causal=False)
    return pad_input(out.reshape(out.shape[0], -1), indices, batch, seqlen)


def decoder_attention(q, k, v, cu_seqlens, max_seqlen):
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  causal=True)
'''


@pytest.fixture
def clean_modules():
    """Snapshot sys.modules names; make sure no shim outlives the test."""
    before = set(sys.modules)
    yield before
    uninstall_flash_attn_shim()
    for name in set(sys.modules) - before:
        if name == "remote_model_code" or name.startswith("flash_attn"):
            del sys.modules[name]


def _import_remote(tmp_path, monkeypatch):
    (tmp_path / "remote_model_code.py").write_text(REMOTE_CODE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("remote_model_code", None)
    return importlib.import_module("remote_model_code")


def _per_sample_attention(x, lengths, nheads, causal):
    """Attention of each sample alone, the reference for padded/packed calls."""
    outs = []
    for b, n in enumerate(lengths):
        qkv = x[b, :n].reshape(1, n, 3, nheads, -1)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        outs.append(o.transpose(1, 2).reshape(n, -1))
    return outs


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None,
                    reason="a real flash_attn is installed here")
def test_unmodified_import_works_after_install_and_fails_after_uninstall(
        tmp_path, monkeypatch, clean_modules):
    with pytest.raises(ImportError):
        _import_remote(tmp_path, monkeypatch)
    info = install_flash_attn_shim("sdpa")
    assert info.installed and info.backend == "sdpa"
    remote = _import_remote(tmp_path, monkeypatch)

    torch.manual_seed(0)
    lengths, nheads = [5, 3], 2
    x = torch.randn(2, 5, 3 * nheads * 8)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    out = remote.encoder_attention(x, mask, nheads)
    for b, (n, ref) in enumerate(zip(lengths, _per_sample_attention(x, lengths, nheads, False))):
        torch.testing.assert_close(out[b, :n], ref)
        assert out[b, n:].abs().max() == 0 if n < 5 else True

    removed = uninstall_flash_attn_shim()
    assert "flash_attn" in removed and "flash_attn.bert_padding" in removed
    assert not [n for n in sys.modules if n == "flash_attn" or n.startswith("flash_attn.")]
    assert importlib.util.find_spec("flash_attn") is None
    with pytest.raises(ModuleNotFoundError):
        _import_remote(tmp_path, monkeypatch)


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None,
                    reason="a real flash_attn is installed here")
def test_transformers_remote_code_import_check_passes_with_shim(tmp_path, clean_modules):
    # trust_remote_code: transformers refuses a modeling file whose imports are missing
    from transformers.dynamic_module_utils import check_imports

    path = tmp_path / "modeling_remote.py"
    path.write_text(REMOTE_CODE, encoding="utf-8")
    with pytest.raises(ImportError, match="flash_attn"):
        check_imports(path)
    install_flash_attn_shim("sdpa")
    assert check_imports(path) == []


def test_shim_modules_look_like_flash_attn(clean_modules):
    info = install_flash_attn_shim("sdpa")
    import flash_attn
    import flash_attn.flash_attn_interface as interface
    from flash_attn.layers.rotary import apply_rotary_emb

    assert flash_attn.__hyport_shim__ and flash_attn.__version__ == "2.7.4.post1"
    assert importlib.util.find_spec("flash_attn").name == "flash_attn"
    assert importlib.util.find_spec("flash_attn.bert_padding") is not None
    assert callable(apply_rotary_emb)
    for name in ("flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
                 "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
                 "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"):
        assert callable(getattr(flash_attn, name)) and callable(getattr(interface, name))
    assert callable(interface.flash_attn_unpadded_func)
    import inspect

    params = inspect.signature(flash_attn.flash_attn_func).parameters
    assert list(params)[:3] == ["q", "k", "v"] and "window_size" in params
    # transformers must not take the shim for a real FlashAttention-2 install
    from hyport_lib.utils.imports import is_flash_attn_available
    from transformers.utils import import_utils

    assert not is_flash_attn_available()
    checker = import_utils.is_flash_attn_2_available
    getattr(checker, "cache_clear", lambda: None)()
    assert not checker()
    assert info.modules == tuple(sorted(info.modules))


def test_missing_names_fail_loudly(clean_modules):
    install_flash_attn_shim("sdpa")
    with pytest.raises(ImportError, match="RotaryEmbedding.*flash_api.py"):
        from flash_attn.layers.rotary import RotaryEmbedding  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("flash_attn.ops.rms_norm")
    import flash_attn

    with pytest.raises(FlashAttnUnsupported, match="return_attn_probs"):
        q = torch.randn(1, 3, 1, 8)
        flash_attn.flash_attn_func(q, q, q, return_attn_probs=True)


def test_real_flash_attn_is_left_alone_unless_forced(clean_modules):
    real = types.ModuleType("flash_attn")
    real.__version__ = "2.6.3"
    sys.modules["flash_attn"] = real
    try:
        info = install_flash_attn_shim("sdpa")
        assert not info.installed and "real flash_attn" in info.reason
        assert sys.modules["flash_attn"] is real
        info = install_flash_attn_shim("sdpa", force=True)
        assert info.installed and sys.modules["flash_attn"] is not real
        uninstall_flash_attn_shim()
        assert sys.modules["flash_attn"] is real
    finally:
        sys.modules.pop("flash_attn", None)


def test_shim_on_emulated_npu_backend_matches_sdpa(tmp_path, monkeypatch, clean_modules):
    torch.manual_seed(1)
    q = torch.randn(9, 2, 8)
    cu_seqlens = torch.tensor([0, 4, 9], dtype=torch.int32)
    results = {}
    for backend in ("npu-emulated", "sdpa"):
        install_flash_attn_shim(backend)
        remote = _import_remote(tmp_path, monkeypatch)
        results[backend] = remote.decoder_attention(q, q, q, cu_seqlens, 5)
        uninstall_flash_attn_shim()
    torch.testing.assert_close(results["npu-emulated"], results["sdpa"])
    ref = FlashAttnAPI("sdpa").flash_attn_func(q[None, :4], q[None, :4], q[None, :4], causal=True)
    torch.testing.assert_close(results["sdpa"][:4], ref[0])


def test_legacy_version_unpad_returns_four(clean_modules):
    install_flash_attn_shim("sdpa", version="2.5.8")
    from flash_attn.bert_padding import unpad_input

    assert len(unpad_input(torch.randn(1, 3, 2), torch.ones(1, 3, dtype=torch.long))) == 4
