"""Stage 01 — environment check: collect the host's facts, then judge them.

Public API::

    from hyport_lib.environment import collect_environment
    report = collect_environment(device="auto", num_cards=None)
    report.verdict, report.summary(), report.to_text()

See ``notebooks/01_environment.ipynb`` and ``hyport env``.
"""

from hyport_lib.environment.checks import check_visible_devices, parse_visible_devices
from hyport_lib.environment.collect import (EnvironmentReport, collect_cann, collect_env_vars,
                                            collect_environment, collect_system, collect_versions,
                                            format_report)
from hyport_lib.environment.compat import (TORCH_NPU_COMPAT, check_cann_compat,
                                           check_torch_npu_compat)
from hyport_lib.environment.devices import DeviceListing, busy_cards, list_devices, probe_devices
from hyport_lib.environment.frames import (checks_frame, devices_frame, env_vars_frame,
                                           versions_frame)
from hyport_lib.environment.npu_smi import parse_npu_smi_info, parse_proc_mem
from hyport_lib.environment.stage import environment_summary, record_environment
from hyport_lib.environment.records import Check, DeviceInfo, DeviceProcess

__all__ = [
    "Check", "DeviceInfo", "DeviceListing", "DeviceProcess", "EnvironmentReport", "TORCH_NPU_COMPAT",
    "busy_cards", "check_cann_compat", "check_torch_npu_compat", "check_visible_devices",
    "checks_frame", "collect_cann", "collect_env_vars", "collect_environment", "collect_system",
    "collect_versions", "devices_frame", "env_vars_frame", "environment_summary", "format_report",
    "list_devices", "record_environment",
    "parse_npu_smi_info", "parse_proc_mem", "parse_visible_devices", "probe_devices",
    "versions_frame",
]
