"""Stage 05, ``05_weights``: the saved weights are complete, finite, loadable, and the model
that was trained.

Modules by concern: ``params`` (the stage's parameters), ``layout`` (a checkpoint folder:
shards, index, config), ``names`` (on-disk names against the model's), ``scan`` (the
streaming full scan), ``compare`` (against a base or a checkpoint), ``runner`` / ``worker``
(fresh child processes) for ``reload``, ``parity`` (logits) and ``zero_consolidate``
(DeepSpeed's zero_to_fp32), ``zero`` (the ZeRO files), ``defaults`` (which folders),
``verify`` / ``result`` (the whole check and what it found), ``stage`` (the stage
contract) and ``show`` (rendering). See docs/weights.md.
"""
