"""Device-neutral code (fixture): nothing here is a finding.

flash_attn was replaced by npu_fusion_attention; "cuda" and nccl are only named in prose.
"""
# from flash_attn import flash_attn_func; torch.cuda.synchronize(); x.cuda()  <- a comment
import torch

from hyport_lib.backend import get_backend

MESSAGE = "flash_attn is gone: torch.cuda calls go through the backend seam, nccl became hccl"


def run(x: torch.Tensor):
    backend = get_backend()
    y = x.to(backend.device(0))
    backend.synchronize()
    return y, backend.dist_backend, MESSAGE
