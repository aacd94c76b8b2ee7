"""Stage 05 — the weights: complete, finite, loadable, and the model that was trained.

Modules by concern: ``format`` (one safetensors header), ``layout`` (a checkpoint
folder: shards, index, config), ``names`` (on-disk names against the model's),
``findings`` (what can be wrong), ``scan`` (the streaming full scan), ``compare`` (against
a base or a checkpoint), ``runner`` / ``worker`` (fresh child processes) for ``reload``,
``parity`` (logits) and ``zero_consolidate`` (DeepSpeed's zero_to_fp32), ``zero`` (the
ZeRO files), ``defaults`` (which folders), ``verify`` / ``result`` (the whole check and
what it found), ``stage`` (the stage function and record) and ``show`` (rendering).
See docs/weights.md.
"""

from hyport_lib.weights.layout import inspect_checkpoint

__all__ = ["inspect_checkpoint"]
