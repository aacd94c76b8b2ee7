"""Model level: one model with eager attention vs hyport's swapped attention.

The model is loaded twice and run on a left-padded batch (an image + text sample next
to a text-only one); logits are compared on real tokens and greedy generation must
give the same tokens.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from hyport_lib.attention.implementations import device_label
from hyport_lib.models.generation import load_model
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.prompts import Prompt, encode_prompts, needs_image
from hyport_lib.models.sample_image import sample_image
from hyport_lib.npu_attention import hf_integration
from hyport_lib.npu_attention.shim import (DEFAULT_VERSION, current_shim, install_flash_attn_shim,
                                           uninstall_flash_attn_shim)

#: max |Δ logits| allowed per dtype before the model check warns (fp32 is exact math).
LOGIT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}


@dataclass
class ModelComparison:
    """Eager vs swapped attention on one model (logits and greedy generation)."""

    model_path: str
    attn_implementation: str
    backend: str
    dtype: str
    device: str
    max_abs_logits: Optional[float] = None
    top1_agreement: Optional[float] = None
    kl_divergence: Optional[float] = None  # mean KL(eager || swapped) over real tokens
    greedy_identical: Optional[bool] = None
    new_tokens: int = 0
    positions: int = 0
    verdict: str = "SKIP"
    detail: str = ""
    source: str = ""
    swapped_calls: Optional[int] = None  # swapped-attention calls one forward made
    trust_remote_code: bool = False  # the checkpoint's own model code was loaded
    model_class: str = ""  # the class that was loaded (a remote one shows its module)
    model_kind: str = ""  # image-text-to-text or text-only
    batch: str = ""  # what the compared batch holds (and which image parts do not apply)

    def to_dict(self) -> dict:
        return asdict(self)

    def frame(self):
        import pandas as pd

        return pd.DataFrame([self.to_dict()])


def swapped_backend(kind: str) -> tuple[str, str]:
    """(attention backend, torch device) of the model-level check on a host of ``kind``."""
    return ("npu", "npu:0") if kind == "npu" else ("npu-emulated", "cpu")


def _model_inputs(loaded, device) -> tuple[dict, str]:
    """A left-padded batch (padding rows are fully masked) through the processor's own
    conventions: one image + text prompt next to a text-only one, as the reference batch
    does; two text prompts for a text-only model, two image prompts for a processor that
    needs an image with each. Returns the inputs and what the batch holds, in words."""
    texts = ["How do I open a fridge?", "Hi"]
    if not loaded.traits.multimodal:
        prompts, held = [Prompt(t) for t in texts], "two text prompts (images not applicable: text-only model)"
    elif needs_image(loaded):
        prompts = [Prompt(t, [sample_image()]) for t in texts]
        held = "two image + text prompts (text-only prompts not applicable: its processor needs an image)"
    else:
        prompts, held = [Prompt(texts[0], [sample_image()]), Prompt(texts[1])], "image + text beside text only"
    inputs = encode_prompts(loaded, prompts)
    return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in inputs.items()}, held


@contextlib.contextmanager
def _quiet_loading():
    """No "Loading weights" progress bars in notebook output (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _remote_code_shim(trust_remote_code: bool, backend: str, version: Optional[str]):
    """With remote code on, the flash_attn shim is in place while the model code is
    imported and run (as a user porting that model would have it); yields the shim's
    FlashAttnAPI (None without one: remote code off, or a real flash_attn present).

    transformers keeps remote model modules in ``sys.modules``: one imported under an
    earlier shim still holds that shim's functions (its call counter, its version's
    ``unpad_input``). They are dropped first, so the model code imports this shim. A shim
    the caller had installed is put back afterwards, as it was.
    """
    if not trust_remote_code:
        yield None
        return
    before = current_shim()
    for name in [n for n in sys.modules if n == "transformers_modules" or n.startswith("transformers_modules.")]:
        del sys.modules[name]
    shim = install_flash_attn_shim(backend, version=version or DEFAULT_VERSION)
    try:
        yield sys.modules["flash_attn"].__hyport_api__ if shim.installed else None
    finally:
        if shim.installed:
            uninstall_flash_attn_shim()
        if before is not None and before.installed:
            install_flash_attn_shim(before.backend, version=before.version,
                                    force=bool(before._replaced))


def compare_model(model_path: str = "tiny", backend: str = "npu-emulated",
                  dtype: str = "float32", device: str = "cpu", max_new_tokens: int = 8,
                  seed: int = 0, *, trust_remote_code: bool = False,
                  flash_attn_version: Optional[str] = None) -> ModelComparison:
    """Load ``model_path`` twice (eager, and hyport's swapped attention) and compare.

    Args:
        backend: the swapped attention's backend (``npu-emulated`` on a host without an
            NPU, ``npu`` on one), passed to ``register_hyport_attention``.
        dtype: model dtype; ``device``: where both models run.
        trust_remote_code: load the checkpoint's own model code; the flash_attn shim
            (serving ``flash_attn_version``'s API) is installed for it, and the calls it
            serves count as swapped-attention calls.
    """
    result = ModelComparison(model_path=model_path, attn_implementation="", backend=backend,
                             dtype=dtype, device=device,
                             source=f"{backend} ({device_label(device)})")
    with _remote_code_shim(trust_remote_code, backend, flash_attn_version) as shim_api:
        # Looked up at call time: a test swaps the registration for a broken attention.
        name = hf_integration.register_hyport_attention(backend=backend)
        return _compare(result, model_path, hf_integration.REGISTERED, name, shim_api,
                        trust_remote_code, max_new_tokens, seed)


def _compare(result: ModelComparison, model_path: str, registered: dict, name: str, shim_api,
             trust_remote_code: bool, max_new_tokens: int, seed: int) -> ModelComparison:
    dtype, device = result.dtype, result.device
    result.attn_implementation = name
    result.trust_remote_code = trust_remote_code
    torch.manual_seed(seed)
    common = dict(model_path=model_path, device=device, dtype=dtype, trust_remote_code=trust_remote_code)
    with _quiet_loading():
        eager, loaded = load_model(InferenceConfig(**common, attn_implementation="eager"))
        swapped, _ = load_model(InferenceConfig(**common, attn_implementation=name))
    result.model_class = f"{type(swapped).__module__}.{type(swapped).__qualname__}"
    result.model_kind = loaded.traits.kind
    active = str(getattr(swapped.config, "_attn_implementation", "") or "")
    inputs, result.batch = _model_inputs(loaded, eager.device)
    # Swapped attention reached through transformers (the registered function) or through
    # remote code importing flash_attn (the shim); None: neither is hyport's.
    apis = [a for a in (registered.get(name), shim_api) if a is not None]
    with torch.no_grad():
        le = eager(**inputs).logits.double().cpu()
        before = sum(a.calls for a in apis)
        ls = swapped(**inputs).logits.double().cpu()
        result.swapped_calls = sum(a.calls for a in apis) - before if apis else None
        gen = dict(max_new_tokens=max_new_tokens, do_sample=False)
        ge = eager.generate(**inputs, **gen).cpu()
        gs = swapped.generate(**inputs, **gen).cpu()
    real = inputs["attention_mask"].bool().cpu()
    le, ls = le[real], ls[real]
    pe, ps = torch.log_softmax(le, -1), torch.log_softmax(ls, -1)
    result.max_abs_logits = float((le - ls).abs().max())
    result.top1_agreement = float((le.argmax(-1) == ls.argmax(-1)).double().mean())
    result.kl_divergence = float((pe.exp() * (pe - ps)).sum(-1).mean())
    result.greedy_identical = bool(torch.equal(ge, gs))
    result.new_tokens = int(ge.shape[1] - inputs["input_ids"].shape[1])
    result.positions = int(real.sum())
    result.verdict, result.detail = _model_verdict(result, active, name)
    if "not applicable" in result.batch:
        result.detail += f"; compared {result.batch}"
    return result


def _model_verdict(result: ModelComparison, active: str, name: str) -> tuple[str, str]:
    """(verdict, detail): the swap must be active and change no token; logits within tolerance."""
    tol = LOGIT_TOLERANCE.get(result.dtype, 1e-3)
    if active != name:
        return "FAIL", f"swapped model reports attn_implementation={active!r}, not {name!r}"
    if result.swapped_calls == 0:
        return "WARN", ("a forward pass made no call to the swapped attention: the model's code "
                        "bypasses it (often a flash path guarded by `if q.is_cuda:`, which "
                        "silently runs the eager path on an NPU; run `hyport scan` on the model "
                        "code)")
    if result.top1_agreement < 1.0 or not result.greedy_identical:
        return "FAIL", "top-1 or greedy generation differs between eager and swapped attention"
    if result.max_abs_logits > tol:
        return "WARN", f"max |Δ logits| above {tol:g} for {result.dtype}"
    return "PASS", f"same top-1 and greedy tokens; max |Δ logits| ≤ {tol:g}"
