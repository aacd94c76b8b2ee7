# hyport-scan: ignore-file (this module is the table of CUDA-only constructs)
"""The one table of CUDA-only constructs: what the scan reports, what ``hyport port``
rewrites (and into what), and what the port leaves for a human (and why).

One table per kind of construct, so that a new rule is one line, and one matcher per kind
(:func:`string_rule`, :func:`name_rule`, :data:`METHOD_RULES`, :func:`port_of`) that both
the scan's walker (:mod:`.python_code`, reporting) and the port's
(:mod:`hyport_lib.port.codemod`, rewriting) call: a :class:`Rule` is what the scan reports,
its :class:`Port` what the port does there. A scan suggestion is read by the
owner of the scanned code, who has no hyport objects: it names what they can write (the
functions of the module the port writes, plain ``torch`` / ``torch_npu`` calls) and, where
the port rewrites the construct, ends with what the port writes there (:func:`port_writes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

# --- categories (short, stable: they appear in JSON output and tests) ---------------
FLASH_ATTN = "flash_attn"
CUDA_CALL = "cuda_call"
CUDA_DEVICE = "cuda_device"
CUDA_ENV = "cuda_env"
CUDA_EXT = "cuda_ext"
NCCL = "nccl"
APEX = "apex"
XFORMERS = "xformers"
TRITON = "triton"
BITSANDBYTES = "bitsandbytes"
REQUIREMENT = "requirement"
UNPARSABLE = "unparsable"
IS_CUDA_GUARD = "is_cuda_guard"  # an `is_cuda` test deciding whether attention code runs

CATEGORIES = (FLASH_ATTN, CUDA_CALL, CUDA_DEVICE, CUDA_ENV, CUDA_EXT, NCCL, APEX, XFORMERS,
              TRITON, BITSANDBYTES, REQUIREMENT, UNPARSABLE, IS_CUDA_GUARD)


@dataclass(frozen=True)
class Port:
    """What ``hyport port`` does where a rule matched: writes a call of the generated
    module's ``helper`` (with ``args``, literal integers) in its place, or leaves the code
    for a human because ``why``; ``kind`` names it in the port's record. A string is
    rewritten only as an argument with one of ``keywords`` (None in it: positional), or,
    without ``keywords``, wherever it stands (an argument, a comparison, an assignment)."""

    kind: str
    helper: Optional[str] = None
    args: tuple[str, ...] = ()
    why: Optional[str] = None
    keywords: Optional[tuple[Optional[str], ...]] = None


@dataclass(frozen=True)
class Rule:
    """One construct of the table: the scan's category and suggestion, the port's part."""

    category: str
    suggestion: str
    port: Optional[Port] = None


# --- what hyport port rewrites, and what it leaves --------------------------------------
#: The module ``hyport port`` writes next to ported code: flash-attn's API and the device
#: helpers that replace CUDA-only code.
GENERATED_MODULE = "flash_attn_ascend"
#: flash-attn modules, and their names, that the generated module serves.
SERVED_FLASH_MODULES = ("flash_attn", "flash_attn.flash_attn_interface", "flash_attn.bert_padding",
                        "flash_attn.layers.rotary")
SERVED_FLASH_NAMES = frozenset({
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_unpadded_func",
    "flash_attn_unpadded_qkvpacked_func", "flash_attn_unpadded_kvpacked_func",
    "flash_attn_with_kvcache", "index_first_axis", "IndexFirstAxis", "index_put_first_axis",
    "IndexPutFirstAxis", "unpad_input", "unpad_input_for_concatenated_sequences", "pad_input",
    "apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_",
})
#: ``torch.cuda`` names that ``torch.npu`` has with the same meaning (torch_npu 2.x): the
#: port writes ``accelerator_module().<name>``.
SERVED_CUDA_NAMES = frozenset({
    "is_available", "device_count", "current_device", "set_device", "synchronize",
    "empty_cache", "manual_seed", "manual_seed_all", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "is_bf16_supported", "get_device_name",
    "get_device_properties", "mem_get_info", "Stream", "Event", "stream", "current_stream",
    "device", "get_rng_state", "set_rng_state", "seed", "initial_seed",
})
_CUDA_GRAPHS = ("CUDA graphs: torch_npu has its own graph mode (torch.npu.NPUGraph / torchair); "
                "capture and replay must be ported by hand")
#: ``torch.cuda`` names the port leaves for a human, and why.
CUDA_NAMES_BY_HAND = {
    "graph": _CUDA_GRAPHS, "graphs": _CUDA_GRAPHS, "CUDAGraph": _CUDA_GRAPHS,
    "make_graphed_callables": _CUDA_GRAPHS,
    "get_device_capability": ("torch.npu.get_device_capability() returns None on torch_npu: a "
                              "test of the compute capability must be rewritten by hand"),
    "amp": "use torch.amp.autocast(device_type=accelerator_type()) / torch.amp.GradScaler",
}
#: Why the port leaves names imported from ``torch.cuda`` (``from torch.cuda import x``).
CUDA_IMPORTS_BY_HAND = ("names imported from torch.cuda: import them from the device's module "
                        "(accelerator_module()) by hand")

#: Modules with no Ascend build: the port leaves their imports for a human, and why.
UNPORTABLE_MODULES = {
    "triton": "a Triton kernel: Ascend has no Triton backend here; port it to torch ops "
              "(or an Ascend C kernel) by hand",
    "apex": "apex is CUDA-only: use torch.nn / torch.optim equivalents (torch_npu ships fused "
            "optimizers) by hand",
    "xformers": f"xformers is CUDA-only: replace its attention with {GENERATED_MODULE}'s "
                "functions or SDPA by hand",
}
#: What the port writes for each kind of construct it rewrites (its ``Change.kind``).
PORT_WRITES = {
    "cuda_call": "x.to(accelerator_device(i))",
    "cuda_device": "accelerator_type() / accelerator_device(i)",
    "nccl": "distributed_backend()",
    "is_cuda": "on_accelerator(x)",
    "is_cuda_guard": "flash_supported(x)",
    "attn_implementation": "hf_attn_implementation()",
}


def port_writes(kind: str) -> str:
    """The scan's words for what ``hyport port`` writes for a construct of ``kind``."""
    return f"hyport port writes {PORT_WRITES[kind]} (from {GENERATED_MODULE})"


