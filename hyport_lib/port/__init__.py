"""``hyport port``: rewrite a copy of CUDA / flash-attn model code for Ascend, and prove it
in a child process (the proof itself: :mod:`hyport_lib.proof.port`)."""
