"""Stage 02, ``02_attention`` (:mod:`.stage`). What workers run is :mod:`hyport_lib.npu_attention`;
every eager-vs-swap proof, the model check among them, is :mod:`hyport_lib.proof`."""
