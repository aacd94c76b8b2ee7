"""Attention at run time, for the workers (inference, training, reload); stage 02 measures it:
hyport's backends and the ``flash_attn`` shim (``flash_api``), the CPU emulation of
``npu_fusion_attention`` (``emulation``), the transformers hook (``hf_integration``)."""
