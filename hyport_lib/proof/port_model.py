"""A tree of model code as a tiny random-weight model, the same from the original and the port.

Weights come from a generator seeded per parameter name, so both builds are identical
without trusting ``_init_weights`` (remote code's often references a bigger file's classes).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.util
import inspect
import itertools
import json
import sys
import types
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from hyport_lib.scan.rules import GENERATED_MODULE
from hyport_lib.proof.port_record import model_files

#: Config fields shrunk when the config has them (a field it lacks is not added).
SHRINK = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256,
    "max_position_embeddings": 256, "kv_channels": 32, "n_embd": 64, "n_layer": 2,
    "n_head": 2, "d_model": 64, "num_layers": 2,
}
#: Config switches that select a flash-attention path (set when the config has them).
FLASH_SWITCHES = {"use_flash_attn": True, "use_flash_attention": True,
                  "attn_implementation": "flash_attention_2"}
#: The input kinds a model's forward is recognised by.
LM, NAVIT, VISION = "causal_lm", "packed_vision", "vision"

_counter = itertools.count()


class NoModelClass(LookupError):
    """The tree holds no model class the proof knows how to build and feed."""


def load_tree(root: Path, label: str, only: Optional[str] = None) -> list[types.ModuleType]:
    """:func:`~.port_record.model_files` of ``root`` as modules of a fresh package (relative
    imports between them work), ``root`` on ``sys.path`` meanwhile for code that imports its
    siblings by their plain names."""
    name = f"_hyport_port_{label}_{next(_counter)}"
    package = types.ModuleType(name)
    package.__path__ = [str(root)]
    package.__package__ = name
    spec = importlib.util.spec_from_loader(name, loader=None, is_package=True)
    spec.submodule_search_locations = [str(root)]
    package.__spec__ = spec
    sys.modules[name] = package
    sys.path.insert(0, str(root))
    try:
        return [importlib.import_module(f"{name}.{file.stem}") for file in model_files(root, only)]
    finally:
        sys.path.remove(str(root))


def _input_kind(cls) -> Optional[str]:
    try:
        parameters = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return None
    if cls.__name__.endswith(("ForCausalLM", "LMHeadModel")) and "input_ids" in parameters:
        return LM
    if "pixel_values" in parameters and ({"grid_thws", "grid_thw"} & set(parameters)):
        return NAVIT
    if "pixel_values" in parameters:
        return VISION
    return None


@dataclass
class ModelChoice:
    class_name: str
    module: str  # file stem
    kind: str  # how it is fed: LM, NAVIT or VISION


def pick_model(modules: list[types.ModuleType]) -> ModelChoice:
    """A causal LM head, else a packed (NaViT-style) vision model, else a vision model."""
    from transformers import PreTrainedModel

    found = []
    for module in modules:
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, PreTrainedModel) \
                    and cls.__module__ == module.__name__ and "forward" in vars(cls):
                kind = _input_kind(cls)
                if kind:
                    found.append((kind, cls.__name__, module.__name__.rpartition(".")[2]))
    if not found:
        raise NoModelClass("no PreTrainedModel subclass with a forward taking input_ids (a "
                          "*ForCausalLM / *LMHeadModel) or pixel_values in the tree")
    order = {LM: 0, NAVIT: 1, VISION: 2}
    kind, name, stem = min(found, key=lambda f: (order[f[0]], f[1]))
    return ModelChoice(name, stem, kind)


def tiny_config_kwargs(config_cls, dtype: torch.dtype, base: Optional[dict] = None,
                       overrides: Optional[dict] = None) -> dict:
    """``base`` (the tree's ``config.json``: remote code often reads fields only the
    checkpoint's config sets), sizes shrunk, flash switches on, precision flags (``bf16`` /
    ``fp16`` / ``fp32``) following ``dtype``, then ``overrides``."""
    defaults = config_cls()
    known = set(vars(defaults)) | set(base or {})
    kwargs = {k: v for k, v in (base or {}).items()
              if k not in ("architectures", "auto_map", "torch_dtype", "dtype", "transformers_version")}
    kwargs.update({k: v for k, v in SHRINK.items() if k in known})
    kwargs.update({k: v for k, v in FLASH_SWITCHES.items() if k in known})
    flags = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for flag, flag_dtype in flags.items():
        if isinstance(getattr(defaults, flag, None), bool):
            kwargs[flag] = flag_dtype == dtype
    kwargs.update(overrides or {})
    return kwargs


def read_config_json(root: Path) -> Optional[dict]:
    """None when the tree has none; ValueError naming the file when not a JSON object."""
    path = root / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def without_flash(kwargs: dict) -> dict:
    """Every flash switch off: the model's own eager path."""
    off = {"use_flash_attn": False, "use_flash_attention": False, "attn_implementation": "eager"}
    return {**kwargs, **{k: v for k, v in off.items() if k in kwargs}}


