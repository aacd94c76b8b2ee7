"""The checkpoint's own weights in the model the proof shrinks (shrunk.py): a convolution or a
gate that is almost an identity at initialisation hides a leak trained weights show, so the
proof runs on the user's weights where a checkpoint is given (docs/attention_swap.md,
"The proof before launch").

Only what the shrunk model keeps is read, tensor by tensor with ``safetensors.safe_open``
(memory-mapped), never the whole checkpoint: the kept layers, the first rows of a slimmed
MLP or expert list, the embedding rows of the batch's tokens. What cannot be read as the
model holds it (experts transformers fuses on load, another shape, a quantised dtype)
keeps its seeded random values, and the proof says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from hyport_lib.proof.shrunk import slimmed_sizes
from hyport_lib.checkpoint_files.weight_files import CheckpointFiles

#: The dtypes read (cast to float32); any other (int8, float8, packed 4-bit) needs
#: dequantising and stays random.
_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
#: Tensors left random named in the proof's line.
_NAMED = 3


@dataclass
class KeptWeights:
    """What the shrunk model holds of the checkpoint."""

    from_checkpoint: int = 0
    total: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    #: the first tensors left random, and the first few reasons why
    left_random: list = field(default_factory=list)
    reasons: list = field(default_factory=list)
    unused: str = ""  # why nothing was read

    def line(self) -> str:
        names = ", ".join(self.left_random) + (", ..." if self.total - self.from_checkpoint > _NAMED else "")
        if not self.from_checkpoint:
            why = self.unused or (f"no tensor of the checkpoint fits the shrunk model "
                                  f"({'; '.join(self.reasons)}: {names})")
            return f"random weights (seeded): {why}"
        said = f"checkpoint weights for {self.from_checkpoint} of {self.total} tensors"
        if self.from_checkpoint < self.total:
            said += f", {self.total - self.from_checkpoint} left random (seeded; {'; '.join(self.reasons)}: {names})"
        return said

    def leave_random(self, name: str, why: str) -> None:
        if len(self.left_random) < _NAMED:
            self.left_random.append(name)
        if why not in self.reasons and len(self.reasons) < _NAMED:
            self.reasons.append(why)


def keep_checkpoint_weights(model, files: CheckpointFiles, config, small,
                            vocabulary: Optional[Sequence[int]] = None) -> KeptWeights:
    """Copies into ``model`` (built from ``small``, the shrink of ``config``) the checkpoint's
    values of every tensor it keeps, cast to float32. ``vocabulary``: the checkpoint ids of
    the compact vocabulary's rows, in order (shrunk.compact_vocabulary)."""
    import torch

    started = time.perf_counter()
    targets = _model_tensors(model)
    kept = KeptWeights(total=len(targets), unused=files.unused)
    if files.unused:
        return kept
    quantised = getattr(config, "quantization_config", None)
    if quantised is not None:
        method = quantised.get("quant_method", "?") if isinstance(quantised, dict) else type(quantised).__name__
        kept.unused = f"a quantised checkpoint ({method}): its weights need dequantising"
        return kept
    located = _locate(model, files)
    renumbered = _other_token_tables(model, config) if vocabulary is not None else set()
    resize = _Resize(slimmed_sizes(config, small), getattr(config.get_text_config(), "vocab_size", None),
                     list(vocabulary) if vocabulary is not None else None)
    handles = {}
    try:
        with torch.no_grad():
            for name, tensor in targets.items():
                where = located.get(name)
                if where is None:
                    kept.leave_random(name, "not in the checkpoint")
                    continue
                if name in renumbered:
                    kept.leave_random(name, "looked up by token id, and the compact vocabulary renumbers the ids "
                                            "without cutting this table")
                    continue
                if isinstance(where, str):
                    kept.leave_random(name, where)
                    continue
                key, shard = where
                if shard not in handles:
                    handles[shard] = _open(files.folder / shard)
                value, why = _read(handles[shard], key, tuple(tensor.shape), resize)
                if value is None:
                    kept.leave_random(name, why)
                    continue
                tensor.copy_(value.to(torch.float32))
                kept.from_checkpoint += 1
                kept.bytes_read += int(why)
    finally:
        handles.clear()  # safe_open handles close (and unmap) when released
    kept.seconds = round(time.perf_counter() - started, 3)
    return kept


