"""Which ``attn_implementation`` values a device kind can run here, each with the reason, and
the one-line refusal of one it cannot (stages 03, 04 and 05 refuse it in their plan; the
workbook's form lists :func:`attention_choices`).

What each of transformers' names needs is read from transformers itself (4.57 and 5.x):
``FLASH_ATTENTION_COMPATIBILITY_MATRIX`` / ``_flash_attn_2_can_dispatch`` (FlashAttention 2:
CUDA with the ``flash-attn`` package, or an Ascend NPU through torch_npu, where transformers
skips the package check; 3 and 4: CUDA with ``flash-attn-3`` / ``flash-attn-4``), and
torch's flex_attention, which has no backward on a CPU ("FlexAttention does not support
backward on CPU" from a forward whose weights require grad) and whose compiled CPU kernel
failed on stage 03's left-padded batch (torch 2.13: an inductor C++ compile error), so of
hyport's stages on a CPU only 05's reload, which loads the model and runs no attention, takes
it (``work``). Nothing here loads a model.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any, Mapping

from hyport_lib.backend import cuda_available, detect_kind, import_torch_npu, npu_available
from hyport_lib.npu_attention.names import NAME_OF_BACKEND
from hyport_lib.params import AUTO_ATTENTION, ParameterError

#: Device kinds a stage runs on.
KINDS = ("cpu", "cuda", "npu")
#: What a stage does with the model: 05's reload loads it, 03 generates, 04 trains.
LOAD, GENERATE, TRAIN = "load", "generate", "train"
WORKS = (LOAD, GENERATE, TRAIN)
#: transformers' FlashAttention names: version -> (pip package, what the GPU needs).
FLASH_PACKAGES = {2: ("flash-attn", "CUDA"), 3: ("flash-attn-3", "CUDA (Ampere or newer)"),
                  4: ("flash-attn-4", "CUDA (Hopper or newer)")}


@dataclass(frozen=True)
class AttentionOption:
    """One ``attn_implementation`` on one device kind: ``why`` says what runs it, or why it cannot."""

    name: str
    runs: bool
    why: str


def attention_options(device_kind: str, *, work: str = GENERATE) -> tuple[AttentionOption, ...]:
    """Every attention hyport offers, ``auto`` first, judged for ``device_kind`` on this host
    (transformers' flash names only where this transformers has them) and for the stage's
    ``work`` (one of :data:`WORKS`)."""
    if device_kind not in KINDS:
        raise ValueError(f"device_kind={device_kind!r}: expected one of {', '.join(KINDS)}")
    if work not in WORKS:
        raise ValueError(f"work={work!r}: expected one of {', '.join(WORKS)}")
    from transformers import AttentionInterface

    known = set(getattr(AttentionInterface, "_global_mapping", {}) or {})
    options = [
        AttentionOption(AUTO_ATTENTION, True, "the stage chooses (eager unless hyport's fused kernel "
                                              "proves itself on an NPU, stage 03)"),
        AttentionOption("eager", True, "transformers' attention in plain torch operations"),
        AttentionOption("sdpa", True, "torch.nn.functional.scaled_dot_product_attention (for models "
                                      "transformers supports it on)"),
        AttentionOption(NAME_OF_BACKEND["sdpa"], True, "hyport's attention over torch's SDPA"),
        AttentionOption(NAME_OF_BACKEND["npu-emulated"], True,
                        "hyport's emulation of npu_fusion_attention in torch operations"),
        _fused(device_kind),
    ]
    options += [_flash(version, device_kind) for version in FLASH_PACKAGES
                if f"flash_attention_{version}" in known]
    if "flex_attention" in known:
        options.append(_flex(device_kind, work))
    return tuple(options)


def attention_choices(device: str = "auto", *, work: str = GENERATE) -> tuple[str, ...]:
    """The ``attn_implementation`` values ``device`` can run here, ``auto`` first: what the
    workbook's form lists. ``device`` as the stages take it (``auto`` is this host's kind,
    ``npu:1`` the kind ``npu``); ``work`` as :func:`attention_options` takes it."""
    return tuple(o.name for o in attention_options(resolve_kind(device), work=work) if o.runs)


def attention_offered(values: Mapping[str, Any], *, work: str = GENERATE) -> tuple[str, ...]:
    """:func:`attention_choices` for a form's values (its ``device``, else this host's kind);
    a device the check will refuse offers this host's. Stage 03's form."""
    device = values.get("device")
    try:
        return attention_choices(device if isinstance(device, str) else "auto", work=work)
    except ValueError:  # the device field says its own error; the list stays this host's
        return attention_choices("auto", work=work)


def attention_offered_to_train(values: Mapping[str, Any]) -> tuple[str, ...]:
    """:func:`attention_offered` for stage 04's form."""
    return attention_offered(values, work=TRAIN)


def attention_offered_to_load(values: Mapping[str, Any]) -> tuple[str, ...]:
    """:func:`attention_offered` for stage 05's form (its reload)."""
    return attention_offered(values, work=LOAD)


def resolve_kind(device: str) -> str:
    """The device kind ``device`` means here, as :func:`hyport_lib.backend.get_backend` reads it."""
    text = str(device or "auto").lower().strip()
    kind = detect_kind() if text == "auto" else text.split(":")[0]
    if kind not in KINDS:
        raise ValueError(f"device={device!r}: expected one of auto, {', '.join(KINDS)}")
    return kind


