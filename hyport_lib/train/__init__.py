"""Stage 04, ``04_train``: smoke training, torchrun + DeepSpeed + the HF Trainer, watched and
checked.

Modules by concern: ``config`` (the parameters), ``dataset`` / ``smoke_data`` /
``samples`` / ``packing`` (data), ``deepspeed_config``, ``preflight`` (checks before
anything starts), ``launch`` / ``agent`` (torchrun as a child process), ``worker`` and
``callbacks`` (inside the training processes), ``metrics`` / ``result`` (what a run left),
``checkpoints`` and ``ownership`` (complete checkpoints, resume, one run per folder),
``stage`` (the stage contract) and ``show`` (rendering).
"""