#: What replaces flash-attn in the user's code: the generated module serves its API.
_FLASH = (f"{GENERATED_MODULE}, the module hyport port writes, serves flash-attn's API "
          "(torch_npu.npu_fusion_attention on NPU, SDPA elsewhere): import its names from there")
#: For transformers models: its own attention choice instead of flash-attn.
_HF_ATTN = ("attn_implementation=hf_attn_implementation() (from "
            f"{GENERATED_MODULE}: 'flash_attention_2' on a card, served on Ascend by "
            "transformers' own NPU flash path; 'sdpa' on a CPU host)")
_NFA_VARLEN = (f"{_FLASH}; by hand on NPU torch_npu.npu_fusion_attention(q, k, v, head_num, 'TND', "
               "actual_seq_qlen=cu_seqlens_q[1:] (host list, no leading 0), actual_seq_kvlen="
               "cu_seqlens_k[1:], scale=softmax_scale or 1/sqrt(d) (NFA defaults to 1.0); "
               "causal -> sparse_mode=3 + 2048x2048 triu(1) mask")
_NFA_DENSE = (f"{_FLASH}; by hand on NPU torch_npu.npu_fusion_attention(q, k, v, head_num, 'BSND' "
              "(or 'BNSD'), scale=softmax_scale or 1/sqrt(d) (NFA defaults to 1.0)); causal -> "
              "sparse_mode=3 + 2048x2048 triu(1) mask")
#: The test that keeps CUDA-only code on CUDA (the scan leaves code behind it alone).
_ON_CUDA = f"accelerator_type() == 'cuda' (from {GENERATED_MODULE})"
_MEMORY_NAMES = ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "memory_stats", "reset_peak_memory_stats",
                 "reset_max_memory_allocated", "empty_cache", "is_bf16_supported",
                 "get_device_name", "get_device_properties", "mem_get_info", "device_count",
                 "synchronize", "Stream", "Event", "stream", "current_stream",
                 "current_device", "device")

