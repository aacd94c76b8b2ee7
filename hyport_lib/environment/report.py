"""The report of stage 01 (:class:`EnvironmentReport`) and the report as text
(:func:`format_report`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hyport_lib.devices.probe import DeviceInfo
from hyport_lib.environment.container import ContainerFindings
from hyport_lib.environment.facts import CannFacts
from hyport_lib.results import VERDICTS, Check, Provenance
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.typed_records import fields_of


@dataclass
class EnvironmentReport:
    """Everything stage 01 found about this host, and its checks in display order."""

    system: dict  # OS, CPU, RAM, /dev/shm, Python
    versions: dict  # package -> version (None: not installed)
    cann: CannFacts
    devices: list[DeviceInfo]
    env_vars: dict  # the relevant variables, secret-named ones dropped
    checks: list[Check]
    build: dict = field(default_factory=dict)  # torch build, install paths, accelerate config
    container: Optional[ContainerFindings] = None
    device: str = ""
    requested_device: str = "auto"
    num_cards: int = 0
    device_source: str = ""
    device_error: Optional[str] = None
    device_tool_output: Optional[str] = None  # the raw npu-smi / nvidia-smi output
    collected_at: str = ""
    elapsed_s: float = 0.0

    @property
    def provenance(self) -> Provenance:
        return Provenance(device=self.device)

    def summary(self) -> dict[str, int]:
        """Number of checks per verdict: ``{"PASS": 9, "WARN": 1, "FAIL": 0, "SKIP": 3}``."""
        return {v: sum(c.verdict == v for c in self.checks) for v in VERDICTS}

    def summary_line(self, skip: bool = True) -> str:
        counts = self.summary()
        return " / ".join(f"{counts[k]} {k}" for k in (VERDICTS if skip else VERDICTS[:3]))

    def check(self, name: str) -> Optional[Check]:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        return {**fields_of(self), "summary": self.summary()}


def format_report(report: EnvironmentReport, verdict: str) -> str:
    """``- key: value`` lines under a few headings, pasteable into a bug report."""
    s, c = report.system, report.cann
    lines = ["hyport environment report (paste into a bug report; "
             "variables whose names look secret are left out)", ""]

    def add(key, value):
        lines.append(f"- {key}: {'not found' if value is None else value}")

    add("verdict", f"{verdict} ({report.summary_line()})")
    add("backend", f"{report.device} ({report.num_cards} cards; requested {report.requested_device})")
    for key in ("os", "kernel", "arch", "libc", "cpu_model", "cpu_count", "cpu_affinity",
                "numa_nodes", "ram_total_gb", "ram_available_gb", "shm_total_gb", "shm_free_gb",
                "python", "python_executable", "in_container"):
        add(key, s.get(key))
    lines += ["", "Versions"]
    for key, value in report.versions.items():
        add(key, value)
    for key in ("torch_cuda", "torch_hip", "torch_cann", "torch_path", "deepspeed_path"):
        if key in report.build:
            add(key, report.build[key])
    lines += ["", "CANN"]
    for key in ("version", "info_file", "set_env", "nnal_set_env", "home_path", "driver_version"):
        add(key, getattr(c, key))
    lines += ["", "Container and driver"] + [f"- {k}: {v}" for k, v in container_facts(report.container)]
    lines += ["", f"Devices (source: {report.device_source or '?'})"]
    if report.device_error:
        add("note", report.device_error)
    for d in report.devices:
        add(f"card {d.index}", describe_device(d))
    lines += ["", "Environment variables"]
    if not report.env_vars:
        add("variables", "none of the relevant ones is set")
    for key, value in report.env_vars.items():
        add(key, value)
    lines += ["", "Checks"]
    for check in report.checks:
        lines.append(f"- [{check.verdict}] {check.name}: {check.reason}")
    if report.device_tool_output and report.device_error:
        # The listing could not be trusted or read: its raw output belongs in the report.
        lines += ["", f"{report.device_source} output, as printed", report.device_tool_output.rstrip()]
    return scrub_text("\n".join(lines)) + "\n"


def container_facts(container: Optional[ContainerFindings]) -> list[tuple[str, str]]:
    """The report's ``container`` section as (fact, value) rows."""
    if container is None:
        return [("container", "not collected")]
    versions = container.versions

    def shown(value) -> str:
        return "not found" if value in (None, "", []) else str(value)

    rows = [("root read", shown(container.root)),
            ("in container", f"yes ({container.evidence})" if container.in_container else "no")]
    if container.judged:
        cards = ", ".join(str(c) for c in container.cards)
        rows.append(("card nodes needed", f"{cards or 'none'} (from {container.cards_from})"))
        rows.append(("/dev/shm (GB)", shown(container.shm_total_gb)))
    for key, label in (("driver", "driver version"), ("driver_package", "driver package"),
                       ("driver_inner", "driver inner version"),
                       ("driver_firmware_range", "driver compatible_version_fw"),
                       ("firmware", "firmware version"), ("firmware_package", "firmware package"),
                       ("firmware_driver_range", "firmware compatible_version_drv"),
                       ("cann", "CANN (under the root)")):
        rows.append((label, shown(getattr(versions, key))))
    for error in [*versions.errors, *container.refused]:
        rows.append(("unreadable", error))
    if container.flags:
        rows.append(("docker run flags to add", " ".join(container.flags)))
    return rows


def describe_device(d: DeviceInfo) -> str:
    parts = [d.name]
    if d.npu_id is not None:
        parts.append(f"npu {d.npu_id} chip {d.chip_id}" if d.chip_id is not None else f"gpu {d.npu_id}")
    if d.health:
        parts.append(f"health {d.health}")
    if d.hbm_total_mb is not None:
        parts.append(f"HBM {d.hbm_used_mb} / {d.hbm_total_mb} MB")
    elif d.memory_total_mb:
        parts.append(f"memory {d.memory_used_mb} / {d.memory_total_mb} MB")
    if d.processes:
        parts.append("processes: " + ", ".join(p.describe() for p in d.processes))
    return ", ".join(str(p) for p in parts)

