"""The host's facts, collected without judging them: at least what ``accelerate env``,
``transformers env``, ``ds_report`` and vllm-ascend's ``collect_env`` print. Cheap on
purpose: DeepSpeed is found by metadata, never imported.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.host_memory import host_memory
from hyport_lib.environment.tree import (MAX_CONFIG_BYTES, MAX_PROC_BYTES, MAX_VERSION_BYTES, is_absent,
                                         is_machine_root, present, read_optional, refusal,
                                         regular_file_in_tree, tree_file)
from hyport_lib.utils.bounded_files import UnreadableFile, open_regular, read_text
from hyport_lib.utils.imports import try_import
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import filter_environ, is_secret_name, scrub_secret_shapes

#: Files whose presence says "container", relative to the root.
#: containerd (Kubernetes) writes neither file; a pod gets its service account's folder.
CONTAINER_MARKERS = (".dockerenv", "run/.containerenv", "var/run/secrets/kubernetes.io")
#: Words in /proc/1/cgroup that name a container runtime (cgroup v1 paths).
CGROUP_WORDS = ("docker", "kubepods", "containerd", "lxc", "libpod")
DRIVER_VERSION_FILE = "usr/local/Ascend/driver/version.info"
FIRMWARE_VERSION_FILE = "usr/local/Ascend/firmware/version.info"

#: Variables collected by prefix, and by name (docs/ascend_field_notes.md); for a job of
#: several hosts torchrun's ``PET_*``, ModelArts' ``MA_*`` / ``VC_*`` (MA_NUM_HOSTS,
#: VC_TASK_INDEX, VC_WORKER_HOSTS ...), LLaMA-Factory's NNODES / NODE_RANK / RDZV_ID and
#: Ascend's rank table. A secret-named one is dropped (utils/redact.py).
ENV_PREFIXES = ("ASCEND_", "HCCL_", "PYTORCH_NPU_", "TORCH_", "NPU_", "CUDA_", "NCCL_", "DS_",
                "MASTER_", "PET_", "MA_", "VC_")
ENV_NAMES = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "PYTORCH_CUDA_ALLOC_CONF", "WORLD_SIZE",
             "RANK", "LOCAL_RANK", "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "HF_ENDPOINT",
             "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "NNODES", "NODE_RANK",
             "NPROC_PER_NODE", "RDZV_ID", "RDZV_BACKEND", "RDZV_ENDPOINT", "GROUP_RANK",
             "LOCAL_WORLD_SIZE", "RANK_TABLE_FILE", "RANK_SIZE", "RANK_ID")

DEFAULT_ASCEND_ROOT = Path("/usr/local/Ascend")
#: The head of /proc/cpuinfo read for the model name: it is in the first processor's block,
#: and the whole file of a many-core host runs to megabytes.
CPUINFO_HEAD_BYTES = 64 << 10
#: The most values (and nesting levels) of accelerate's config kept in the report: a real
#: one has a few dozen; YAML aliases can make a 1 KB file stand for a billion values.
MAX_CONFIG_VALUES = 2000
MAX_CONFIG_DEPTH = 16


def collect_system() -> dict:
    uname = platform.uname()
    facts = {
        "os": _os_release() or f"{uname.system} {uname.release}",
        "kernel": uname.release,
        "arch": uname.machine,
        "platform": platform.platform(),
        "libc": "-".join(p for p in platform.libc_ver() if p) or None,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "numa_nodes": len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))) or None,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "in_container": container_evidence(Path("/")) is not None,
    }
    facts.update(host_memory())
    facts.update(_shm())
    return facts


@dataclass
class CannFacts:
    """Where CANN is installed and what it says of itself (None: not found)."""

    version: Optional[str] = None
    info_file: Optional[str] = None  # ascend_toolkit_install.info
    info: dict[str, str] = field(default_factory=dict)  # that file's keys and values
    set_env: Optional[str] = None  # the first set_env.sh found
    set_env_found: list[str] = field(default_factory=list)
    nnal_set_env: Optional[str] = None
    home_path: Optional[str] = None  # ASCEND_HOME_PATH
    driver_version: Optional[str] = None
    refused: list[str] = field(default_factory=list)  # files present but not read, one line each


def collect_cann(environ: Optional[Mapping[str, str]] = None, root: os.PathLike = Path("/"),
                 arch: Optional[str] = None, ascend_root: Optional[os.PathLike] = None) -> CannFacts:
    """CANN as found under ``ascend_root`` (``/usr/local/Ascend``), ``~/Ascend`` and the
    toolkit ``ASCEND_HOME_PATH`` names; under a ``root`` other than ``/`` those paths are
    the tree's (``ascend-toolkit/latest -> /usr/local/Ascend/...`` too)."""
    environ = os.environ if environ is None else environ
    # on this machine a relative path means the working folder's; in a tree, the tree's
    shown = os.path.abspath if is_machine_root(root) else str
    toolkit_homes = [shown(environ[k]) for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if environ.get(k)]
    root = Path(root)
    arch = arch or platform.machine()
    ascend = shown(ascend_root or DEFAULT_ASCEND_ROOT).rstrip("/")
    user_ascend = f"{shown(Path.home()).rstrip('/')}/Ascend"
    # CANN >= 8.5 installs under cann/; older releases under ascend-toolkit/latest/.
    toolkit_roots = [*toolkit_homes, f"{ascend}/cann", f"{ascend}/ascend-toolkit/latest",
                     f"{user_ascend}/cann", f"{user_ascend}/ascend-toolkit/latest"]
    refused: list[str] = []
    info_file, info = None, {}
    for candidate in (f"{r}/{name}" for r in toolkit_roots
                      for name in (f"{arch}-linux/ascend_toolkit_install.info", "ascend_toolkit_install.info")):
        info_file, info = read_version_file(root, candidate, refused)
        if info_file is not None:
            break
    set_envs = [str(found) for found in (regular_file_in_tree(root, f"{base}/set_env.sh") for base in (
        f"{ascend}/cann", f"{ascend}/ascend-toolkit", f"{user_ascend}/cann", f"{user_ascend}/ascend-toolkit"))
        if found is not None]
    _, driver = read_version_file(root, f"{ascend}/driver/version.info", refused)
    nnal = regular_file_in_tree(root, f"{ascend}/nnal/atb/set_env.sh")
    return CannFacts(normalise_cann(info.get("version")), info_file, info, set_envs[0] if set_envs else None,
                     set_envs, str(nnal) if nnal is not None else None, environ.get("ASCEND_HOME_PATH"),
                     driver.get("Version") or driver.get("version"), refused)


