"""Models hyport can run without a download: the embedded tiny checkpoint."""

from hyport_lib.models.tiny import (
    TINY_MODEL_NAME,
    TINY_MODEL_VERSION,
    ensure_tiny_model,
    resolve_model_path,
    sample_image,
)

__all__ = [
    "TINY_MODEL_NAME",
    "TINY_MODEL_VERSION",
    "ensure_tiny_model",
    "resolve_model_path",
    "sample_image",
]
