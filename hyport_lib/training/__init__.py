"""Stage 04 — smoke training: torchrun + DeepSpeed + the HF Trainer, watched and checked.

Modules by concern: ``config`` (the parameters), ``dataset`` / ``smoke_data`` /
``samples`` / ``packing`` (data), ``deepspeed_config``, ``preflight`` (checks before
anything starts), ``launch`` / ``agent`` (torchrun as a child process), ``worker`` and
``callbacks`` (inside the training processes), ``metrics`` / ``result`` (what a run left),
``checkpoints`` (complete ones, resume), ``stage`` (the stage function and record) and
``show`` (rendering).
"""

from hyport_lib.training.config import TrainConfig

__all__ = ["TrainConfig"]