def _other_token_tables(model, config) -> set[str]:
    """The weights of embeddings looked up by token id besides the input embedding (Gemma 3n's
    per-layer inputs): a config sizes them ``vocab_size_*``. The compact vocabulary cuts only
    ``vocab_size``, so their checkpoint rows would sit under other ids."""
    import torch

    text = config.get_text_config()
    sizes = {v for k, v in vars(text).items() if k.startswith("vocab_size") and k != "vocab_size" and isinstance(v, int)}
    first = model.get_input_embeddings()
    return {f"{name}.weight" for name, module in model.named_modules()
            if isinstance(module, torch.nn.Embedding) and module is not first and module.num_embeddings in sizes}


def _model_tensors(model) -> dict:
    """The model's floating-point parameters and persistent buffers, each once (a tied output
    layer is its embedding)."""
    seen, tensors = set(), {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen or not tensor.is_floating_point():
            continue
        seen.add(id(tensor))
        tensors[name] = tensor.data
    return tensors


def _locate(model, files: CheckpointFiles) -> dict:
    """Model tensor name -> ``(checkpoint name, shard)``, or why not where transformers
    builds the tensor from several of the checkpoint's on load."""
    if files.weight_map is not None:
        names = files.weight_map
    else:
        with _open(files.folder / files.shards[0]) as handle:
            names = {key: files.shards[0] for key in handle.keys()}
    rename = _renaming(model)
    located = {}
    for key, shard in names.items():
        target, fused = rename(key)
        if fused:
            located.setdefault(target, "experts transformers fuses from several checkpoint tensors on load")
        else:
            located.setdefault(target, (key, shard))
    return located


def _renaming(model):
    """Checkpoint name -> ``(model name, fused)``, by transformers 5's own loading rules
    (VLM prefixes, legacy names, experts fused on load): ``get_model_conversion_mapping`` and
    ``rename_source_key``, the pair PEFT uses to map checkpoint names. Without them
    (transformers 4) names are taken as they are, and an unmatched one stays random."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, rename_source_key
    except ImportError:
        return lambda key: (key, False)
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    own = model.state_dict()

    def rename(key: str):
        target, pattern = rename_source_key(key, renamings, converters, model.base_model_prefix, own)
        return target, pattern is not None

    return rename


def _open(path: Path):
    from safetensors import safe_open

    return safe_open(str(path), framework="pt")


@dataclass(frozen=True)
class _Resize:
    """How a checkpoint dimension maps onto the shrunk model's: the same size, a slimmed
    size (its first rows), or the full vocabulary (the compact vocabulary's rows, by id)."""

    slimmed: set
    vocab_size: Optional[int]
    vocabulary: Optional[list]

    def runs(self) -> list[tuple[int, int]]:
        """The vocabulary's ids as ``[start, stop)`` runs of consecutive ids."""
        runs = []
        for i in self.vocabulary:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        return runs


def _read(handle, key: str, shape: tuple, resize: _Resize):
    """``(tensor of ``shape``, bytes read)``, or ``(None, why)``."""
    import torch

    piece = handle.get_slice(key)
    stored, dtype = tuple(piece.get_shape()), piece.get_dtype()
    if dtype not in _FLOAT_BYTES:
        return None, f"stored as {dtype}"
    if len(stored) != len(shape):
        return None, f"shape {list(stored)} in the checkpoint, {list(shape)} in the model"
    by_id = False
    for dim, (full, cut) in enumerate(zip(stored, shape)):
        if full == cut:
            continue
        if (dim == 0 and resize.vocabulary is not None and full == resize.vocab_size
                and cut == len(resize.vocabulary) and max(resize.vocabulary) < full):
            by_id = True
        elif (full, cut) not in resize.slimmed:
            return None, f"shape {list(stored)} in the checkpoint, {list(shape)} in the model"
    if stored == shape:
        value = handle.get_tensor(key)
    else:
        rest = tuple(slice(0, n) for n in shape[1:])
        if by_id:  # contiguous runs of ids: never the whole embedding
            value = torch.cat([piece[(slice(a, b), *rest)] for a, b in resize.runs()])
        else:
            value = piece[tuple(slice(0, n) for n in shape)]
    if tuple(value.shape) != shape:  # never copy a tensor of another shape
        return None, f"read as {list(value.shape)}, the model holds {list(shape)}"
    return value, value.numel() * _FLOAT_BYTES[dtype]
