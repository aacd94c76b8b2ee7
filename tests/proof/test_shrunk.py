"""A model's own config shrunk to what an attention proof needs (proof/shrunk.py): every
attention detail kept, layers, MLPs, experts and the vocabulary cut."""

from __future__ import annotations

import torch

from hyport_lib.proof.shrunk import compact_vocabulary, shrunk_config


def test_the_shrunk_config_keeps_one_layer_of_every_kind():
    from transformers import Gemma3TextConfig, LlamaConfig

    gemma = Gemma3TextConfig(num_hidden_layers=12, sliding_window_pattern=6)
    small, said = shrunk_config(gemma)
    assert small.num_hidden_layers == 6 and said == "6 of 12 decoder layers"
    assert set(small.layer_types) == {"sliding_attention", "full_attention"}
    assert gemma.num_hidden_layers == 12  # the caller's config is untouched
    llama, said = shrunk_config(LlamaConfig(num_hidden_layers=32))
    assert llama.num_hidden_layers == 2 and said == "2 of 32 decoder layers"
    assert shrunk_config(LlamaConfig(num_hidden_layers=2))[1] == "all 2 decoder layers"


def test_a_cross_attention_model_keeps_its_first_cross_attention_layer():
    from transformers import MllamaTextConfig

    text = MllamaTextConfig(num_hidden_layers=8, cross_attention_layers=[3, 7])
    small, said = shrunk_config(text)
    assert small.num_hidden_layers == 4 and small.cross_attention_layers == [3]


def test_per_layer_lists_and_shared_kv_layers_are_cut_with_the_layers():
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=6)
    config.activation_sparsity_pattern = [0.95, 0.95, 0, 0, 0, 0]
    config.num_kv_shared_layers = 3
    small, _ = shrunk_config(config)
    assert small.num_hidden_layers == 2 and small.activation_sparsity_pattern == [0.95, 0.95]
    assert small.num_kv_shared_layers == 0


def test_a_slim_config_keeps_attention_and_cuts_mlps_and_experts():
    from transformers import DeepseekV3Config

    config = DeepseekV3Config(num_hidden_layers=61, n_routed_experts=256, num_experts_per_tok=8,
                              n_group=8, topk_group=4)
    small, said = shrunk_config(config, slim=True)
    assert said == "2 of 61 decoder layers, MLPs and experts slimmed"
    assert small.n_routed_experts == 8 and small.n_group == 1 and small.topk_group == 1
    assert small.intermediate_size == 128 and small.moe_intermediate_size == 128
    for kept in ("hidden_size", "num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim",
                 "v_head_dim", "kv_lora_rank", "q_lora_rank", "vocab_size"):
        assert getattr(small, kept) == getattr(config, kept), kept


def test_the_compact_vocabulary_keeps_the_batchs_tokens_and_the_configs_special_ids():
    from transformers import LlamaConfig

    config = LlamaConfig(vocab_size=151936, bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=None)
    ids = torch.tensor([[5, 900, 151645, 5]])
    labels = torch.tensor([[-100, 900, 151645, -100]])
    small, remap, order = compact_vocabulary(config, [ids, labels])
    assert order == [5, 900, 151643, 151645]
    assert small.vocab_size == 4 and config.vocab_size == 151936
    assert remap(ids).tolist() == [[0, 1, 3, 0]] and remap(labels).tolist() == [[-100, 1, 3, -100]]
    assert small.bos_token_id == 2 and small.eos_token_id == [3, 2] and small.pad_token_id is None
