"""Stage 04, ``04_train``: smoke training, torchrun + DeepSpeed + the HF Trainer, watched and
checked: ``preflight`` checks and plans before anything is written, ``launch`` runs torchrun,
``worker`` and ``callbacks`` are the training processes, ``stage`` the contract.
"""
