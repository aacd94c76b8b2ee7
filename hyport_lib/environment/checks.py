"""The judgements of stage 01: each takes collected facts as plain values (never probing,
so each can be tested with made-up input) and returns a :class:`Check`."""

from __future__ import annotations

import socket
from typing import Iterable, Mapping, Optional

from packaging.version import InvalidVersion, Version

from hyport_lib.backend import CudaBackend, NpuBackend
from hyport_lib.devices.probe import DeviceListing
from hyport_lib.devices.visible_devices import check_visible_devices, visible_card_ids
from hyport_lib.devices.ascend_versions import CannFacts
from hyport_lib.results import Check
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted

#: Packages every stage needs; a missing one FAILs the environment check.
REQUIRED_PACKAGES = ("torch", "transformers", "accelerate", "safetensors", "tokenizers",
                     "deepspeed", "papermill", "nbconvert", "ipywidgets", "pandas")
#: Needed only to work interactively; missing is a WARN.
OPTIONAL_PACKAGES = ("jupyterlab",)
TRANSFORMERS_RANGE = ((4, 57), (6, 0))  # [low, high)

HCCL_BASE_PORT = 60000  # host side; HCCL_IF_BASE_PORT moves it
HCCL_DEVICE_PORT = 16666
HCCL_CONNECT_TIMEOUT_RANGE = (120, 7200)
#: Visible-devices variable of each accelerator kind, as the backend seam names them.
VISIBLE_DEVICES_VARS = {b.kind: b.visible_devices_var for b in (NpuBackend, CudaBackend)}


# --- ports --------------------------------------------------------------------------------
def port_taken(port: int, hosts: Iterable[str] = ("0.0.0.0", "127.0.0.1")) -> bool:
    for host in hosts:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # SO_REUSEADDR: a port in TIME_WAIT is usable by the next job, so not "taken".
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                return True
    return False


def hccl_ports(num_cards: int, environ: Mapping[str, str]) -> list[int]:
    """The host ports HCCL binds for ``num_cards`` ranks, plus the device port."""
    base_text = environ.get("HCCL_IF_BASE_PORT", "")
    base = int(base_text) if base_text.strip().isdigit() else HCCL_BASE_PORT
    return [base + i for i in range(max(int(num_cards), 1))] + [HCCL_DEVICE_PORT]


def check_hccl_ports(kind: str, num_cards: int, environ: Mapping[str, str],
                     probe=port_taken) -> Check:
    """Judged on NPU; reported (SKIP) elsewhere."""
    ports = hccl_ports(num_cards, environ)
    taken = [p for p in ports if probe(p)]
    span = f"{ports[0]}-{ports[-2]}" if len(ports) > 2 else str(ports[0])
    where = f"ports {span} and {HCCL_DEVICE_PORT}"
    if kind != "npu":
        state = f"taken: {taken}" if taken else "free"
        return Check("hccl_ports", "SKIP", f"HCCL is not used by the {kind} backend ({where} {state})")
    if not taken:
        return Check("hccl_ports", "PASS", f"{where} free for {num_cards} ranks")
    return Check("hccl_ports", "FAIL", f"ports {taken} already taken (another job?): HCCL will fail "
                                       f"with EJ0003 'Failed to bind the IP port'; stop that job or "
                                       f"set HCCL_IF_BASE_PORT to a free range")


# --- cards ---------------------------------------------------------------------------------
def visible_device_checks(kind: str, listing: DeviceListing,
                          environ: Mapping[str, str]) -> list[Check]:
    """One check per visible-devices variable: strict for ``kind``'s own, lenient for others."""
    own = VISIBLE_DEVICES_VARS.get(kind)
    names = [v for v in VISIBLE_DEVICES_VARS.values() if v in environ or v == own]
    if not names:
        return [Check("visible_devices", "SKIP", "no visible-devices variable set")]
    names.sort(key=lambda v: v != own)  # the variable that matters first
    host_cards = len(listing.devices) if listing.source in ("npu-smi", "nvidia-smi") else None
    return [check_visible_devices(environ.get(v), v, host_cards if v == own else None, kind) for v in names]


def visible_cards(kind: str,
                  environ: Mapping[str, str]) -> tuple[Optional[list[int]], Optional[str]]:
    """Host card ids the backend's variable leaves visible (None: all), and ``VAR=value``."""
    var = VISIBLE_DEVICES_VARS.get(kind)
    if var is None or var not in environ:
        return None, None
    return visible_card_ids(environ[var], var), f"{var}={environ[var]}"


