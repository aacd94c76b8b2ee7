"""Test double for ``torch_npu`` (see tests/doubles/README.md).

Mirrors the public surface hyport uses: ``torch_npu.npu`` device functions,
``torch_npu.npu_fusion_attention`` (hyport's own CPU emulation of the documented
contract) and ``torch_npu.contrib.transfer_to_npu``.
"""

import torch

from . import npu  # noqa: F401

__version__ = "2.8.0.post1"
__hyport_double__ = True

# Real torch_npu registers the device module as torch.npu.
torch.npu = npu


def npu_fusion_attention(*args, **kwargs):
    from hyport_lib.npu_attention.emulation import npu_fusion_attention as emulated

    return emulated(*args, **kwargs)
