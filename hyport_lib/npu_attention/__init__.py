"""Attention at run time: hyport's backends over the one flash-attn implementation
(``hyport_lib/port/generated/flash_attn_ascend.py``, the file ``hyport port`` writes),
the ``flash_attn`` shim for remote code, hyport's CPU emulation of the documented
``torch_npu.npu_fusion_attention`` contract, and the transformers ``AttentionInterface`` hook.

Workers (inference, training, reload) import it; stage 02 measures it.
"""