def check_busy_cards(kind: str, listing, num_cards: Optional[int] = None,
                     visible: Optional[list[int]] = None,
                     visible_var: Optional[str] = None) -> Check:
    """FAIL when fewer free cards remain than ``num_cards`` requests, or none; WARN when some
    are busy but enough are free (hyport skips busy cards). Busy cards outside ``visible``
    (the host ids ``visible_var`` leaves visible; None: all) are named but do not count."""
    name = "busy_cards"
    if kind == "cpu":
        return Check(name, "SKIP", "CPU backend: the cards are worker processes hyport starts")
    if not listing.processes_known:
        return Check(name, "WARN", f"cannot see which processes hold the cards: {listing.error}")
    if listing.distrust:
        return Check(name, "WARN", f"not judged: {listing.distrust}")
    devices, ignored, via = listing.devices, [], ""
    if visible is not None:
        # Same mapping as the grid: the variable's entries are the listing's indices.
        by_index = {d.index: d for d in listing.devices}
        devices = [by_index[i] for i in dict.fromkeys(visible) if i in by_index]
        ignored = [d.index for d in listing.devices if d.processes and d.index not in visible]
        via = f" ({visible_var})" if visible_var else ""
        if not devices:
            return Check(name, "SKIP", f"no card of this host is visible{via}: see visible_devices")
    busy = [d for d in devices if d.processes]
    total, free = len(devices), len(devices) - len(busy)
    label = "card" if total == 1 else "cards"
    if visible is not None:
        label = f"visible {label} ({', '.join(str(d.index) for d in devices)})"
    unseen = ""
    if ignored:
        cards = "card" if len(ignored) == 1 else "cards"
        unseen = f"; busy but not visible, so not used: {cards} {', '.join(map(str, ignored))}"
    if not busy:
        if num_cards and total < num_cards:
            return Check(name, "FAIL", f"only {total} {label}{via}, {num_cards} requested{unseen}")
        return Check(name, "PASS", f"no process holds any of the {total} {label}{via}{unseen}")
    if free:
        head = f"{len(busy)} of {total} {label} busy"
    elif total == 1:
        head = f"the only {label} is busy"
    else:
        head = f"{'both' if total == 2 else f'all {total}'} {label} are busy"
    detail = "; ".join(f"card {d.index}: " + ", ".join(p.describe() for p in d.processes)
                       for d in busy) + unseen
    if not free or (num_cards and free < num_cards):
        wanted = f"{num_cards} requested" if num_cards else "nothing can run"
        return Check(name, "FAIL", f"{head}{via}: {free} free, {wanted} ({detail})")
    return Check(name, "WARN", f"{head}{via} ({detail}); hyport skips them and never stops a "
                               f"process it did not start")


def check_card_health(kind: str, listing) -> Check:
    name = "card_health"
    if kind == "cpu":
        return Check(name, "SKIP", "CPU backend")
    if listing.distrust:
        return Check(name, "WARN", f"not judged: {listing.distrust}")
    known = [d for d in listing.devices if d.health]
    if not known:
        if kind == "npu":  # npu-smi always reports Health: without it the listing was not read
            why = listing.error or "the listing has no Health column"
            return Check(name, "WARN", f"not judged: health not reported by npu-smi ({why}; "
                                       f"source {listing.source})")
        return Check(name, "SKIP", f"health not reported ({listing.source})")
    bad = [d for d in known if d.health.upper() != "OK"]
    if not bad:
        return Check(name, "PASS", f"all {counted(len(known), 'card')} report OK" if len(known) > 1
                               else f"{counted(len(known), 'card')} reports OK")
    worst = "FAIL" if any(d.health.upper() in ("CRITICAL", "ALARM") for d in bad) else "WARN"
    detail = ", ".join(f"card {d.index} {d.health}" for d in bad)
    return Check(name, worst, f"{detail} (see `npu-smi info -t health -i <npu>`)")


def check_bf16(backend) -> Check:
    try:
        supported = bool(backend.supports_bf16())
    except RuntimeError as exc:
        return Check("bf16", "WARN", f"could not ask the device: {exc}")
    if backend.kind == "cpu":  # always PASS: emulated bf16 is correct, and training's auto avoids it
        native, why = backend.native_bf16()
        return Check("bf16", "PASS", f"CPU: {why}" + ("" if native else f"; bf16 is {backend.emulated_bf16}, "
                                                             "so training's precision auto uses float32"))
    if supported:
        return Check("bf16", "PASS", f"{backend.kind} supports bf16")
    return Check("bf16", "WARN", f"{backend.kind} has no bf16 (310P?): use fp16, with loss scaling "
                                 f"for training")