def normalise_cann(version: Optional[str]) -> Optional[str]:
    """``CANN-8.3.RC1`` / ``8.3.rc1`` -> ``8.3.RC1``; None stays None."""
    if not version:
        return None
    text = str(version).strip()
    for prefix in ("CANN", "cann"):
        if text.startswith(prefix):
            text = text[len(prefix):].lstrip(" -_")
    return re.sub(r"(?i)rc", "RC", text) if text else None


@dataclass
class DriverVersions:
    """What the driver's and firmware's ``version.info`` of one tree say (None: the file is
    absent or has no such key); ``errors``: one ``PATH: cannot be read: WHY`` line per
    version file (or CANN info) present but not read."""

    driver: Optional[str] = None  # the driver's Version (24.1.rc3)
    driver_package: Optional[str] = None
    driver_inner: Optional[str] = None  # Innerversion (V100R001C19SPC001B124)
    driver_firmware_range: Optional[str] = None  # compatible_version_fw, as written
    firmware: Optional[str] = None  # the firmware's Version (7.5.0.1.129)
    firmware_package: Optional[str] = None  # the Ascend HDK release it shipped in
    firmware_driver_range: Optional[str] = None  # compatible_version_drv, as written
    cann: Optional[str] = None
    driver_file: Optional[str] = None
    firmware_file: Optional[str] = None
    errors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """``driver 24.1.rc3, firmware 7.5.0.1.129, CANN 8.0.RC3`` (``not found`` for a
        missing file, ``unknown`` for a file that names no version)."""
        def shown(value: Optional[str], path: Optional[str]) -> str:
            return value or ("unknown" if path else "not found")

        return ", ".join(f"{label} {shown(value, path)}" for label, value, path in
                         (("driver", self.driver, self.driver_file),
                          ("firmware", self.firmware, self.firmware_file), ("CANN", self.cann, self.cann)))


