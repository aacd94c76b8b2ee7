"""What the memory model needs to know of a checkpoint, read from its safetensors headers and
its ``config.json``, never by loading it: a 72 B model is planned on a laptop in a second.

The parameter count comes from the headers (tied weights are stored once, so counted once);
the sizes that set activations and the KV cache (layers, hidden size, heads, vocabulary)
come from the language model's part of the config.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.checkpoint_files.header import DTYPE_BITS, FLOAT_DTYPES, read_header
from hyport_lib.checkpoint_files.weight_files import checkpoint_files
from hyport_lib.models.families import read_config
from hyport_lib.models.loading import build_empty_model
from hyport_lib.utils.wording import counted

#: safetensors' dtype names and the torch dtype each loads as.
STORED_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
#: An expert list's tensor: ``model.layers.3.mlp.experts.7.w1.weight`` -> ``model.layers.3.mlp.experts``.
_EXPERT = re.compile(r"^(.*\.experts)\.\d+\.")
#: Where a VLM's or a wrapper's config keeps its language model's sizes.
_TEXT_SECTIONS = ("text_config", "llm_config", "language_config", "thinker_config")


@dataclass(frozen=True)
class ModelShape:
    """A checkpoint's sizes. ``parameters`` counts every tensor stored (a VLM's vision tower
    included); the other sizes are its language model's."""

    name: str
    parameters: int
    checkpoint_bytes: int  # of the tensors' data
    stored_dtype: str  # the float dtype holding most bytes, as safetensors names it (BF16)
    layers: int
    hidden: int
    intermediate: int  # per token: an MoE's routed experts x their width (plus a shared expert)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    #: the most parameters one module holds (the embedding, mostly): ZeRO-3 gathers a whole
    #: module at a time, so this one is on every card at its peak (DeepSpeed's largest_layer_params).
    largest_module_parameters: int
    source: str  # how the figures were read, for the plan's notes

    @property
    def kv_width(self) -> int:
        """Width of one of K or V per token and layer."""
        return self.kv_heads * self.head_dim