#: Top-level module -> category. Imports (static or by name) of these are findings.
MODULE_CATEGORIES = {
    "flash_attn": FLASH_ATTN, "flash_attn_2_cuda": FLASH_ATTN, "flash_attn_interface": FLASH_ATTN,
    "apex": APEX, "amp_C": APEX,
    "xformers": XFORMERS,
    "triton": TRITON,
    "bitsandbytes": BITSANDBYTES,
}

#: Qualified-name prefix -> category, for names that live inside other packages.
QUALIFIED_CATEGORIES = {
    "torch.cuda": CUDA_CALL,
    "torch.backends.cuda": CUDA_CALL,
    "torch.utils.cpp_extension.CUDAExtension": CUDA_EXT,
    "torch.utils.cpp_extension.CUDA_HOME": CUDA_EXT,
    "torch.distributed.Backend.NCCL": NCCL,
    "transformers.modeling_flash_attention_utils": FLASH_ATTN,
}

#: Qualified-name prefix -> suggestion; the longest matching prefix wins.
SUGGESTIONS = {
    "flash_attn": f"{_FLASH}; or {_HF_ATTN}",
    **dict.fromkeys(("flash_attn.flash_attn_varlen_func", "flash_attn.flash_attn_varlen_qkvpacked_func",
                     "flash_attn.flash_attn_varlen_kvpacked_func",
                     "flash_attn.flash_attn_interface.flash_attn_varlen_func"), _NFA_VARLEN),
    **dict.fromkeys(("flash_attn.flash_attn_func", "flash_attn.flash_attn_qkvpacked_func",
                     "flash_attn.flash_attn_kvpacked_func", "flash_attn.flash_attn_interface.flash_attn_func"),
                    _NFA_DENSE),
    "flash_attn.bert_padding": (f"pure-PyTorch (un)padding helpers: {GENERATED_MODULE} has "
                                "unpad_input / pad_input / index_first_axis, or keep a copy "
                                "(a few lines of torch index ops)"),
    "flash_attn.layers.rotary": (f"{GENERATED_MODULE}.apply_rotary_emb, torch_npu.npu_rotary_mul "
                                 "on NPU, or the model's rotate_half path"),
    "flash_attn.ops": "torch_npu.npu_rms_norm / torch.nn.RMSNorm / torch.nn.LayerNorm",
    "flash_attn.losses": "torch.nn.functional.cross_entropy",
    "flash_attn_2_cuda": "flash-attn's CUDA extension: no Ascend build; " + _FLASH,
    "flash_attn_interface": "flash-attn 3 (Hopper only): " + _FLASH,
    "transformers.modeling_flash_attention_utils": (
        f"transformers' flash-attn wrapper; on Ascend {_HF_ATTN}, or 'sdpa'"),
    "torch.cuda": ("torch.npu.* on NPU (torch_npu has the same calls); "
                   f"accelerator_module() (from {GENERATED_MODULE}) is torch.npu or torch.cuda"),
    **{f"torch.cuda.{name}": f"torch.npu.{name} on NPU" for name in _MEMORY_NAMES},
    "torch.cuda.is_available": ("torch.npu.is_available() on NPU (after "
                                "`import torch_npu.contrib.transfer_to_npu` torch.cuda."
                                "is_available() answers for the NPU)"),
    "torch.cuda.set_device": "torch.npu.set_device(i) on NPU",
    **dict.fromkeys(("torch.cuda.manual_seed", "torch.cuda.manual_seed_all"),
                    "torch.manual_seed(seed) (seeds every device)"),
    "torch.cuda.amp": "torch.autocast(device_type=accelerator_type(), dtype=torch.bfloat16)",
    "torch.cuda.amp.GradScaler": ("torch.amp.GradScaler(accelerator_type()) (torch >= 2.3); "
                                  "not needed with bf16"),
    "torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd(device_type=accelerator_type())",
    "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd(device_type=accelerator_type())",
    "torch.cuda.nvtx": f"CUDA-only profiler markers: drop, or guard with {_ON_CUDA}",
    "torch.backends.cuda": (f"CUDA-only switch: guard with {_ON_CUDA} (TF32 has no effect on "
                            "NPU; torch_npu's counterpart is torch.npu.matmul.allow_hf32)"),
    "torch.backends.cuda.sdp_kernel": ("torch.nn.attention.sdpa_kernel, CUDA only: guard with "
                                       + _ON_CUDA),
    "torch.utils.cpp_extension": ("custom CUDA kernels: no Ascend build (port to an Ascend C "
                                  "custom op or fall back to the PyTorch reference)"),
    "torch.distributed.Backend.NCCL": (f"distributed_backend() (from {GENERATED_MODULE}): "
                                       "'hccl' on Ascend"),
    "apex": ("torch.optim.AdamW(fused=True) / torch_npu's fused optimizers (torch_npu.optim); "
             "torch.autocast instead of apex.amp; torch.nn.LayerNorm/RMSNorm instead of "
             "apex.normalization"),
    "amp_C": "apex's CUDA extension: drop with apex (torch.optim fused=True)",
    "xformers": ("torch.nn.functional.scaled_dot_product_attention, or "
                 f"torch_npu.npu_fusion_attention on NPU ({GENERATED_MODULE}'s flash_attn_* "
                 "functions call it)"),
    "triton": ("no Ascend equivalent in this stack (triton-ascend is a separate project): "
               "use the PyTorch reference path"),
    "bitsandbytes": ("not supported on Ascend: load in bf16/fp16 (or use an Ascend "
                     "quantisation tool such as msModelSlim)"),
}