def parse_version_info(text: str) -> dict[str, str]:
    """``key=value`` lines of a ``version.info``; comment and secret-named lines dropped, the
    values without terminal escapes or secret-shaped text (they go into the report as
    they are)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and not key.startswith("#") and not is_secret_name(key):
            values[key] = printable(scrub_secret_shapes(value.strip().strip('"')))
    return values


def read_version_file(root: Path, path: str, refused: list[str]) -> tuple[Optional[str], dict[str, str]]:
    """``(file read, its key=value pairs)``; ``(None, {})`` when absent or refused."""
    text = read_optional(root, path, MAX_VERSION_BYTES, refused)
    if text is None:
        return None, {}
    return str(tree_file(root, path)), parse_version_info(text)


def read_driver_versions(root: Path, cann_version: Optional[str] = None,
                         cann_refused: tuple[str, ...] = ()) -> DriverVersions:
    """The driver's and firmware's version files under ``root``, and the CANN release found
    there (:func:`collect_cann`); the CANN files present but not read (``cann_refused``) are
    kept in ``errors``: without them the pairing cannot be judged."""
    found = DriverVersions(cann=normalise_cann(cann_version))
    driver_path, driver = read_version_file(root, DRIVER_VERSION_FILE, found.errors)
    firmware_path, firmware = read_version_file(root, FIRMWARE_VERSION_FILE, found.errors)
    found.errors = list(dict.fromkeys(found.errors + list(cann_refused)))  # the driver file may be in both
    if driver_path is not None:
        found.driver_file = driver_path
        found.driver = driver.get("Version") or driver.get("version") or None
        found.driver_package = driver.get("package_version") or None
        found.driver_inner = driver.get("Innerversion") or None
        found.driver_firmware_range = driver.get("compatible_version_fw") or None
    if firmware_path is not None:
        found.firmware_file = firmware_path
        found.firmware = firmware.get("Version") or firmware.get("version") or None
        found.firmware_package = firmware.get("package_version") or None
        found.firmware_driver_range = firmware.get("compatible_version_drv") or None
    return found


def container_evidence(root: Path, refused: Optional[list[str]] = None) -> Optional[str]:
    """What says ``root`` is a container (a marker file, a runtime named in /proc/1/cgroup, an
    overlay ``/``: what a cgroup v2 pod on containerd shows), or None. A /proc file present
    but not read goes to ``refused``: "nothing says container" may then be wrong."""
    refused = [] if refused is None else refused
    for marker in CONTAINER_MARKERS:
        if present(root, marker):
            return f"/{marker}"
    cgroup = read_optional(root, "proc/1/cgroup", MAX_PROC_BYTES, refused)
    word = next((w for w in CGROUP_WORDS if w in (cgroup or "")), None)
    if word:
        return f"/proc/1/cgroup names {word}"
    return "/ is an overlay mount (/proc/1/mountinfo)" if _root_is_overlay(root, refused) else None


def _root_is_overlay(root: Path, refused: list[str]) -> bool:
    """Whether the first process's ``/`` is an overlay, as container runtimes mount an image
    (a mountinfo line: ``... <root> <mount point> ... - <type> ...``)."""
    text = read_optional(root, "proc/1/mountinfo", MAX_PROC_BYTES, refused)
    kind = None
    for line in (text or "").splitlines():  # the last mount on / is the one in effect
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) >= 5 and parts[4] == "/":
            kind = (rest.split() or [None])[0]
    return kind == "overlay"


def collect_env_vars(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Any variable whose name looks secret is dropped entirely."""
    return filter_environ(ENV_PREFIXES, ENV_NAMES, environ)


