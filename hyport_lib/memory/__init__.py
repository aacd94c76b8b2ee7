"""One memory model below every stage (docs/memory.md): host RAM and card memory per rank,
from a checkpoint's headers and config, consulted before anything loads."""
