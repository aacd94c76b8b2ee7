"""``hyport port``: rewrite a copy of CUDA / flash-attn model code for Ascend, and prove it."""
