"""The report as pandas DataFrames, for the notebook and the HTML report."""

from __future__ import annotations

from hyport_lib.environment.collect import EnvironmentReport, container_facts
from hyport_lib.utils.typed_records import to_mapping

#: Variables worth showing even when unset, with their default (docs/ascend_field_notes.md).
NOTABLE_VARIABLES = {
    "ASCEND_RT_VISIBLE_DEVICES": "all cards; comma-separated, no spaces",
    "HCCL_CONNECT_TIMEOUT": "120 s (range 120-7200)",
    "HCCL_EXEC_TIMEOUT": "1836 s on CANN 8.x",
    "HCCL_IF_BASE_PORT": "60000",
    "HCCL_SOCKET_IFNAME": "auto",
    "ASCEND_LAUNCH_BLOCKING": "0 (1 = synchronous, slow)",
    "TASK_QUEUE_ENABLE": "1",
    "CPU_AFFINITY_CONF": "unset",
    "PYTORCH_NPU_ALLOC_CONF": "unset (expandable_segments:True against fragmentation)",
    "ASCEND_GLOBAL_LOG_LEVEL": "3 (error)",
    "ASCEND_SLOG_PRINT_TO_STDOUT": "0",
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "1 (torch imports torch_npu itself)",
    "NPU_FA2_SPARSE_MODE": "unset",
}


def checks_frame(report: EnvironmentReport):
    """One row per check: name, verdict, reason."""
    import pandas as pd

    return pd.DataFrame([to_mapping(c) for c in report.checks], columns=["name", "verdict", "reason"])


def devices_frame(report: EnvironmentReport):
    """One row per card, processes as text."""
    import pandas as pd

    rows = []
    for d in report.devices:
        rows.append({
            "card": d.index, "npu": d.npu_id, "chip": d.chip_id, "name": d.name,
            "health": d.health,
            "memory used (MB)": d.used_mb, "memory total (MB)": d.total_mb,
            "memory kind": "HBM" if d.hbm_total_mb is not None else ("device" if d.total_mb else None),
            "processes": "; ".join(p.describe() for p in d.processes),
            "status": "BUSY" if d.processes else ("FREE" if report.device != "cpu" else "-"),
        })
    return pd.DataFrame(rows, columns=["card", "npu", "chip", "name", "health", "memory used (MB)",
                                       "memory total (MB)", "memory kind", "processes", "status"])


def versions_frame(report: EnvironmentReport):
    import pandas as pd

    rows = [{"package": k, "version": v if v is not None else "not installed"}
            for k, v in report.versions.items()]
    for key in ("torch_cuda", "torch_hip", "torch_cann"):
        if report.build.get(key):
            rows.append({"package": key.replace("_", " "), "version": str(report.build[key])})
    rows.append({"package": "CANN", "version": report.cann.version or "not found"})
    rows.append({"package": "driver", "version": report.cann.driver_version or "not found"})
    return pd.DataFrame(rows, columns=["package", "version"])


def env_vars_frame(report: EnvironmentReport):
    """Set variables plus the notable ones with their defaults."""
    import pandas as pd

    rows = [{"variable": k, "value": v, "note": NOTABLE_VARIABLES.get(k, "")}
            for k, v in report.env_vars.items()]
    rows += [{"variable": k, "value": "(unset)", "note": f"default: {note}"}
             for k, note in NOTABLE_VARIABLES.items() if k not in report.env_vars]
    return pd.DataFrame(rows, columns=["variable", "value", "note"])


def system_frame(report: EnvironmentReport):
    import pandas as pd

    return pd.DataFrame([{"fact": k, "value": "" if v is None else str(v)}
                         for k, v in report.system.items()], columns=["fact", "value"])


def container_frame(report: EnvironmentReport):
    """The container and driver facts: the root read, container evidence, card nodes,
    /dev/shm, driver / firmware / CANN versions, and the ``docker run`` flags to add."""
    import pandas as pd

    return pd.DataFrame([{"fact": k, "value": v} for k, v in container_facts(report.container)],
                        columns=["fact", "value"])