def check_attention(name: str, device_kind: str, *, work: str, auto_here: str = "eager",
                    param: str = "attn_implementation") -> None:
    """ParameterError, in one line naming the fix, for a name ``device_kind`` cannot run here or
    no worker could load (a typo). ``work``: what the caller's stage does with the model (one
    of :data:`WORKS`); ``auto_here``: what ``auto`` runs there. Beyond
    :func:`attention_options`: a hub kernel (``org/repo``) where the ``kernels`` package is. A name registered with transformers in this process
    alone is refused: the stages' workers are fresh processes, which register only hyport's
    own names (:data:`~hyport_lib.npu_attention.names.BACKEND_OF_NAME`)."""
    options = attention_options(device_kind, work=work)
    runnable = [o.name for o in options if o.runs and o.name != AUTO_ATTENTION]
    fix = f"use {param}={AUTO_ATTENTION} (here: {auto_here}), or one of {', '.join(runnable)}"
    text = str(name or "").strip()
    option = next((o for o in options if o.name == text), None)
    if option is not None:
        if not option.runs:
            raise ParameterError([f"{param}={name!r}: {device_kind} cannot run it ({option.why}); {fix}"])
        return
    if "paged" in text:
        raise ParameterError([f"{param}={name!r}: a paged attention serves transformers' continuous "
                              f"batching (generate_batch), which hyport never runs; {fix}"])
    if "/" in text:
        from transformers.utils import is_kernels_available

        if is_kernels_available():
            return
        raise ParameterError([f"{param}={name!r}: a hub kernel needs the kernels package, which is not "
                              f"installed; {fix}"])
    import transformers

    raise ParameterError([f"{param}={name!r}: not an attention transformers {transformers.__version__} "
                          f"or hyport knows; {fix}"])


def _fused(device_kind: str) -> AttentionOption:
    name = NAME_OF_BACKEND["npu"]
    if device_kind != "npu":
        return AttentionOption(name, False, "npu_fusion_attention runs on an Ascend NPU only")
    if not npu_available():
        return AttentionOption(name, False, f"no NPU is usable here: "
                                            f"{import_torch_npu()[1] or 'torch_npu is not installed'}")
    return AttentionOption(name, True, "hyport's attention over torch_npu.npu_fusion_attention")


def _flash(version: int, device_kind: str) -> AttentionOption:
    """transformers' FlashAttention ``version``: the flash-attn package on CUDA; version 2 on an
    Ascend NPU too, through torch_npu (transformers does not look for the package there)."""
    name, (package, gpu) = f"flash_attention_{version}", FLASH_PACKAGES[version]
    if device_kind == "npu" and version == 2:
        if npu_available():
            return AttentionOption(name, True, "transformers' Ascend path (torch_npu.npu_fusion_attention)")
        return AttentionOption(name, False, f"no NPU is usable here: "
                                            f"{import_torch_npu()[1] or 'torch_npu is not installed'}")
    installed = _installed(package)
    where = f"transformers runs it on {gpu}" + (" or an Ascend NPU" if version == 2 else "") + " only"
    if device_kind != "cuda":
        return AttentionOption(name, False, where if installed else f"{package} is not installed; {where}")
    if cuda_available() and _transformers_can_use_flash(version):
        return AttentionOption(name, True, f"{package} {installed}" if installed else
                               "the kernels library's hub kernel (transformers' fallback without "
                               f"{package}; downloaded on first use)")
    if installed is None:
        return AttentionOption(name, False, f"{package} is not installed (transformers needs it on CUDA)")
    return AttentionOption(name, False, f"{package} {installed} is installed, but transformers cannot use "
                                        f"it on this GPU ({gpu})")


def _flex(device_kind: str, work: str) -> AttentionOption:
    if device_kind == "cuda":
        return AttentionOption("flex_attention", True, "torch's flex_attention, compiled for the GPU")
    if device_kind == "npu":
        return AttentionOption("flex_attention", False, "torch's flex_attention compiles Triton kernels, "
                                                        "which torch_npu does not provide")
    if work == TRAIN:
        return AttentionOption("flex_attention", False, "torch's flex_attention has no backward on a CPU, "
                                                        "which training needs")
    if work == GENERATE:
        return AttentionOption("flex_attention", False, "torch's flex_attention kernel for a CPU failed to "
                                                        "compile for the grid's left-padded batch (an "
                                                        "inductor C++ compile error, torch 2.13)")
    return AttentionOption("flex_attention", True, "the reload only loads the model: no attention runs")


def _transformers_can_use_flash(version: int) -> bool:
    """transformers' own answer (its package, version and GPU checks), or, in transformers 5,
    its fallback to a hub kernel where the ``kernels`` package is installed (not fetched here)."""
    from transformers import utils

    if getattr(utils, f"is_flash_attn_{version}_available")():
        return True
    from transformers import modeling_flash_attention_utils

    fallback = getattr(modeling_flash_attention_utils, "FLASH_ATTN_KERNEL_FALLBACK", {})
    return f"flash_attention_{version}" in fallback and utils.is_kernels_available()


def _installed(distribution: str):
    """The installed version of a pip distribution, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
