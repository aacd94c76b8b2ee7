"""Attention at run time: the ``flash_attn`` drop-in, its mapping onto
``torch_npu.npu_fusion_attention`` (and hyport's CPU emulation of that documented
contract), and the transformers ``AttentionInterface`` hook.

Workers (inference, training, reload) import it; stage 02 measures it.
"""
