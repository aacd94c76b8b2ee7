"""An LFM2 (a short convolution, then attention) whose convolution leaks only a little into
the next packed sample: its weights scaled until a sample in a packed row differs from itself
run alone by about 1e-4, a tenth of the swap proof's logits tolerance. Saved with the zoo's
Llama tokenizer, as a checkpoint folder a user would bring.

    write_leaky_lfm2(folder, tokenizer_from=zoo["llama"]) -> the model (eval)
    packed_vs_alone(model, first_ids, second_ids) -> max |Δ logits| of the second sample
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

#: The scale of the convolution's weights: about 1e-4 packed against alone (CPU, float32).
CONV_SCALE = 0.2


def write_leaky_lfm2(folder: Path, tokenizer_from: Path):
    from transformers import Lfm2Config, Lfm2ForCausalLM

    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(tokenizer_from) / name, Path(folder) / name)
    config = Lfm2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, layer_types=["conv", "full_attention"],
                        bos_token_id=0, eos_token_id=1, pad_token_id=2)
    torch.manual_seed(0)
    model = Lfm2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("conv.conv.weight"):
                parameter.mul_(CONV_SCALE)
    model.save_pretrained(folder)
    return model


def packed_vs_alone(model, first: list[int], second: list[int]) -> float:
    ids = torch.tensor([first + second])
    positions = torch.tensor([list(range(len(first))) + list(range(len(second)))])
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits[0, len(first):]
        alone = model(input_ids=torch.tensor([second]), use_cache=False).logits[0]
    return float((packed - alone).abs().max())
