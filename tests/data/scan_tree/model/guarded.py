"""Optional fast paths, each guarded (fixture)."""
import torch

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

try:
    import xformers.ops as xops
except (ImportError, OSError):
    xops = None

from transformers.utils import is_flash_attn_2_available


def attend(q, k, v):
    if is_flash_attn_2_available() and flash_attn_func is not None:
        return flash_attn_func(q, k, v, causal=True)
    if xops is not None:
        return xops.memory_efficient_attention(q, k, v)
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