_FALLBACK_RUNS = "False on Ascend: the fallback path runs"

#: Attribute / function names that are findings wherever they appear.
NAME_RULES = {
    re.compile(r"^is_flash_attn\w*$"): Rule(FLASH_ATTN, (
        "False on Ascend, so the code takes its non-flash path; to keep the flash path: "
        + _FLASH + ", or " + _HF_ATTN)),
    re.compile(r"^is_xformers\w*_available$"): Rule(XFORMERS, _FALLBACK_RUNS),
    re.compile(r"^is_triton\w*_available$"): Rule(TRITON, _FALLBACK_RUNS),
    re.compile(r"^is_bitsandbytes\w*_available$"): Rule(BITSANDBYTES, _FALLBACK_RUNS),
    re.compile(r"^is_apex\w*_available$"): Rule(APEX, _FALLBACK_RUNS),
    re.compile(r"^enable_xformers_memory_efficient_attention$"): Rule(XFORMERS, (
        "drop it: SDPA (the default) is used instead; on NPU torch_npu.npu_fusion_attention")),
    re.compile(r"^is_nccl_available$"): Rule(NCCL, (
        f"test distributed_backend() (from {GENERATED_MODULE}; 'hccl' on Ascend) instead")),
}
#: Like ``NAME_RULES``, but only as an attribute (``x.is_cuda``; a local ``is_cuda`` is fine);
#: the port writes ``helper(x)``.
ATTRIBUTE_RULES = {
    re.compile(r"^is_cuda$"): Rule(CUDA_DEVICE, "tensor.device.type in ('cuda', 'npu'); "
                                   + port_writes("is_cuda"), Port("is_cuda", "on_accelerator")),
}
#: An ``is_cuda`` test deciding whether attention code runs (``IS_CUDA_GUARD``): what the
#: port writes instead of :data:`ATTRIBUTE_RULES`' rewrite.
GUARD_PORT = Port("is_cuda_guard", "flash_supported")


def name_rule(name: str, attribute: bool = False) -> Optional[Rule]:
    """The rule a name matches (``attribute``: as ``x.<name>``), or None."""
    table = {**NAME_RULES, **ATTRIBUTE_RULES} if attribute else NAME_RULES
    return next((rule for pattern, rule in table.items() if pattern.match(name)), None)


# --- string literals -----------------------------------------------------------------
#: "cuda", "cuda:0", and the first part of built names: "cuda:" + str(i), f"cuda:{i}",
#: "cuda:%d" % i, "cuda:{}".format(i).
CUDA_DEVICE_RE = re.compile(r"^cuda(:(\d+|%d|%s|\{\w*\})?)?$")
FLASH_IMPL_RE = re.compile(r"^flash_attention_[23]$")
NCCL_STRING_RE = re.compile(r"^nccl$|\bcuda:nccl\b")
PACKAGE_NAME_RE = re.compile(
    r"^(flash[_-]attn(_2_cuda|_interface)?|apex|amp_C|xformers|triton|bitsandbytes)(\.[\w.]+)?$")
