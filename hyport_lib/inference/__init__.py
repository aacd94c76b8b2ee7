"""Inference stage: load a checkpoint, answer one image prompt and a mixed batch.

``generate`` holds the single-process library; ``grid`` runs it once per card in fresh
worker processes (``worker``); ``show`` renders the results.
"""

from hyport_lib.inference.generate import *  # noqa: F401,F403  (its __all__ is the API)
from hyport_lib.inference.generate import __all__  # noqa: F401
