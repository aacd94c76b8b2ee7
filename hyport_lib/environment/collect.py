"""Collect the facts about this host and judge them: :func:`collect_environment`.

The facts come from :mod:`hyport_lib.environment.facts` and
:mod:`hyport_lib.devices.probe` (cards and their processes); the checks of
:mod:`hyport_lib.environment.checks` then judge them, which the usual ``env``
commands do not. Cheap on purpose: well under 3 s on CPU.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional

from hyport_lib.backend import CudaBackend, NpuBackend, import_torch_npu
from hyport_lib.devices import visible_devices
from hyport_lib.environment import checks as C
from hyport_lib.environment.compat import check_cann_compat, check_torch_npu_compat, normalise_cann
from hyport_lib.devices.probe import DeviceListing, probe_devices
from hyport_lib.environment.facts import (
    collect_build, collect_cann,
    collect_env_vars, collect_system, collect_versions,
)
from hyport_lib.devices.host_memory import check_host_memory
from hyport_lib.devices.records import Check, DeviceInfo, count_verdicts, worst_verdict
from hyport_lib.models.loading import torchvision_problem, wants_video_processor
from hyport_lib.utils.imports import is_flash_attn_available
from hyport_lib.utils.redact import scrub_text

#: Visible-devices variable of each accelerator kind, as the backend seam names them.
VISIBLE_DEVICES_VARS = {b.kind: b.visible_devices_var for b in (NpuBackend, CudaBackend)}


@dataclass
class EnvironmentReport:
    """Everything :func:`collect_environment` found, and its judgement.

    Attributes:
        system: OS, CPU, RAM, /dev/shm, Python.
        versions: package -> version (None when not installed).
        cann: CANN install info, set_env.sh found, driver version.
        devices: the cards (see :class:`DeviceInfo`).
        env_vars: relevant environment variables, secret-named ones dropped.
        checks: the verdicts, in display order.
        build: torch build facts (CUDA/HIP/CANN), install paths, accelerate config.
    """

    system: dict
    versions: dict
    cann: dict
    devices: list[DeviceInfo]
    env_vars: dict
    checks: list[Check]
    build: dict = field(default_factory=dict)
    device: str = "cpu"
    requested_device: str = "auto"
    num_cards: int = 0
    device_source: str = ""
    device_error: Optional[str] = None
    device_tool_output: Optional[str] = None  # the raw npu-smi / nvidia-smi output
    collected_at: str = ""
    elapsed_s: float = 0.0

    @property
    def verdict(self) -> str:
        """Worst verdict of the checks (FAIL > WARN > PASS; SKIP ignored)."""
        return worst_verdict(c.verdict for c in self.checks)

    def summary(self) -> dict[str, int]:
        """Number of checks per verdict: ``{"PASS": 9, "WARN": 1, "FAIL": 0, "SKIP": 3}``."""
        return count_verdicts(self.checks)

    def summary_line(self, skip: bool = True) -> str:
        counts = self.summary()
        keys = ("PASS", "WARN", "FAIL", "SKIP") if skip else ("PASS", "WARN", "FAIL")
        return " / ".join(f"{counts[k]} {k}" for k in keys)

    def check(self, name: str) -> Optional[Check]:
        """The first check called ``name``, or None."""
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["devices"] = [d.to_dict() for d in self.devices]
        data["verdict"] = self.verdict
        data["summary"] = self.summary()
        return data

    def to_text(self) -> str:
        """``- key: value`` lines, pasteable into a bug report (secrets already out)."""
        return format_report(self)


# --- the whole report ----------------------------------------------------------------------
def collect_environment(device: str = "auto", num_cards: Optional[int] = None, *,
                        ram_gb_per_card: Optional[float] = None,
                        shm_gb_per_card: Optional[float] = None,
                        environ: Optional[Mapping[str, str]] = None,
                        ascend_root: Optional[os.PathLike] = None,
                        check_ports: bool = True, model_path: Optional[str] = "tiny") -> EnvironmentReport:
    """Collect this host's facts and judge them.

    Args:
        device: ``auto``, ``npu``, ``cuda`` or ``cpu``. An explicit kind that is not
            usable here does not raise: the report FAILs its ``backend`` check and
            collects the rest on CPU (this is the tool that must explain why).
        num_cards: cards the next stages will use (None: all on accelerators, 2 on CPU).
        ram_gb_per_card / shm_gb_per_card: host RAM and /dev/shm needed per card
            (defaults in :mod:`hyport_lib.environment.checks`).
        environ: environment to judge (default ``os.environ``).
        ascend_root: Ascend install folder (default ``/usr/local/Ascend``).
        check_ports: bind-test the HCCL ports (tests turn it off).
        model_path: the model the next stages load (``tiny``, a folder): whether its
            processor needs torchvision for a video part is judged for it.
    """
    from hyport_lib.backend import get_backend

    from hyport_lib.utils.values import as_int

    if num_cards is not None and as_int("num_cards", num_cards) < 1:
        raise ValueError(f"num_cards={num_cards!r}: expected a positive number of cards, or None "
                         "for all of them")
    started = time.perf_counter()
    environ = dict(os.environ if environ is None else environ)
    requested = (device or "auto").lower().strip()
    backend_error = None
    try:
        backend = get_backend(requested, num_cards)
    except RuntimeError as exc:  # requested kind not usable here; ValueError (bad name) propagates
        backend_error = str(exc)
        backend = get_backend("cpu", num_cards)
    kind = backend.kind
    cards = _num_cards(backend)

    versions = collect_versions()
    torch_npu, torch_npu_error = import_torch_npu()
    if versions["torch_npu"] is None and torch_npu is not None:
        versions["torch_npu"] = getattr(torch_npu, "__version__", None)
    listing = probe_devices(backend)
    cann = collect_cann(ascend_root, environ)
    if not cann["driver_version"] and listing.driver_version:
        cann["driver_version"] = listing.driver_version
    build = collect_build(versions)
    if not cann["version"] and build.get("torch_cann"):
        cann["version"] = normalise_cann(build["torch_cann"])
    system = collect_system()

    wanted = int(num_cards) if num_cards else cards
    # An explicit kind that fell back to CPU keeps its variable judged strictly: an empty
    # CUDA_VISIBLE_DEVICES is then the explanation of the backend FAIL.
    judged_kind = requested.split(":")[0] if backend_error else kind
    checks = [
        C.check_backend(requested, kind, cards, backend_error),
        C.check_packages(versions, kind),
        C.check_torch_npu_import(kind, versions["torch_npu"], torch_npu_error, requested,
                                 cann_found=bool(cann.get("info_file") or cann.get("set_env")),
                                 torch_version=versions["torch"]),
        check_torch_npu_compat(versions["torch"], versions["torch_npu"]),
        C.check_cann_env(kind, cann, environ),
        check_cann_compat(versions["torch_npu"], cann["version"]),
        *_visible_device_checks(judged_kind, listing, environ),
        C.check_busy_cards(kind, listing, num_cards, *_visible_cards(kind, environ)),
        C.check_card_health(kind, listing),
    ]
    if check_ports:
        checks.append(C.check_hccl_ports(kind, wanted, environ))
    checks += [
        C.check_hccl_env(kind, environ),
        C.check_flash_attn(kind, is_flash_attn_available(), versions["flash_attn"]),
        C.check_video_processors(versions.get("transformers"), torchvision_problem(),
                                 *wants_video_processor(model_path)),
        C.check_bf16(backend),
        *check_host_memory(kind, wanted, system, ram_gb_per_card, shm_gb_per_card),
    ]
    return EnvironmentReport(
        system=system, versions=versions, cann=cann, devices=listing.devices,
        env_vars=collect_env_vars(environ), checks=checks, build=build, device=kind,
        requested_device=requested, num_cards=cards, device_source=listing.source,
        device_error=listing.error or listing.distrust,
        device_tool_output=scrub_text(listing.raw) if listing.raw else None,
        collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        elapsed_s=round(time.perf_counter() - started, 3))


def _visible_device_checks(kind: str, listing: DeviceListing,
                           environ: Mapping[str, str]) -> list[Check]:
    """One check per visible-devices variable: strict for ``kind``'s own, lenient for others."""
    own = VISIBLE_DEVICES_VARS.get(kind)
    names = [v for v in VISIBLE_DEVICES_VARS.values() if v in environ or v == own]
    if not names:
        return [Check("visible_devices", "SKIP", "no visible-devices variable set")]
    names.sort(key=lambda v: v != own)  # the variable that matters first
    host_cards = len(listing.devices) if listing.source in ("npu-smi", "nvidia-smi") else None
    return [visible_devices.check_visible_devices(environ.get(v), v, host_cards if v == own else None, kind)
            for v in names]


def _visible_cards(kind: str,
                   environ: Mapping[str, str]) -> tuple[Optional[list[int]], Optional[str]]:
    """Host card ids the backend's variable leaves visible (None: all), and ``VAR=value``."""
    var = VISIBLE_DEVICES_VARS.get(kind)
    if var is None or var not in environ:
        return None, None
    return visible_devices.visible_card_ids(environ[var], var), f"{var}={environ[var]}"


def _num_cards(backend) -> int:
    try:
        return int(backend.num_cards())
    except RuntimeError:
        return 0


# --- text ----------------------------------------------------------------------------------------
def format_report(report: EnvironmentReport) -> str:
    """The report as ``- key: value`` lines under a few headings."""
    s, c = report.system, report.cann
    lines = ["hyport environment report (paste into a bug report; "
             "variables whose names look secret are left out)", ""]

    def add(key, value):
        lines.append(f"- {key}: {'not found' if value is None else value}")

    add("verdict", f"{report.verdict} ({report.summary_line()})")
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
        add(key, c.get(key))
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


# --- small readers ---------------------------------------------------------------------------------