#: Names of the CUDA / NCCL / flash-attn build environment variables (a regex fragment,
#: shared with the line scan of unparsable files).
ENV_VAR_NAMES = (r"CUDA_VISIBLE_DEVICES|CUDA_LAUNCH_BLOCKING|PYTORCH_CUDA_ALLOC_CONF|"
                 r"FLASH_ATTENTION_SKIP_CUDA_BUILD|NCCL_[A-Z0-9_]+")
#: Those variables, alone or as a shell assignment ``NAME=value``.
ENV_VAR_RE = re.compile(rf"(?:^|[\s;&])({ENV_VAR_NAMES})(?:=|$)")

ENV_SUGGESTIONS = {
    "CUDA_VISIBLE_DEVICES": "ASCEND_RT_VISIBLE_DEVICES on Ascend (no spaces in the list)",
    "CUDA_LAUNCH_BLOCKING": "ASCEND_LAUNCH_BLOCKING=1 on Ascend",
    "PYTORCH_CUDA_ALLOC_CONF": "PYTORCH_NPU_ALLOC_CONF on Ascend (e.g. expandable_segments:True)",
    "NCCL_SOCKET_IFNAME": "HCCL_SOCKET_IFNAME on Ascend",
    **dict.fromkeys(("NCCL_TIMEOUT", "NCCL_BLOCKING_WAIT", "NCCL_ASYNC_ERROR_HANDLING"),
                    "HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT on Ascend"),
    "NCCL_DEBUG": "ASCEND_GLOBAL_LOG_LEVEL / ASCEND_SLOG_PRINT_TO_STDOUT on Ascend",
    # The HF Spaces idiom for installing flash-attn without compiling it: goes with the install.
    "FLASH_ATTENTION_SKIP_CUDA_BUILD": ("part of a flash-attn install: drop it with the install; "
                                        + _FLASH),
}
#: Variables whose category is not ``cuda_env`` (NCCL_* are ``nccl``).
_ENV_CATEGORIES = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": FLASH_ATTN}
NCCL_ENV_DEFAULT = ("no effect under HCCL; see HCCL_IF_BASE_PORT, HCCL_SOCKET_IFNAME, "
                    "HCCL_CONNECT_TIMEOUT, HCCL_EXEC_TIMEOUT")

DEVICE_SUGGESTION = (f"accelerator_device(i) (from {GENERATED_MODULE}; "
                     "torch.device('npu', i) on NPU)")
#: By where the string is used; the port rewrites one given as ``.to(...)`` or ``device=``.
DEVICE_CONTEXT_SUGGESTIONS = {
    "to": "torch.device('npu', i) on NPU; " + port_writes("cuda_device"),
    "device": "torch.device('npu', i) on NPU; " + port_writes("cuda_device"),
    "device_map": f"device_map=accelerator_device(i) (from {GENERATED_MODULE}), or 'auto'",
    "device_type": "device_type=accelerator_type()",
    "autocast": f"device_type=accelerator_type() (from {GENERATED_MODULE})",
    "GradScaler": f"torch.amp.GradScaler(accelerator_type()) (from {GENERATED_MODULE})",
    "compare": (f"compare with accelerator_type() (from {GENERATED_MODULE}; 'npu' on Ascend), "
                "or test tensor.device.type in ('cuda', 'npu')"),
}
NCCL_SUGGESTION = "the accelerator's collective backend ('hccl' on Ascend); " + port_writes("nccl")
FLASH_IMPL_SUGGESTION = ("CPU hosts have no flash_attention_2: 'sdpa' there, 'flash_attention_2' "
                         "on a card (transformers' own NPU flash path on Ascend); "
                         + port_writes("attn_implementation"))
CUDA_METHOD_SUGGESTION = ("x.npu() / x.to('npu:i') on NPU (.cuda() needs torch_npu's "
                          "transfer_to_npu); " + port_writes("cuda_call"))
#: Methods that are findings on anything but the torch module; the port writes
#: ``x.to(helper(<the device argument>))``.
METHOD_RULES = {"cuda": Rule(CUDA_CALL, CUDA_METHOD_SUGGESTION, Port("cuda_call", "accelerator_device"))}
_ON_DEVICE = (None, "device")  # where the port rewrites a device: positional, or device=


