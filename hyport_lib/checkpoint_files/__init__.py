"""Checkpoint files read from their headers alone: the safetensors format, and the
findings a malformed file gives."""
