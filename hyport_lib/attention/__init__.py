"""Stage 02, ``02_attention``: every attention implementation of this host against float64,
the model with eager against swapped attention, and the static scan of the model code.

The attention that workers use at run time (the flash-attn drop-in, the NPU mapping and
its CPU emulation, the transformers hook) is :mod:`hyport_lib.npu_attention`; the model
check, as every eager-vs-swap proof, is :mod:`hyport_lib.proof`.
"""