def string_rule(value: str) -> Optional[Rule]:
    """The rule a string's whole value matches (a CUDA device, flash-attn's implementation,
    the NCCL backend), or None; the port rewrites only the plain spellings (``"cuda:0"``,
    not ``"cuda:%d"``)."""
    device = CUDA_DEVICE_RE.match(value)
    if device:
        index = device.group(2)
        if device.group(1) is None:
            port = Port("cuda_device", "accelerator_type", keywords=_ON_DEVICE)
        elif index and index.isdigit():
            port = Port("cuda_device", "accelerator_device", (index,), keywords=_ON_DEVICE)
        else:
            port = None  # "cuda:", "cuda:%d": the rest is added at run time
        return Rule(CUDA_DEVICE, DEVICE_SUGGESTION, port)
    if FLASH_IMPL_RE.match(value):
        port = Port("attn_implementation", "hf_attn_implementation",
                    keywords=("attn_implementation", "_attn_implementation"))
        return Rule(FLASH_ATTN, FLASH_IMPL_SUGGESTION, port if value == "flash_attention_2" else None)
    if NCCL_STRING_RE.search(value):
        return Rule(NCCL, NCCL_SUGGESTION, Port("nccl", "distributed_backend") if value == "nccl" else None)
    return None


GUARDED_PREFIX = "guarded import (optional, the code has a fallback): "

# --- dependency declarations ---------------------------------------------------------
_CUDA_RUNTIME = "CUDA runtime: not needed on Ascend (CANN provides the runtime)"
#: flash-attn's distributions (PEP 503 names): the scan flags them, the port removes them.
FLASH_ATTN_PACKAGES = ("flash-attn", "flash-attn-2", "flash-attention")
_PACKAGE_SUGGESTIONS = {
    **dict.fromkeys(FLASH_ATTN_PACKAGES, "remove: " + _FLASH),
    **{name: "remove: " + SUGGESTIONS[name] for name in ("apex", "xformers", "triton", "bitsandbytes")},
    "pytorch-triton": "remove: " + SUGGESTIONS["triton"],
    "vllm": "vllm-ascend on Ascend (matching the installed vllm and torch_npu)",
    "cupy": "no Ascend build: replace with torch / numpy",
    **dict.fromkeys(("pynvml", "nvidia-ml-py"), "npu-smi info (hyport env reads it)"),
    **dict.fromkeys(("mamba-ssm", "causal-conv1d"), "CUDA-only kernels: use the model's pure-PyTorch path"),
    "liger-kernel": "Triton kernels, no Ascend build: drop (use the PyTorch modules)",
    **dict.fromkeys(("cudatoolkit", "pytorch-cuda", "cudnn"), _CUDA_RUNTIME),
    "nccl": "CUDA collectives: not needed on Ascend (HCCL ships with CANN)",
}
_PREFIX_SUGGESTIONS = (
    ("nvidia-", "CUDA runtime wheel: not needed on Ascend (CANN provides the runtime)"),
    ("cupy-cuda", _PACKAGE_SUGGESTIONS["cupy"]),
    ("cuda-", "CUDA toolkit package: not needed on Ascend (CANN provides the runtime)"),
)
CUDA_WHEEL_SUGGESTION = ("CUDA build of torch: on Ascend install the plain torch matching "
                         "torch_npu (torch X.Y <-> torch_npu X.Y.*), then torch_npu")
#: ``torch==2.1.0+cu121``, a cu index URL, a conda build string ``=py3.10_cuda11.8_...``.
_CUDA_WHEEL_RE = re.compile(r"\+cu\d{2,3}\b|download\.pytorch\.org/whl/cu\d{2,3}|=\S*cuda\d")


