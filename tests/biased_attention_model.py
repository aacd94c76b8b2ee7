"""A model whose attention hands the attention function a tensor hyport does not compute
with: a Llama whose attention adds an ALiBi-style ``position_bias`` to the scores, passed to
the registered attention function as a keyword argument (as transformers' newest families
pass relative position biases and per-token sinks). Its eager attention adds the bias; a
drop-in that ignored the keyword would compute a different model.

It is shipped as remote code (``auto_map``), the way such a model reaches a user, and it
does *not* declare ``_supports_sdpa = False``: only hyport's attention contract and the
proof before launch stand between it and a silently different training.

    write_biased_model(folder, tokenizer_from=zoo["llama"]) -> folder
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MODELING = '''
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama


class BiasedLlamaConfig(LlamaConfig):
    model_type = "biased_llama"


def eager_with_bias(module, query, key, value, attention_mask, scaling, dropout=0.0,
                    position_bias=None, **kwargs):
    key = modeling_llama.repeat_kv(key, module.num_key_value_groups)
    value = modeling_llama.repeat_kv(value, module.num_key_value_groups)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


class BiasedAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = True
        self.attention_dropout = 0.0
        heads, kv = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=False)
        self.num_heads = heads

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None,
                past_key_values=None, **kwargs):
        shape = hidden_states.shape[:-1]
        hidden = (*shape, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(hidden).transpose(1, 2)
        key = self.k_proj(hidden_states).view(hidden).transpose(1, 2)
        value = self.v_proj(hidden_states).view(hidden).transpose(1, 2)
        cos, sin = position_embeddings
        query, key = modeling_llama.apply_rotary_pos_emb(query, key, cos, sin)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)
        sq, sk = query.shape[2], key.shape[2]
        distance = (torch.arange(sk) - torch.arange(sq).unsqueeze(1) - (sk - sq)).clamp(max=0)
        # ALiBi slopes: a fixed, strong bias, so that dropping it shows in every logit. Made
        # here, not kept as a buffer: transformers 5 loads a model on the meta device, and a
        # non-persistent buffer then comes back uninitialised.
        slopes = 2.0 ** (-torch.arange(1, self.num_heads + 1, dtype=torch.float32))
        bias = (slopes.view(-1, 1, 1) * distance).unsqueeze(0).to(query.dtype)
        name = self.config._attn_implementation
        attend = eager_with_bias if name == "eager" else ALL_ATTENTION_FUNCTIONS[name]
        out, weights = attend(self, query, key, value, attention_mask, dropout=0.0,
                              scaling=self.scaling, position_bias=bias, **kwargs)
        return self.o_proj(out.reshape(*shape, -1).contiguous()), weights


class BiasedLlamaForCausalLM(LlamaForCausalLM):
    config_class = BiasedLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        for index, layer in enumerate(self.model.layers):
            layer.self_attn = BiasedAttention(config, index)
        self.post_init()
'''


def write_biased_model(folder, tokenizer_from) -> Path:
    """The biased model (random weights, seed 0) with the tokenizer files of
    ``tokenizer_from`` (a zoo Llama folder), saved as a remote-code checkpoint."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(tokenizer_from)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)
    (folder / "modeling_biased.py").write_text(MODELING, encoding="utf-8")
    base = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config = {k: base[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                   "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                                   "bos_token_id", "eos_token_id", "pad_token_id") if k in base}
    config.update(model_type="biased_llama", architectures=["BiasedLlamaForCausalLM"],
                  auto_map={"AutoConfig": "modeling_biased.BiasedLlamaConfig",
                            "AutoModelForCausalLM": "modeling_biased.BiasedLlamaForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    torch.manual_seed(0)
    loaded = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_config(loaded, trust_remote_code=True)
    model.save_pretrained(folder)
    return folder