def check_flash_attn(kind: str, importable: bool, version: Optional[str]) -> Check:
    """On NPU flash_attn must be absent: model code that finds it takes the CUDA path."""
    name = "flash_attn"
    label = f"flash_attn {version}" if version else "flash_attn"
    if kind == "npu":
        if importable:
            return Check(name, "WARN", f"{label} imports on an NPU host: remote model code that "
                                       f"checks for it takes the CUDA kernel path; uninstall it")
        if version:
            return Check(name, "WARN", f"{label} is installed but does not import; uninstall it")
        return Check(name, "PASS", "flash_attn absent, as it should be on NPU")
    if kind == "cuda":
        if importable:
            return Check(name, "PASS", f"{label} imports")
        return Check(name, "PASS", "flash_attn not installed: attention uses sdpa")
    state = "imports" if importable else ("installed, does not import" if version else "not installed")
    return Check(name, "SKIP", f"not relevant on CPU ({label} {state})")


# --- packages --------------------------------------------------------------------------------
def check_video_processors(transformers_version: Optional[str], torchvision_problem: Optional[str],
                           model_type: str = "", wants_video: Optional[bool] = None) -> Check:
    """Processors whose video part needs torchvision (transformers 5: the Qwen-VL family,
    LLaVA-OneVision, InternVL) load whole only where torchvision imports; elsewhere hyport
    loads their image side alone. WARN when the model's processor has one (or cannot be told)."""
    name = "video_processors"
    model_type = printable(model_type)  # read from the model's config.json
    if torchvision_problem is None:
        return Check(name, "PASS", "torchvision imports: processors load whole, video part included")
    families = ("the video processors of Qwen2-VL / Qwen2.5-VL / Qwen3-VL, LLaVA-OneVision and "
                f"InternVL (transformers {transformers_version or '?'}) cannot be built; hyport loads "
                "their image processor and tokenizer alone (images work, videos do not)")
    if wants_video is False:
        return Check(name, "PASS", f"{torchvision_problem}; the model ({model_type or 'text-only'}) has "
                                   f"no video processor, so nothing is missing (other models: {families})")
    who = f"the model's processor ({model_type}) has a video part: " if wants_video else ""
    return Check(name, "WARN", f"{torchvision_problem}: {who}{families}. For videos, install the "
                               "torchvision built for this torch")


def install_hint(kind: str, missing: list[str]) -> str:
    """How to add ``missing`` on a ``kind`` host. The CPU constraints pin a CPU torch: on an
    NPU or GPU host they would replace the host's torch, so they are offered on CPU only."""
    if kind == "cpu":
        return "pip install -e . -c constraints/cpu.txt"
    return f"pip install {' '.join(missing)} (into the environment that has this host's torch; " \
           f"never with constraints/cpu.txt)"


def check_packages(versions: Mapping[str, Optional[str]], kind: str = "cpu") -> Check:
    missing = [p for p in REQUIRED_PACKAGES if not versions.get(p)]
    if missing:
        return Check("packages", "FAIL", f"missing: {', '.join(missing)} ({install_hint(kind, missing)})")
    notes = []
    tf = versions.get("transformers")
    try:
        release = Version(tf).release[:2] if tf else None
    except InvalidVersion:
        release = None
    low, high = TRANSFORMERS_RANGE
    if release is not None and not (low <= release < high):
        notes.append(f"transformers {tf} is outside the tested range "
                     f">={low[0]}.{low[1]},<{high[0]}")
    optional = [p for p in OPTIONAL_PACKAGES if not versions.get(p)]
    if optional:
        notes.append(f"{', '.join(optional)} missing (needed only to open notebooks interactively)")
    if notes:
        return Check("packages", "WARN", "; ".join(notes))
    return Check("packages", "PASS", f"all {len(REQUIRED_PACKAGES)} required packages installed")


def torch_npu_install_command(torch_version: Optional[str]) -> str:
    """The pip command that adds torch-npu for the *installed* torch and keeps that torch: an
    open ``pip install torch-npu`` takes the newest release, which replaces the host's torch."""
    base = (torch_version or "").split("+")[0].strip()
    try:  # 2.6.0a0 / 2.4.0rc1 / 2.1.0.post3: torch-npu pairs with the release 2.6.0 / 2.4.0 / 2.1.0
        base = Version(base).base_version if base else base
    except InvalidVersion:
        pass  # not PEP 440: shown as written
    if not base:
        return "pip install torch torch-npu  # no torch installed: pick the pair CANN supports"
    return f'pip install "torch-npu=={base}.*" "torch=={base}"'


