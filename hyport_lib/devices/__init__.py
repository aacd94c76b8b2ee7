"""Device discovery below every stage: which cards exist (torch, ``npu-smi``,
``nvidia-smi``), the visible-devices variable, which cards a run uses, and whether the
host's memory holds that many ranks."""