def build(modules, choice: ModelChoice, config_kwargs: dict, dtype, device, seed: int):
    try:  # transformers 5
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4
        from transformers.modeling_utils import no_init_weights

    module = next(m for m in modules if m.__name__.endswith("." + choice.module))
    cls = getattr(module, choice.class_name)
    config = cls.config_class(**config_kwargs)
    with no_init_weights():
        model = cls(config)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            generator = torch.Generator().manual_seed(seed + zlib.crc32(name.encode()))
            values = torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * 0.02
            if tensor.dim() == 1 and name.endswith("weight"):
                values += 1.0  # norm scales
            elif tensor.dim() >= 2:
                values *= 2.5  # ~N(0, 0.05): a signal that survives a few layers
            tensor.copy_(values.to(tensor.dtype))
    return model.to(device=device, dtype=dtype).eval()


@dataclass
class Batch:
    name: str
    kind: str
    inputs: dict  # the forward's keyword arguments
    valid: Optional[torch.Tensor] = None  # (B, S) bool of positions compared, LM only


def batches(choice: ModelChoice, config, device, seed: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(seed)
    if choice.kind == LM:
        vocab = int(getattr(config, "vocab_size", 256))
        ids = torch.randint(3, vocab, (2, 16), generator=generator)
        padded_mask = torch.ones(2, 16, dtype=torch.long)
        # left padding, as batched generation pads: with causal attention a right pad is
        # never seen by a real token, so a port that dropped the mask would pass unseen
        padded_mask[1, :7] = 0
        return [
            Batch("dense", "dense", {"input_ids": ids.to(device)}, torch.ones(2, 16, dtype=torch.bool)),
            Batch("padded", "padded", {"input_ids": ids.to(device),
                                       "attention_mask": padded_mask.to(device)},
                  padded_mask.bool()),
        ]
    channels = int(getattr(config, "num_channels", 3))
    patch = int(getattr(config, "patch_size", 16))
    if choice.kind == NAVIT:
        stride = int(getattr(config, "hidden_stride", 2))
        grids = [[1, 6 * stride, 6 * stride], [1, 4 * stride, 6 * stride]]
        out = []
        for name, chosen in (("one image", grids[:1]), ("two images packed", grids)):
            tokens = sum(t * h * w for t, h, w in chosen)
            pixels = torch.randn(tokens, channels * patch * patch, generator=generator)
            out.append(Batch(name, "image" if len(chosen) == 1 else "packed",
                             {"pixel_values": pixels.to(device),
                              "grid_thws": torch.tensor(chosen, device=device)}))
        return out
    size = int(getattr(config, "image_size", 224))
    pixels = torch.randn(2, channels, size, size, generator=generator)
    return [Batch("image batch", "image", {"pixel_values": pixels.to(device)})]


def first_tensor(output) -> torch.Tensor:
    """The logits of an LM output, else its first tensor."""
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if hasattr(output, "values") else output
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"the model's output {type(output).__name__} holds no tensor")


class _NoFlashAttn(importlib.abc.MetaPathFinder):
    """Refuses ``import flash_attn`` (and its submodules) while the port loads and runs, so
    that on a host where flash-attn is installed an import the port left still fails."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "flash_attn" or fullname.startswith("flash_attn."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden from the port "
                                      "by the proof)", name=fullname)
        return None


@contextlib.contextmanager
def without_flash_attn():
    """What was loaded is put back after."""
    hidden = {k: sys.modules.pop(k) for k in list(sys.modules)
              if k == "flash_attn" or k.startswith("flash_attn.")}
    blocker = _NoFlashAttn()
    sys.meta_path.insert(0, blocker)
    try:
        yield
    finally:
        sys.meta_path.remove(blocker)
        for key in [k for k in sys.modules if k == "flash_attn" or k.startswith("flash_attn.")]:
            del sys.modules[key]
        sys.modules.update(hidden)


def _import_styles(folder: Path) -> set[str]:
    """``relative``, ``plain``: how the files of ``folder`` import the generated module."""
    styles = set()
    for path in folder.glob("*.py"):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and (
                    node.module == GENERATED_MODULE or (node.module is None and any(
                        a.name == GENERATED_MODULE for a in node.names))):
                styles.add("relative")
            elif (isinstance(node, ast.ImportFrom) and node.level == 0
                  and node.module == GENERATED_MODULE) or (isinstance(node, ast.Import) and any(
                      a.name == GENERATED_MODULE for a in node.names)):
                styles.add("plain")
    return styles


def generated_modules(dst: Path, ported) -> dict[str, object]:
    """Every copy of the generated module (by its path in the tree), imported now under the
    name the code imports it by, so that a copy the code imports only inside a function is
    configured too."""
    package = ported[0].__name__.rpartition(".")[0] if ported else None
    found = {}
    for path in sorted(dst.rglob(f"{GENERATED_MODULE}.py")):
        relative = path.relative_to(dst).with_suffix("").parts
        styles = _import_styles(path.parent)
        names = [".".join((package, *relative))] if package and "relative" in styles else []
        if len(relative) == 1 and "plain" in styles:
            names.append(GENERATED_MODULE)
        sys.path.insert(0, str(dst))
        try:
            for name in names:
                where = path.relative_to(dst).as_posix()
                if len(names) > 1:  # imported both ways: two module objects, both checked
                    where += f" (imported as {name})"
                found[where] = importlib.import_module(name)
        finally:
            sys.path.remove(str(dst))
    return found
