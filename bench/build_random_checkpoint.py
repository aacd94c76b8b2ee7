"""Build a random bfloat16 checkpoint of a real model's shape, offline (a bench input, not a test).

The default is Qwen2.5-7B's shape (hidden 3584, 28 layers, intermediate 18944, 28 heads /
4 KV heads, vocabulary 152064, untied embeddings): 7.6 B parameters, 15.2 GB in 4 shards,
with ``model.safetensors.index.json`` and a ``config.json`` written by transformers'
``Qwen2Config``. The tensors are written as they are generated, 32 MiB at a time, so memory
stays flat whatever the size. The values are random bits with the exponent's top bit cleared
(finite, |x| < 2), never zeros, which some filesystems compress or deduplicate. Each file is
``fsync``-ed, so ``posix_fadvise(DONTNEED)`` can drop it from the page cache for cold reads.

``--layers`` builds a smaller one of the same tensor sizes; ``--max-gb`` takes the most
layers that fit in that many GB (the free disk space, with a margin, caps it too).

    .venv/bin/python bench/build_random_checkpoint.py FOLDER [--layers 4] [--max-gb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np

BLOCK_ELEMENTS = 16 << 20  # 32 MiB of bf16 per write
#: Clears the exponent's top bit: every value finite and below 2 in magnitude.
FINITE_MASK = np.uint16(0xBFFF)


def tensor_shapes(hidden: int, layers: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                  tied: bool) -> list[tuple[str, tuple[int, ...]]]:
    """Qwen2's tensors in the order transformers saves them (embeddings, layers, norm, head)."""
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "self_attn.q_proj.weight", (hidden, hidden)), (p + "self_attn.q_proj.bias", (hidden,)),
            (p + "self_attn.k_proj.weight", (kv, hidden)), (p + "self_attn.k_proj.bias", (kv,)),
            (p + "self_attn.v_proj.weight", (kv, hidden)), (p + "self_attn.v_proj.bias", (kv,)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (intermediate, hidden)),
            (p + "mlp.up_proj.weight", (intermediate, hidden)),
            (p + "mlp.down_proj.weight", (hidden, intermediate)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    shapes.append(("model.norm.weight", (hidden,)))
    if not tied:
        shapes.append(("lm_head.weight", (vocab, hidden)))
    return shapes


def split_shards(shapes, shards: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Consecutive groups of about equal bytes (a tensor is never split)."""
    sizes = [2 * int(np.prod(s)) for _, s in shapes]
    target = sum(sizes) / shards
    groups, done = [[]], 0
    for item, size in zip(shapes, sizes):
        if groups[-1] and done + size / 2 > target * len(groups) and len(groups) < shards:
            groups.append([])
        groups[-1].append(item)
        done += size
    return groups


def write_shard(path: Path, tensors, rng: np.random.Generator) -> int:
    """One safetensors file, its data in name order (as safetensors' own writer lays it out)."""
    tensors = sorted(tensors)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for _, shape in tensors:
            left = int(np.prod(shape))
            while left:
                n = min(left, BLOCK_ELEMENTS)
                block = rng.integers(0, 1 << 16, n, dtype=np.uint16)
                block &= FINITE_MASK
                fh.write(memoryview(block))
                left -= n
        fh.flush()
        os.fsync(fh.fileno())  # clean pages: DONTNEED can then drop them for a cold read
    return offset


def write_config(folder: Path, args, layers: int) -> None:
    from transformers import Qwen2Config

    Qwen2Config(hidden_size=args.hidden, num_hidden_layers=layers, intermediate_size=args.intermediate,
                num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                tie_word_embeddings=args.tied, torch_dtype="bfloat16", max_position_embeddings=32768,
                rope_theta=1000000.0, rms_norm_eps=1e-6,
                architectures=["Qwen2ForCausalLM"]).to_json_file(folder / "config.json")


#: What a tokenizer is saved as (any of them may be absent).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "generation_config.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write it (must not exist)")
    parser.add_argument("--hidden", type=int, default=3584)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--intermediate", type=int, default=18944)
    parser.add_argument("--heads", type=int, default=28)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=152064)
    parser.add_argument("--tied", action="store_true", help="tie the head to the embeddings (no lm_head)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--max-gb", type=float, default=None, help="the most layers whose checkpoint fits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer-from", type=Path, default=None,
                        help="a model folder whose tokenizer files are copied in (the stages that encode prompts "
                             "need one; e.g. SmolLM2's, whose ids fit this vocabulary)")
    args = parser.parse_args()
    if args.folder.exists():
        parser.error(f"{args.folder} exists: give a new folder")
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")

    def size_gb(layers: int) -> float:
        shapes = tensor_shapes(args.hidden, layers, args.intermediate, args.heads, args.kv_heads, args.vocab,
                               args.tied)
        return sum(2 * int(np.prod(s)) for _, s in shapes) / 1e9

    parent = args.folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    room_gb = shutil.disk_usage(parent).free / 1e9 - 5.0  # 5 GB left for everyone else
    limit = min(x for x in (args.max_gb, room_gb) if x is not None)
    layers = args.layers
    while layers > 1 and size_gb(layers) > limit:
        layers -= 1
    if size_gb(layers) > limit:
        print(f"error: even 1 layer ({size_gb(1):.1f} GB) exceeds {limit:.1f} GB "
              f"(--max-gb, or the free space under {parent} less 5 GB)", file=sys.stderr)
        return 2
    if layers != args.layers:
        print(f"note: {args.layers} layers would take {size_gb(args.layers):.1f} GB, over {limit:.1f} GB; "
              f"building {layers} layers ({size_gb(layers):.1f} GB)")

    shapes = tensor_shapes(args.hidden, layers, args.intermediate, args.heads, args.kv_heads, args.vocab,
                           args.tied)
    groups = split_shards(shapes, min(args.shards, len(shapes)))
    args.folder.mkdir()
    rng = np.random.default_rng(args.seed)
    weight_map, total, started = {}, 0, time.perf_counter()
    for i, group in enumerate(groups, 1):
        name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        total += write_shard(args.folder / name, group, rng)
        weight_map.update({key: name for key, _ in group})
        print(f"  {name}: {len(group)} tensors, {total / 1e9:.2f} GB so far "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (args.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    write_config(args.folder, args, layers)
    if args.tokenizer_from is not None:
        for name in TOKENIZER_FILES:
            if (args.tokenizer_from / name).is_file():
                shutil.copyfile(args.tokenizer_from / name, args.folder / name)
    params = total // 2
    print(f"wrote {args.folder}: {params / 1e9:.3f} B parameters, {total / 1e9:.2f} GB of bf16 in "
          f"{len(groups)} shard(s), {layers} layers, in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
