"""Availability probes by name (fixture)."""
import importlib
import importlib.util

HAS_FA = importlib.util.find_spec("flash_attn") is not None


def load_xformers():
    return importlib.import_module("xformers.ops")


def cuda_count():
    import torch
    return getattr(torch, "cuda").device_count()


def pick(device):
    if device == "cuda":
        return "gloo"
    return "cpu:gloo,cuda:nccl"
