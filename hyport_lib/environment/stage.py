"""Stage 01: the environment check, for the notebook and ``hyport env``. Cheap on purpose:
well under 3 s on CPU."""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.backend import Backend, get_backend, import_torch_npu
from hyport_lib.devices.host_memory import DEFAULT_SHM_GB_PER_CARD, check_host_memory
from hyport_lib.devices.probe import probe_devices
from hyport_lib.environment import checks as C
from hyport_lib.environment.compat import check_cann_compat, check_driver_cann, check_torch_npu_compat
from hyport_lib.environment.container import ContainerFindings, ascend_signs, check_container, listed_cards
from hyport_lib.environment.facts import (CannFacts, collect_build, collect_cann, collect_env_vars,
                                          collect_system, normalise_cann, read_driver_versions)
from hyport_lib.environment.params import Params
from hyport_lib.environment.report import EnvironmentReport, format_report
from hyport_lib.environment.tree import is_machine_root
from hyport_lib.models.loading import torchvision_problem, wants_video_processor
from hyport_lib.results import Check, StageSummary, worst_verdict
from hyport_lib.utils.imports import collect_versions, is_flash_attn_available
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.typed_records import to_mapping

STAGE = "01_environment"
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
    """Never refuses a device: a kind that is not usable here is collected on the CPU and
    named by the ``backend`` check."""
    try:
        return Plan(params, get_backend(params.device, params.num_cards))
    except RuntimeError as exc:
        return Plan(params, get_backend("cpu", params.num_cards), str(exc))


def run(plan: Plan, *, on_progress: Optional[Callable[[Step], None]] = None) -> EnvironmentReport:
    """The variables and the cards are read now, not when planned: a re-probe (the
    notebook's button) sees a variable set or a card freed since."""
    params, backend = plan.params, plan.backend
    steps = ("versions", "devices", "CANN and build", "system", "container and driver", "checks")

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

    wanted = params.num_cards or cards
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
        C.check_flash_attn(kind, is_flash_attn_available(), versions["flash_attn"]),
        C.check_video_processors(versions.get("transformers"), torchvision_problem(),
                                 *_video_processor_wanted(params.model_path)),
        C.check_bf16(backend),
        *check_host_memory(kind, wanted, system, params.ram_gb_per_card, params.shm_gb_per_card),
        *findings.checks,
        driver_check,
    ]
    step("checks")
    return EnvironmentReport(
        system=system, versions=versions, cann=cann, devices=listing.devices,
        env_vars=collect_env_vars(environ), checks=checks, build=build,
        container=findings, device=kind,
        requested_device=params.device, num_cards=cards, device_source=listing.source,
        device_error=listing.error or listing.distrust,
        device_tool_output=scrub_text(listing.raw) if listing.raw else None,
        collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        elapsed_s=round(time.perf_counter() - started, 3))


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


def report_text(result: EnvironmentReport) -> str:
    """``hyport env``'s and notebook 01's text."""
    return format_report(result, summarize(result).verdict)


def result_data(result: EnvironmentReport) -> dict:
    """The report as recorded and as ``hyport env --json`` prints it: with its verdict."""
    return {"verdict": summarize(result).verdict, **to_mapping(result)}
