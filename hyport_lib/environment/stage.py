"""Stage 01: the environment check, for the notebook and ``hyport env``. Cheap on purpose:
well under 3 s on CPU."""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.backend import Backend, get_backend, import_torch_npu
from hyport_lib.devices.host_memory import DEFAULT_SHM_GB_PER_CARD, check_host_memory
from hyport_lib.devices.probe import DeviceInfo, probe_devices
from hyport_lib.environment import checks as C
from hyport_lib.environment.compat import check_cann_compat, check_driver_cann, check_torch_npu_compat
from hyport_lib.environment.container import ContainerFindings, ascend_signs, check_container, listed_cards
from hyport_lib.devices.ascend_versions import CannFacts, collect_cann, normalise_cann, read_driver_versions
from hyport_lib.environment.facts import collect_build, collect_env_vars, collect_system
from hyport_lib.environment.memory import MemoryFacts, check_card_memory, host_need_reason, memory_facts
from hyport_lib.environment.multinode import NODE_FIELDS, NodeFacts, collect_node_facts, node_rows
from hyport_lib.environment.params import Params
from hyport_lib.utils.file_tree import is_machine_root
from hyport_lib.models.loading import torchvision_problem, wants_video_processor
from hyport_lib.results import VERDICTS, Check, Provenance, StageSummary, worst_verdict
from hyport_lib.utils.imports import collect_versions, is_flash_attn_available
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.typed_records import fields_of, to_mapping
from hyport_lib.utils.wording import counted

STAGE = "01_environment"


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
    memory: Optional[MemoryFacts] = None  # each card's memory, the host's RAM, model_path's need per rank
    nodes: Optional[NodeFacts] = None  # this host's place in a job of several hosts, its interfaces
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


RESULT = EnvironmentReport


@dataclass
class Plan:
    """The backend judged is the kind asked for, or the CPU's when that kind is not usable
    here (this stage must explain why, so it runs anyway): ``backend_error`` says why."""

    params: Params
    backend: Backend
    backend_error: Optional[str] = None


@dataclass(frozen=True)
class Step:
    """A progress update of :func:`run`: ``name`` just done."""

    name: str
    done: int
    total: int


def plan(params: Params) -> Plan:
    try:
        return Plan(params, get_backend(params.device, params.num_cards))
    except RuntimeError as exc:
        return Plan(params, get_backend("cpu", params.num_cards), str(exc))


def run(plan: Plan, *, on_progress: Optional[Callable[[Step], None]] = None) -> EnvironmentReport:
    """The variables and the cards are read now, not when planned: a re-probe (the
    notebook's button) sees a variable set or a card freed since."""
    params, backend = plan.params, plan.backend
    steps = ("versions", "devices", "CANN and build", "system", "container and driver", "nodes", "checks")

    def step(name: str) -> None:
        if on_progress is not None:
            on_progress(Step(name, steps.index(name) + 1, len(steps)))

    started = time.perf_counter()
    environ = dict(os.environ)
    kind = backend.kind
    try:
        cards = int(backend.num_cards())
    except RuntimeError:  # the device cannot be asked: the backend check says why
        cards = 0

    versions = collect_versions()
    torch_npu, torch_npu_error = import_torch_npu()
    if versions["torch_npu"] is None and torch_npu is not None:
        versions["torch_npu"] = getattr(torch_npu, "__version__", None)
    step("versions")
    listing = probe_devices(backend)
    step("devices")
    cann = collect_cann(environ=environ)
    if not cann.driver_version and listing.driver_version:
        cann.driver_version = listing.driver_version
    build = collect_build(versions)
    if not cann.version and build.get("torch_cann"):
        cann.version = normalise_cann(build["torch_cann"])
    step("CANN and build")
    system = collect_system()
    step("system")
    findings, driver_check = container_and_driver(plan, environ, listing, cann, system)
    step("container and driver")
    # hccn_tool asks a card by its physical id; the CPU backend's workers are no cards.
    roce_cards = [d.phy_id if d.phy_id is not None else d.index for d in listing.devices] if kind == "npu" else []
    nodes, node_checks = collect_node_facts(environ, {k: getattr(params, k) for k in NODE_FIELDS},
                                            params.nodes_from, kind, roce_cards)
    step("nodes")

    wanted = params.num_cards or cards
    memory = memory_facts(backend, listing, params.model_path, wanted, params.card_memory_gib)
    # A kind asked for that fell back to CPU keeps its variable judged strictly: an empty
    # CUDA_VISIBLE_DEVICES is then the explanation of the backend FAIL.
    judged_kind = params.device if plan.backend_error else kind
    checks = [
        C.check_backend(params.device, kind, cards, plan.backend_error),
        C.check_packages(versions, kind),
        C.check_torch_npu_import(kind, versions["torch_npu"], torch_npu_error, params.device,
                                 cann_found=bool(cann.info_file or cann.set_env),
                                 torch_version=versions["torch"]),
        check_torch_npu_compat(versions["torch"], versions["torch_npu"]),
        C.check_cann_env(kind, cann, environ),
        check_cann_compat(versions["torch_npu"], cann.version),
        *C.visible_device_checks(judged_kind, listing, environ),
        C.check_busy_cards(kind, listing, params.num_cards, *C.visible_cards(kind, environ)),
        C.check_card_health(kind, listing),
    ]
    if params.check_ports:
        checks.append(C.check_hccl_ports(kind, wanted, environ))
    checks += [
        C.check_hccl_env(kind, environ),
        *node_checks,
        C.check_flash_attn(kind, is_flash_attn_available(), versions["flash_attn"]),
        C.check_video_processors(versions.get("transformers"), torchvision_problem(),
                                 *_video_processor_wanted(params.model_path)),
        C.check_bf16(backend),
        check_card_memory(kind, memory),
        *_host_memory_checks(kind, wanted, system, params, memory),
        *findings.checks,
        driver_check,
    ]
    step("checks")
    return EnvironmentReport(
        system=system, versions=versions, cann=cann, devices=listing.devices,
        env_vars=collect_env_vars(environ), checks=checks, build=build,
        container=findings, memory=memory, nodes=nodes, device=kind,
        requested_device=params.device, num_cards=cards, device_source=listing.source,
        device_error=listing.error or listing.distrust,
        device_tool_output=scrub_text(listing.raw) if listing.raw else None,
        collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        elapsed_s=round(time.perf_counter() - started, 3))