def check_torch_npu_import(kind: str, version: Optional[str], error: Optional[str],
                           requested: str = "auto", *, cann_found: bool = False,
                           torch_version: Optional[str] = None) -> Check:
    name = "torch_npu_import"
    if error:
        hint = ""
        if "lib" in error and ".so" in error:
            hint = "; source the CANN set_env.sh before starting Python"
        verdict = "FAIL" if requested == "npu" or kind == "npu" else "WARN"
        return Check(name, verdict, f"torch_npu is installed but `import torch_npu` fails: "
                                    f"{error}{hint}")
    if not version:
        command = torch_npu_install_command(torch_version)
        if requested == "npu":
            return Check(name, "FAIL", f"torch_npu is not installed; with CANN sourced: {command}")
        if cann_found:
            return Check(name, "WARN", f"CANN is installed but torch_npu is not; to add it without "
                                       f"replacing torch {torch_version}: {command}")
        return Check(name, "SKIP", f"torch_npu not installed (not needed on {kind})")
    return Check(name, "PASS", f"torch_npu {version} imports")


def check_cann_env(kind: str, cann: CannFacts, environ: Mapping[str, str]) -> Check:
    """Is a CANN installed, and its environment sourced in this process?"""
    name = "cann_env"
    set_env = cann.set_env
    home = environ.get("ASCEND_HOME_PATH") or environ.get("ASCEND_TOOLKIT_HOME")
    version = cann.version
    if not set_env and not home:
        if kind == "npu":
            return Check(name, "WARN", "no set_env.sh under /usr/local/Ascend or ~/Ascend and "
                                       "ASCEND_HOME_PATH unset: CANN is in an unusual place")
        return Check(name, "SKIP", "no CANN installation found (not an Ascend host)")
    label = f"CANN {version}" if version else "CANN (version unknown)"
    if set_env and not home:
        return Check(name, "WARN",
                     f"{label} found but its environment is not sourced (ASCEND_HOME_PATH unset): "
                     f"run `source {set_env}` (ImportError libhccl.so otherwise)")
    return Check(name, "PASS", f"{label}, environment sourced (ASCEND_HOME_PATH={home})")


def check_hccl_env(kind: str, environ: Mapping[str, str]) -> Check:
    name = "hccl_env"
    problems = []
    timeout = environ.get("HCCL_CONNECT_TIMEOUT")
    low, high = HCCL_CONNECT_TIMEOUT_RANGE
    if timeout is not None and not (timeout.strip().isdigit() and low <= int(timeout) <= high):
        problems.append(f"HCCL_CONNECT_TIMEOUT={timeout!r} outside {low}-{high} s")
    exec_timeout = environ.get("HCCL_EXEC_TIMEOUT")
    if exec_timeout is not None and not exec_timeout.strip().isdigit():
        problems.append(f"HCCL_EXEC_TIMEOUT={exec_timeout!r} is not a number of seconds")
    base = environ.get("HCCL_IF_BASE_PORT")
    if base is not None and not (base.strip().isdigit() and 1024 <= int(base) <= 65520):
        problems.append(f"HCCL_IF_BASE_PORT={base!r} is not a port in 1024-65520")
    if environ.get("ASCEND_LAUNCH_BLOCKING") == "1":
        problems.append("ASCEND_LAUNCH_BLOCKING=1 makes every launch synchronous: good for "
                        "locating errors, wrong for timing")
    if problems:
        return Check(name, "WARN", "; ".join(problems))
    shown = {k: environ[k] for k in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT") if k in environ}
    if not shown and base is None and kind != "npu":
        return Check(name, "SKIP", "no HCCL timeout or port variable set (HCCL_CONNECT_TIMEOUT, "
                                   "HCCL_EXEC_TIMEOUT, HCCL_IF_BASE_PORT); the interface and address "
                                   "variables are judged by hccl_socket_ifname and hccl_if_ip")
    connect = shown.get("HCCL_CONNECT_TIMEOUT", "120 (default)")
    execute = shown.get("HCCL_EXEC_TIMEOUT", "1836 (default on CANN 8.x)")
    return Check(name, "PASS", f"HCCL_CONNECT_TIMEOUT={connect} s, HCCL_EXEC_TIMEOUT={execute} s")


def check_backend(requested: str, kind: str, num_cards: int, error: Optional[str]) -> Check:
    if error:
        return Check("backend", "FAIL", f"{error}; the facts below were collected on CPU")
    if kind == "cpu":
        why = "no NPU or CUDA device found" if requested == "auto" else "CPU requested"
        return Check("backend", "PASS", f"{why}: cpu backend with {counted(num_cards, 'worker process')}; "
                                        f"figures are labelled CPU, never NPU")
    return Check("backend", "PASS", f"{kind} backend, {counted(num_cards, 'card')}")