def normalize_dist_name(name: str) -> str:
    """PEP 503 normal form: lower case, runs of ``-_.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_suggestion(name: str) -> Optional[str]:
    """Suggestion for a dependency named ``name``, or None when it ports as it is."""
    norm = normalize_dist_name(name)
    if norm in _PACKAGE_SUGGESTIONS:
        return _PACKAGE_SUGGESTIONS[norm]
    for prefix, text in _PREFIX_SUGGESTIONS:
        if norm.startswith(prefix):
            return text
    return None


def cuda_wheel_in(text: str) -> bool:
    """True when a requirement line pins a CUDA build of torch (``+cu121``, a cu index)."""
    return bool(_CUDA_WHEEL_RE.search(text))


def suggestion_for(qualified: str, imported: bool = False) -> str:
    """Suggestion for a dotted name: the longest prefix of it found in ``SUGGESTIONS``,
    then what ``hyport port`` does with it. ``imported``: the name was imported by
    ``from torch.cuda import``, which the port leaves. A ``torch.cuda`` name the port
    leaves with no entry of its own says only why (the port's hand fix), not the generic
    ``torch.cuda`` text."""
    parts = qualified.split(".")
    prefix = next((".".join(parts[:end]) for end in range(len(parts), 0, -1)
                   if ".".join(parts[:end]) in SUGGESTIONS), None)
    port = port_note(qualified, imported)
    if prefix == "torch.cuda" and port and port.startswith("hyport port leaves it"):
        return port
    text = SUGGESTIONS[prefix] if prefix else f"no direct Ascend equivalent known for {qualified}"
    return f"{text}; {port}" if port else text


def port_note(qualified: str, imported: bool = False) -> Optional[str]:
    """What ``hyport port`` writes for a dotted name, or why it leaves it (:func:`port_of`);
    None when the table has nothing to say about it."""
    port = port_of(qualified, imported)
    if port is None:
        return None
    if port.why:
        return f"hyport port leaves it: {port.why}"
    if port.helper:
        return f"hyport port writes {port.helper}().{qualified.split('.')[2]} (from {GENERATED_MODULE})"
    return f"hyport port imports it from {GENERATED_MODULE}"


def port_of(qualified: str, imported: bool = False) -> Optional[Port]:
    """What ``hyport port`` does with a dotted name: a ``torch.cuda`` name (``imported``:
    as a name of ``from torch.cuda import``), a name of flash-attn's API, a module with no
    Ascend build; None for any other."""
    parts = qualified.split(".")
    if parts[:2] == ["torch", "cuda"] and len(parts) > 2:
        if imported:  # from a submodule with a hand fix of its own (torch.cuda.amp): that one
            return Port("torch_cuda", why=CUDA_NAMES_BY_HAND.get(parts[2], CUDA_IMPORTS_BY_HAND)
                        if len(parts) > 3 else CUDA_IMPORTS_BY_HAND)
        if parts[2] in SERVED_CUDA_NAMES:
            return Port("torch_cuda", "accelerator_module")
        return Port("torch_cuda", why=CUDA_NAMES_BY_HAND.get(
            parts[2], f"torch.cuda.{parts[2]} has no checked NPU counterpart: port it by hand"))
    if ".".join(parts[:-1]) in SERVED_FLASH_MODULES and parts[-1] in SERVED_FLASH_NAMES:
        return Port("flash_attn_import")
    if parts[0] in UNPORTABLE_MODULES:
        return Port(parts[0], why=UNPORTABLE_MODULES[parts[0]])
    return None


def category_for(qualified: str) -> Optional[str]:
    """Category of a dotted name, or None when it is not a finding."""
    if qualified.split(".", 1)[0] in MODULE_CATEGORIES:
        return MODULE_CATEGORIES[qualified.split(".", 1)[0]]
    for prefix, category in QUALIFIED_CATEGORIES.items():
        if qualified == prefix or qualified.startswith(prefix + "."):
            return category
    return None


def env_var_rule(var: str) -> tuple[str, str]:
    """Category and suggestion for a CUDA / NCCL environment variable name."""
    if var.startswith("NCCL_"):
        return NCCL, ENV_SUGGESTIONS.get(var, NCCL_ENV_DEFAULT)
    return _ENV_CATEGORIES.get(var, CUDA_ENV), ENV_SUGGESTIONS[var]


def module_category(module: str) -> Optional[str]:
    """Category of a module named in a string (``"flash_attn"``, ``"flash-attn"``)."""
    top = module.split(".", 1)[0].replace("-", "_")
    return MODULE_CATEGORIES.get(top)