def collect_build(versions: Mapping[str, Optional[str]]) -> dict:
    """torch build facts and install paths (ds_report), accelerate config (accelerate env)."""
    build: dict = {}
    torch, error = try_import("torch")
    if torch is not None:
        version = getattr(torch, "version", None)
        build.update({
            "torch_path": str(Path(torch.__file__).parent),
            "torch_cuda": getattr(version, "cuda", None),
            "torch_hip": getattr(version, "hip", None),
            "torch_cann": getattr(version, "cann", None),
            "torch_debug": getattr(version, "debug", None),
        })
    elif error:
        build["torch_error"] = error
    spec = importlib.util.find_spec("deepspeed") if versions.get("deepspeed") else None
    build["deepspeed_path"] = str(Path(spec.origin).parent) if spec and spec.origin else None
    build["accelerate_config"] = _accelerate_config()
    return build


def _os_release() -> Optional[str]:
    try:
        text = read_text("/etc/os-release", MAX_VERSION_BYTES)
    except UnreadableFile:  # absent or odd: the OS is then named by uname
        return None
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return match.group(1) if match else None


def _cpu_model() -> Optional[str]:
    try:
        with open_regular("/proc/cpuinfo") as handle:
            text = handle.read(CPUINFO_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:  # no /proc, or a read error: lscpu or platform below name the CPU
        text = ""
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    if match:
        return match.group(1).strip()
    # aarch64 (Kunpeng) /proc/cpuinfo has no model name; lscpu decodes the part id.
    lscpu = shutil.which("lscpu")
    if lscpu:
        try:
            out = subprocess.run([lscpu], capture_output=True, text=True, timeout=5).stdout
        except subprocess.TimeoutExpired:
            out = ""
        match = re.search(r"^Model name:\s*(.+)$", out, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or None


def _shm() -> dict:
    try:
        usage = shutil.disk_usage("/dev/shm")
    except OSError:
        return {"shm_total_gb": None, "shm_free_gb": None}
    return {"shm_total_gb": round(usage.total / 2**30, 3), "shm_free_gb": round(usage.free / 2**30, 3)}


def _accelerate_config() -> Optional[dict]:
    base = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")
    default = Path(base) / "accelerate" / "default_config.yaml"
    path = Path(os.environ.get("ACCELERATE_CONFIG_FILE") or default)
    try:
        text = read_text(path, MAX_CONFIG_BYTES, errors="strict")
    except UnreadableFile as exc:
        return None if is_absent(exc) else {"path": str(path), "error": refusal(exc)}
    except UnicodeDecodeError as exc:
        return {"path": str(path), "error": f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"}
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return {"path": str(path), "error": printable(f"{type(exc).__name__}: {exc}")}
    except RecursionError:
        return {"path": str(path), "error": f"{path}: nested too deeply to be read"}
    if not isinstance(data, dict):
        return {"path": str(path)}
    try:
        return {"path": str(path), **_config_shown(data, [MAX_CONFIG_VALUES], MAX_CONFIG_DEPTH)}
    except ValueError as exc:
        return {"path": str(path), "error": f"{path}: {exc}"}


def _config_shown(value, budget: list[int], depth: int):
    """A config's value as the report shows it: secret-named keys dropped at every level,
    text without secret shapes or terminal escapes; ValueError past the budget of values
    (aliases expanding) or ``depth`` levels."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"more than {MAX_CONFIG_VALUES} values (YAML aliases expanding?), not shown")
    if isinstance(value, (dict, list)) and depth <= 0:
        raise ValueError(f"nested deeper than {MAX_CONFIG_DEPTH} levels, not shown")
    if isinstance(value, dict):
        return {_config_shown(str(k), budget, depth): _config_shown(v, budget, depth - 1)
                for k, v in value.items() if not is_secret_name(str(k))}
    if isinstance(value, list):
        return [_config_shown(v, budget, depth - 1) for v in value]
    if isinstance(value, str):
        return printable(scrub_secret_shapes(value))
    return value if isinstance(value, (bool, int, float, type(None))) else printable(str(value))
