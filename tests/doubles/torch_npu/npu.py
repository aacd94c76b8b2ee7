"""Fake ``torch_npu.npu`` / ``torch.npu``: device bookkeeping without a device."""

import os

_current = 0
_peak = {}


def is_available():
    return device_count() > 0


def device_count():
    return int(os.environ.get("HYPORT_FAKE_NPU_COUNT", "8"))


def _check(index):
    index = _current if index is None else int(str(index).split(":")[-1])
    if not 0 <= index < device_count():
        raise RuntimeError(f"Invalid device id {index} (fake npu, {device_count()} cards)")
    return index


def set_device(index):
    global _current
    _current = _check(index)


def current_device():
    return _current


def synchronize(index=None):
    _check(index)


def is_bf16_supported():
    return os.environ.get("HYPORT_FAKE_NPU_BF16", "1") == "1"


def get_device_name(index=None):
    _check(index)
    return os.environ.get("HYPORT_FAKE_NPU_NAME", "Ascend910B3")


def memory_allocated(index=None):
    return 1024 * 1024 * (1 + _check(index))


def memory_reserved(index=None):
    return 4 * memory_allocated(index)


def max_memory_allocated(index=None):
    return _peak.get(_check(index), 2 * memory_allocated(index))


def reset_peak_memory_stats(index=None):
    _peak[_check(index)] = memory_allocated(index)

