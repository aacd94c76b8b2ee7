"""Real-size checkpoints that cost no disk: a Qwen2-shaped safetensors folder (0.5 B, 7 B or
72 B) with real headers, a real index and config, whose tensor data are holes in sparse
files. Everything that plans from headers sees a real checkpoint; a read of the data
would see zeros, so nothing here may load it.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

#: Qwen2.5's published shapes (config.json of each size).
QWEN2_SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "72b": dict(hidden_size=8192, intermediate_size=29568, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False),
}


def qwen2_config(size: str) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
            "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "torch_dtype": "bfloat16", "use_cache": True, **QWEN2_SHAPES[size]}


def qwen2_tensors(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor a Qwen2ForCausalLM checkpoint stores, in the order transformers saves them."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = h // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    tensors = [("model.embed_tokens.weight", (v, h))]
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        tensors += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                    (p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.q_proj.bias", (h,)),
                    (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.k_proj.bias", (kv,)),
                    (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.v_proj.bias", (kv,)),
                    (p + "self_attn.o_proj.weight", (h, h)),
                    (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                    (p + "mlp.down_proj.weight", (h, i))]
    tensors.append(("model.norm.weight", (h,)))
    if not config.get("tie_word_embeddings"):
        tensors.append(("lm_head.weight", (v, h)))
    return tensors


def parameter_count(config: dict) -> int:
    total = 0
    for _, shape in qwen2_tensors(config):
        count = 1
        for d in shape:
            count *= d
        total += count
    return total


def write_sparse_checkpoint(folder: Path, size: str = "7b", shards: int = 4, *, tokenizer: bool = False) -> Path:
    """A bf16 checkpoint of Qwen2.5-``size``'s shape in ``shards`` files whose data are holes
    (``truncate`` past the header): a 15 GB 7 B folder takes a few KiB of disk. ``tokenizer``:
    the tiny model's tokenizer copied in, for the plans that encode prompts or records (its
    ids fit any of these vocabularies)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = qwen2_config(size)
    tensors = qwen2_tensors(config)
    per_shard = -(-len(tensors) // shards)
    weight_map, total = {}, 0
    for index in range(shards):
        part = tensors[index * per_shard:(index + 1) * per_shard]
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for tensor, shape in part:
            count = 1
            for d in shape:
                count *= d
            header[tensor] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + 2 * count]}
            offset += 2 * count
            weight_map[tensor] = name
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes
        with open(folder / name, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.truncate(8 + len(raw) + offset)
        total += offset
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer:
        from hyport_lib.models.tiny import ensure_tiny_model

        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(ensure_tiny_model() / name, folder / name)
    return folder