def _host_memory_checks(kind: str, wanted: int, system: dict, params: Params, memory: MemoryFacts) -> list[Check]:
    """RAM and /dev/shm per card; the RAM per card is the parameter, else the memory model's
    figure for model_path (its reason says so), else the backend's default."""
    modelled = params.ram_gb_per_card is None and memory.host_per_rank_gib is not None
    ram_per_card = memory.host_per_rank_gib if modelled else params.ram_gb_per_card
    ram, shm = check_host_memory(kind, wanted, system, ram_per_card, params.shm_gb_per_card)
    if modelled:
        ram = Check(ram.name, ram.verdict, ram.reason + host_need_reason(memory))
    return [ram, shm]


def _video_processor_wanted(model_path) -> tuple[str, Optional[bool]]:
    """"Cannot be told" for a config.json nested past Python's recursion limit (``[[[...]]]``)."""
    try:
        return wants_video_processor(model_path)
    except RecursionError:
        return "", None


def container_and_driver(plan: Plan, environ: dict, listing, cann: CannFacts,
                         system: dict) -> tuple[ContainerFindings, Check]:
    """The driver / CANN pairing applies on an Ascend backend, or on any backend when the tree
    holds Ascend software or devices (a container checked before torch_npu is installed)."""
    params, kind = plan.params, plan.backend.kind
    root = Path(params.host_root)
    machine = is_machine_root(root)
    tree_cann = cann if machine else collect_cann(environ, root)
    versions = read_driver_versions(root, tree_cann.version, tuple(tree_cann.refused))
    requested = params.device
    shm_per_card = params.shm_gb_per_card or DEFAULT_SHM_GB_PER_CARD["npu"]
    findings = check_container(root, kind=kind, requested=requested, num_cards=params.num_cards,
                               environ=environ, listed=listed_cards(listing), versions=versions,
                               shm_gb_per_card=shm_per_card, machine_shm_gb=system.get("shm_total_gb"))
    found_any = any((versions.driver_file, versions.firmware_file, versions.cann))
    applies = "npu" in (kind, requested) or found_any or bool(ascend_signs(root))
    where = "" if machine else f" under {root}"
    return findings, check_driver_cann(versions, applies=applies, where=where)


def summary_line(report: EnvironmentReport) -> str:
    """``"5 PASS / 0 WARN / 0 FAIL / 10 SKIP on cpu; first WARN: dev_shm"``."""
    attention = [c for c in report.checks if c.verdict in ("FAIL", "WARN")]
    attention.sort(key=lambda c: c.verdict != "FAIL")  # a FAIL is named before a WARN
    first = f"; first {attention[0].verdict}: {attention[0].name}" if attention else ""
    return f"{report.summary_line()} on {report.device}{first}"


def summarize(result: EnvironmentReport) -> StageSummary:
    """The worst verdict of the checks (SKIP ignored, unless every check is one)."""
    return StageSummary(worst_verdict(c.verdict for c in result.checks), summary_line(result),
                        {"checks": result.summary_line(skip=False), "device": result.device,
                         "cards": result.num_cards})


def result_data(result: EnvironmentReport) -> dict:
    """The report as recorded and as ``hyport env --json`` prints it: with its verdict."""
    return {"verdict": summarize(result).verdict, **to_mapping(result)}


def report_text(report: EnvironmentReport) -> str:
    """``hyport env``'s and notebook 01's text: ``- key: value`` lines under a few headings,
    pasteable into a bug report."""
    s, c = report.system, report.cann
    lines = ["hyport environment report (paste into a bug report; "
             "variables whose names look secret are left out)", ""]

    def add(key, value):
        lines.append(f"- {key}: {'not found' if value is None else value}")

    add("verdict", f"{summarize(report).verdict} ({report.summary_line()})")
    add("backend", f"{report.device} ({counted(report.num_cards, 'card')}; requested {report.requested_device})")
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
    lines += ["", "Nodes"] + [f"- {k}: {v}" for k, v in node_rows(report.nodes)]
    lines += ["", f"Devices (source: {report.device_source or '?'})"]
    if report.device_error:
        add("note", report.device_error)
    if report.memory is not None:
        add("memory", report.memory.line)
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
        rows.append(("/dev/shm (GiB)", shown(container.shm_total_gb)))
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
