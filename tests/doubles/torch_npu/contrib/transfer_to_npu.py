"""Fake of torch_npu's transfer_to_npu: rewrites torch.cuda.is_available to the NPU's.

The real module patches many torch.cuda functions; the one that fools device
detection is ``is_available`` (and ``device_count``), so that is what we reproduce.
"""

import torch

from torch_npu import npu as _npu


def is_available():
    return _npu.is_available()


def device_count():
    return _npu.device_count()


is_available.__module__ = "torch_npu.contrib.transfer_to_npu"
device_count.__module__ = "torch_npu.contrib.transfer_to_npu"
torch.cuda.is_available = is_available
torch.cuda.device_count = device_count