def read_model_shape(model_path: str | Path) -> ModelShape:
    """Raises ValueError (naming the file) for a folder without safetensors weights or a
    config the memory model cannot read sizes from."""
    folder = Path(model_path)
    files = checkpoint_files(str(folder))
    if not files.shards:
        raise ValueError(f"{folder}: no memory plan without safetensors headers ({files.unused})")
    config = read_config(folder)
    bits = _quantized_bits(config)
    counts: dict[str, int] = {}
    by_module: dict[str, int] = defaultdict(int)
    bytes_by_dtype: dict[str, int] = defaultdict(int)
    for shard in files.shards:
        header = read_header(folder / shard, validate=False)
        if not header.readable:
            problem = header.findings[0].detail if header.findings else "unreadable"
            raise ValueError(f"{folder / shard}: its header cannot be read ({problem})")
        for entry in header.tensors.values():
            # a quantised checkpoint packs several weights in one integer (GPTQ: 8 in an I32)
            packed = bits and not entry.is_float and DTYPE_BITS[entry.dtype] > bits
            counts[entry.name] = entry.numel * (DTYPE_BITS[entry.dtype] // bits if packed else 1)
            by_module[_module_of(entry.name)] += counts[entry.name]
            bytes_by_dtype[entry.dtype] += entry.numel * DTYPE_BITS[entry.dtype] // 8
    floats = {d: n for d, n in bytes_by_dtype.items() if d in FLOAT_DTYPES}
    shards = counted(len(files.shards), "safetensors file")
    return shape_from_config(config, name=folder.name, parameters=sum(counts.values()),
                             checkpoint_bytes=sum(bytes_by_dtype.values()),
                             stored_dtype=max(floats, key=floats.get) if floats else "F32",
                             largest_module_parameters=max(by_module.values(), default=0),
                             source=f"headers of {shards} and config.json of {folder}"
                                    + (f" ({bits}-bit packed weights counted one by one)" if bits else ""))


def _module_of(tensor: str) -> str:
    """The module a tensor belongs to, as ZeRO-3 gathers it: an expert list's tensors
    (``mlp.experts.7.w1.weight``) belong to the list, which transformers builds as one module."""
    match = _EXPERT.match(tensor)
    return match.group(1) if match else tensor.rpartition(".")[0]


def _quantized_bits(config: Mapping) -> int:
    """The bits of a quantised checkpoint's packed weights (GPTQ, AWQ: 4 or 8 in an I32); 0 when
    not packed (a tensor whose dtype is that wide holds one weight: the caller leaves it)."""
    quantization = config.get("quantization_config")
    bits = quantization.get("bits") if isinstance(quantization, Mapping) else None
    return bits if isinstance(bits, int) and 0 < bits < 32 else 0


def model_shape(model_path: str, *, trust_remote_code: bool = False) -> ModelShape:
    """From the headers where the folder has safetensors weights; otherwise (a ``.bin``
    checkpoint) from an empty model built on the meta device, which allocates nothing."""
    files = checkpoint_files(str(model_path))
    if files.shards:
        return read_model_shape(model_path)
    model = build_empty_model(str(model_path), trust_remote_code=trust_remote_code)
    return shape_of_model(model, name=Path(model_path).name,
                          source=f"an empty model built from {Path(model_path).name}/config.json "
                                 f"({files.unused})")


def loading_dtype(dtype: str, model_path: str, shape: ModelShape) -> str:
    """``auto`` as ``from_pretrained`` reads it: the config's dtype, else the stored one."""
    if dtype != "auto":
        return dtype
    try:
        config = read_config(model_path)
    except (OSError, ValueError):
        config = {}
    named = str(config.get("dtype") or config.get("torch_dtype") or "").replace("torch.", "")
    return named if named in ("float32", "bfloat16", "float16") else STORED_DTYPES.get(shape.stored_dtype, "float32")


def shape_from_config(config: Mapping, *, name: str, parameters: int, checkpoint_bytes: int, stored_dtype: str,
                      largest_module_parameters: int, source: str) -> ModelShape:
    """The language model's sizes from a config's dict (its text section where it has one)."""
    text = _text_section(_with_defaults(config))
    hidden = _size(text, ("hidden_size", "d_model", "n_embd", "dim"), name)
    heads = _size(text, ("num_attention_heads", "n_head", "n_heads", "num_heads"), name)
    kv_heads = _optional(text, ("num_key_value_heads", "num_kv_heads", "n_kv_heads")) or heads
    head_dim = _optional(text, ("head_dim",)) or hidden // heads
    experts = _optional(text, ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"))
    experts_per_token = _optional(text, ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts"))
    expert_width = _optional(text, ("moe_intermediate_size", "expert_intermediate_size"))
    dense_width = _optional(text, ("intermediate_size", "ffn_dim", "n_inner")) or 4 * hidden
    if experts and experts_per_token:
        # each token runs its routed experts (Mixtral's are intermediate_size wide) and any
        # shared ones (Qwen2-MoE: one of its own width; DeepSeek: n_shared_experts of the experts')
        routed = expert_width or dense_width
        shared = (_optional(text, ("shared_expert_intermediate_size",))
                  or (_optional(text, ("n_shared_experts",)) or 0) * routed)
        width = experts_per_token * routed + shared
    else:
        width = dense_width
    return ModelShape(
        name=name, parameters=int(parameters), checkpoint_bytes=int(checkpoint_bytes), stored_dtype=stored_dtype,
        layers=_size(text, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"), name),
        hidden=hidden, intermediate=int(width), heads=heads, kv_heads=int(kv_heads), head_dim=int(head_dim),
        vocab=_size(text, ("vocab_size", "padded_vocab_size"), name),
        largest_module_parameters=int(largest_module_parameters), source=source)


def shape_of_model(model, *, name: str, source: str) -> ModelShape:
    """The shape of a built (empty, meta-device) model: for a checkpoint without safetensors
    weights and for the tiny default before it is saved. Tied weights counted once."""
    unique = {id(p): p for p in model.parameters()}
    by_module = defaultdict(int)
    for module_name, module in model.named_modules():
        by_module[module_name] += sum(p.numel() for p in module.parameters(recurse=False))
    config = model.config.to_dict()
    dtype = str(getattr(model.config, "dtype", None) or getattr(model.config, "torch_dtype", None) or "float32")
    stored = {"torch.bfloat16": "BF16", "bfloat16": "BF16", "torch.float16": "F16", "float16": "F16"}.get(dtype, "F32")
    count = sum(p.numel() for p in unique.values())
    return shape_from_config(config, name=name, parameters=count,
                             checkpoint_bytes=count * DTYPE_BITS[stored] // 8, stored_dtype=stored,
                             largest_module_parameters=max(by_module.values(), default=0), source=source)


def _with_defaults(config: Mapping) -> Mapping:
    """The config as transformers reads it: the sizes a config.json leaves at the class's
    defaults filled in (llava-1.5's text_config names no hidden_size). A model_type this
    transformers does not know keeps its own words."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        return config
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its warnings about the config's other fields are not the plan's
    try:
        built = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
        filled = built.to_dict()
        text = built.get_text_config()
        if text is not built:
            filled["text_config"] = text.to_dict()
    except Exception:  # noqa: BLE001 — a config transformers rejects (strict fields, several text configs): its own words
        return config
    finally:
        hf_logging.set_verbosity(verbosity)
    return filled


def _text_section(config: Mapping) -> Mapping:
    for key in _TEXT_SECTIONS:
        section = config.get(key)
        if isinstance(section, Mapping) and any(k in section for k in ("hidden_size", "d_model")):
            return section
    return config


def _optional(section: Mapping, keys: tuple[str, ...]) -> Optional[int]:
    for key in keys:
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            return max(value)  # per-layer widths (OpenELM, Gemma 3n): the widest sets the peak
    return None


def _size(section: Mapping, keys: tuple[str, ...], name: str) -> int:
    value = _optional(section, keys)
    if value is None:
        raise ValueError(f"{name}/config.json: none of {', '.join(keys)} holds a positive number; the memory "
                         f"model needs it for activations and the KV cache")
    return value


def gib(n_bytes: float) -> float:
    return n_bytes / 2 ** 30


def format_gib(n_bytes: float) -> str:
    """``30.1 GiB``; three significant figures below 10 GiB."""
    value = gib(n_bytes)
    return f"{value:.3g} GiB" if value < 10 else f"{value:.1f} GiB" if value < 1000 else f"{math.ceil(value):,} GiB"
