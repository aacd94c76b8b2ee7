"""Inference stage: load a checkpoint, answer one image prompt and a mixed batch."""

from hyport_lib.inference.generate import (
    InferenceConfig,
    InferenceOutcome,
    load_model,
    output_hash,
    run_batch,
    run_inference,
    run_single,
)

__all__ = [
    "InferenceConfig",
    "InferenceOutcome",
    "load_model",
    "output_hash",
    "run_batch",
    "run_inference",
    "run_single",
]
