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
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.host_memory import host_memory
from hyport_lib.utils.bounded_files import UnreadableFile, open_regular, read_text
from hyport_lib.utils.file_tree import MAX_CONFIG_BYTES, MAX_PROC_BYTES, MAX_VERSION_BYTES, is_absent, present, read_optional, refusal
from hyport_lib.utils.imports import try_import
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import filter_environ, is_secret_name, scrub_secret_shapes

#: Files whose presence says "container", relative to the root.
#: containerd (Kubernetes) writes neither file; a pod gets its service account's folder.
CONTAINER_MARKERS = (".dockerenv", "run/.containerenv", "var/run/secrets/kubernetes.io")
#: Words in /proc/1/cgroup that name a container runtime (cgroup v1 paths).
CGROUP_WORDS = ("docker", "kubepods", "containerd", "lxc", "libpod")

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
