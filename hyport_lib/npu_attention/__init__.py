"""Attention at run time, for the workers (inference, training, reload); stage 02 measures it:
docs/attention_swap.md, docs/npu_fusion_attention.md."""
