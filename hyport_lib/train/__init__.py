"""Stage 04, ``04_train``: smoke training, torchrun + DeepSpeed + the HF Trainer, watched and
checked.

Modules by concern: ``params`` (the parameters, checked), ``dataset`` / ``smoke_data`` /
``samples`` / ``packing`` (data), ``deepspeed_config``, ``preflight`` (the checks and the
plan, before anything is written), ``launch`` / ``agent`` (the output folder filled under
its lock, torchrun as a child process), ``worker`` and ``callbacks`` (inside the training
processes), ``metrics`` / ``result`` (what a run left), ``checkpoints`` and ``ownership``
(complete checkpoints, resume, one run per folder), ``rendezvous`` (where the ranks
meet), ``stage`` (the stage contract) and ``show`` (rendering).
"""
