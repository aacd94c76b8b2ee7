"""The host's facts, collected without judging them: versions, OS / CPU / RAM /
``/dev/shm``, the torch build, CANN and the driver, relevant environment variables.

At least what ``accelerate env``, ``transformers env``, ``ds_report`` and vllm-ascend's
``collect_env`` print. Cheap on purpose: DeepSpeed's version and path come from package
metadata, never from importing it.
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
from hyport_lib.environment.compat import normalise_cann
from hyport_lib.environment.container import container_evidence
from hyport_lib.environment.driver_versions import parse_version_info
from hyport_lib.environment.tree_paths import under
from hyport_lib.utils.imports import try_import
from hyport_lib.utils.redact import filter_environ, is_secret_name

#: Variables collected by prefix, and by name (docs/ascend_field_notes.md).
ENV_PREFIXES = ("ASCEND_", "HCCL_", "PYTORCH_NPU_", "TORCH_", "NPU_", "CUDA_", "NCCL_", "DS_",
                "MASTER_")
ENV_NAMES = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "PYTORCH_CUDA_ALLOC_CONF", "WORLD_SIZE",
             "RANK", "LOCAL_RANK", "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "HF_ENDPOINT",
             "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

DEFAULT_ASCEND_ROOT = Path("/usr/local/Ascend")


def collect_system() -> dict:
    """OS, CPU, RAM, /dev/shm and Python facts."""
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
        "in_container": _in_container(),
    }
    facts.update(host_memory())
    facts.update(_shm())
    return facts


def collect_cann(ascend_root: Optional[os.PathLike] = None, environ: Optional[Mapping[str, str]] = None,
                 arch: Optional[str] = None, home: Optional[os.PathLike] = None) -> dict:
    """CANN install info file, the set_env.sh scripts present, and the driver version.

    Args:
        ascend_root: where Ascend software is installed (default ``/usr/local/Ascend``).
        environ: environment to read ``ASCEND_HOME_PATH`` from (default ``os.environ``).
        arch: ``aarch64`` / ``x86_64`` (default: this machine).
        home: the user's home, for a per-user ``~/Ascend`` (default: this user's).
    """
    root = Path(ascend_root) if ascend_root else DEFAULT_ASCEND_ROOT
    environ = os.environ if environ is None else environ
    arch = arch or platform.machine()
    home = (Path(home) if home is not None else Path.home()) / "Ascend"
    toolkit_roots = [Path(environ[k]) for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if environ.get(k)]
    # CANN >= 8.5 installs under cann/; older releases under ascend-toolkit/latest/.
    toolkit_roots += [root / "cann", root / "ascend-toolkit" / "latest",
                      home / "cann", home / "ascend-toolkit" / "latest"]
    info_file = _first_file(p for r in toolkit_roots for p in (
        r / f"{arch}-linux" / "ascend_toolkit_install.info", r / "ascend_toolkit_install.info"))
    info = _key_values(info_file) if info_file else {}
    set_envs = [p for p in (root / "cann" / "set_env.sh", root / "ascend-toolkit" / "set_env.sh",
                            home / "cann" / "set_env.sh", home / "ascend-toolkit" / "set_env.sh")
                if p.is_file()]
    driver = _key_values(root / "driver" / "version.info")
    nnal = root / "nnal" / "atb" / "set_env.sh"
    return {
        "version": normalise_cann(info.get("version")),
        "info_file": str(info_file) if info_file else None,
        "info": info,
        "set_env": str(set_envs[0]) if set_envs else None,
        "set_env_found": [str(p) for p in set_envs],
        "nnal_set_env": str(nnal) if nnal.is_file() else None,
        "home_path": environ.get("ASCEND_HOME_PATH"),
        "driver_version": driver.get("Version") or driver.get("version"),
    }


def collect_env_vars(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Relevant variables; any whose name looks secret is dropped entirely."""
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
        text = Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return match.group(1) if match else None


def _cpu_model() -> Optional[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
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


def collect_cann_under(root: os.PathLike, environ: Mapping[str, str], arch: Optional[str] = None) -> dict:
    """:func:`collect_cann` of the tree under ``root`` (a copy of a host's folders): the
    variables' toolkit paths and the home folder are read under it too, never outside."""
    root = Path(root)

    def inside(path: str) -> Path:
        try:
            return under(root, path)
        except OSError:  # a link loop: the plain path, which then reads as unreadable
            return root / path.lstrip("/")

    moved = {k: str(inside(environ[k])) for k in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if environ.get(k)}
    return collect_cann(inside("/usr/local/Ascend"), environ=moved, arch=arch, home=inside(str(Path.home())))


def _in_container(root: Path = Path("/")) -> bool:
    return container_evidence(root) is not None


def _first_file(paths) -> Optional[Path]:
    return next((p for p in paths if p.is_file()), None)


def _key_values(path: Path) -> dict[str, str]:
    """``key=value`` lines (install.info, version.info); {} when the file does not read."""
    try:
        return parse_version_info(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _accelerate_config() -> Optional[dict]:
    base = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface")
    default = Path(base) / "accelerate" / "default_config.yaml"
    path = Path(os.environ.get("ACCELERATE_CONFIG_FILE") or default)
    if not path.is_file():
        return None
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return {"path": str(path), "error": f"{type(exc).__name__}: {exc}"}
    if not isinstance(data, dict):
        return {"path": str(path)}
    return {"path": str(path), **{k: v for k, v in data.items() if not is_secret_name(str(k))}}
