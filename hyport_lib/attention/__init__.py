"""Stage 02, ``02_attention``: every attention implementation of this host against float64,
the model with eager against swapped attention, and the static scan and port of the model
code. What workers run is :mod:`hyport_lib.npu_attention`; every eager-vs-swap proof, the
model check among them, is :mod:`hyport_lib.proof`."""
