"""Stage 04, ``04_train``: smoke training, torchrun + DeepSpeed + the HF Trainer, watched and
checked (the contract: :mod:`.stage`; the data it reads: docs/datasets.md)."""
