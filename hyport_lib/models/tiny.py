"""The embedded default model (``model_path: tiny``): a tiny but real LLaVA checkpoint.

CLIP vision tower, Llama text model, random weights from a fixed seed, a byte-level BPE
tokenizer trained offline: saved with ``save_pretrained`` and loaded like a downloaded
checkpoint, so every stage runs end to end without network. LLaVA rather than Qwen2-VL:
Qwen2-VL's processor needs torchvision, which does not work beside CI's CPU torch. Built
once per cache (:func:`~hyport_lib.models.model_cache.build_once`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional, Union

from hyport_lib.models.tiny_tokenizer import (
    CHAT_TEMPLATE,
    IMAGE_TOKEN,
    build_tokenizer,
    invisible_token_ids,
)
from hyport_lib.models.model_cache import build_once, cache_folder

#: Bump when the architecture, tokenizer, template, weights or saved files change: the
#: cache folder name carries it, so a new version regenerates the checkpoint.
TINY_MODEL_VERSION = 3
#: Seed of the random weights.
TINY_SEED = 0
#: The name users write in parameters to get this model.
TINY_MODEL_NAME = "tiny"
#: Written last into a finished checkpoint folder; its presence means "complete".
MARKER_FILE = "hyport_tiny.json"

_IMAGE_SIZE = 32
_PATCH_SIZE = 8


def tiny_model_dir(cache_dir: Optional[Union[str, os.PathLike]] = None,
                   *, max_shard_size: Optional[str] = None) -> Path:
    """The folder the checkpoint lives in (whether or not it exists yet); a sharded copy
    (``max_shard_size``) has its own."""
    tag = str(max_shard_size or "").strip().upper()
    if max_shard_size is not None and not (tag[:1].isdigit() and tag.isalnum()):
        raise ValueError(f"max_shard_size={max_shard_size!r}: expected e.g. '100KB' or '2MB'")
    tail = f"-shards-{tag}" if max_shard_size is not None else ""
    return cache_folder(f"tiny-vlm-v{TINY_MODEL_VERSION}", cache_dir, tail)


def ensure_tiny_model(cache_dir: Optional[Union[str, os.PathLike]] = None,
                      *, max_shard_size: Optional[str] = None) -> Path:
    """The tiny checkpoint's folder, built first if it is not cached (safe from several
    processes at once). ``max_shard_size`` (e.g. ``"100KB"``) saves the weights in shards,
    for the weights stage to exercise sharded checkpoints."""
    folder = tiny_model_dir(cache_dir, max_shard_size=max_shard_size)
    return build_once(folder, MARKER_FILE, lambda tmp: _build(tmp, max_shard_size=max_shard_size),
                      "the tiny model")


def resolve_model_path(model_path: str) -> str:
    """``"tiny"`` becomes the embedded checkpoint's folder; anything else (a local
    folder or a hub id) is returned unchanged."""
    if not isinstance(model_path, (str, os.PathLike)) or not str(model_path).strip():
        raise ValueError(f"model_path={model_path!r}: expected 'tiny', a folder or a hub id")
    if str(model_path).strip() == TINY_MODEL_NAME:
        return str(ensure_tiny_model())
    return str(model_path)


# --- building ------------------------------------------------------------------------


def _build(out_dir: Path, *, max_shard_size: Optional[str]) -> None:
    import torch
    import transformers
    from transformers import GenerationConfig, LlavaForConditionalGeneration, LlavaProcessor

    started = time.perf_counter()
    tokenizer = build_tokenizer()
    processor = LlavaProcessor(
        image_processor=_image_processor(),
        tokenizer=tokenizer,
        patch_size=_PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the CLS token, dropped by "default"
        image_token=IMAGE_TOKEN,
        chat_template=CHAT_TEMPLATE,
    )
    config = _model_config(tokenizer)
    # A private RNG state: building must not disturb the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = LlavaForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        # Random weights would often pick eos or an unprintable byte first; hiding
        # those makes every run produce max_new_tokens of visible text.
        suppress_tokens=invisible_token_ids(tokenizer),
    )
    save_kwargs = {"safe_serialization": True}
    if max_shard_size is not None:
        save_kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(out_dir, **save_kwargs)
    processor.save_pretrained(out_dir)
    marker = {
        "name": TINY_MODEL_NAME,
        "version": TINY_MODEL_VERSION,
        "seed": TINY_SEED,
        "architecture": type(model).__name__,
        "num_parameters": int(model.num_parameters()),
        "vocab_size": len(tokenizer),
        "max_shard_size": max_shard_size,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "build_s": round(time.perf_counter() - started, 3),
        "pid": os.getpid(),
    }
    # Last file written: its presence is what marks the folder complete.
    (out_dir / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def _model_config(tokenizer):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=_IMAGE_SIZE,
        patch_size=_PATCH_SIZE,
        projection_dim=32,
    )
    text = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, like current LLMs
        vocab_size=len(tokenizer),
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        projector_hidden_act="gelu",
    )


def _image_processor():
    # transformers 5 names the PIL/numpy implementation ...Pil (the plain name wants
    # torchvision); 4.x's plain CLIPImageProcessor is that implementation.
    try:
        from transformers import CLIPImageProcessorPil as ImageProcessor
    except ImportError:
        from transformers import CLIPImageProcessor as ImageProcessor
    return ImageProcessor(
        size={"shortest_edge": _IMAGE_SIZE},
        crop_size={"height": _IMAGE_SIZE, "width": _IMAGE_SIZE},
    )

