"""One host's versions fingerprint: what must be the same on every node of a job (torch,
torch_npu, CANN, driver, firmware, transformers, deepspeed, python, the HCCL variables).
Cheap: package metadata and version files, nothing heavy imported."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.ascend_versions import collect_cann, read_driver_versions
from hyport_lib.utils.imports import package_version
from hyport_lib.utils.redact import filter_environ

#: The packages every node must have at the same version.
PACKAGES = ("torch", "torch_npu", "transformers", "deepspeed")
#: HCCL variables that name this host's own address: shown, never compared.
HOST_SPECIFIC = frozenset({"HCCL_IF_IP", "HCCL_IF_IPV6"})


def versions_fingerprint(environ: Optional[Mapping[str, str]] = None,
                         root: os.PathLike = Path("/")) -> dict[str, Optional[str]]:
    """``{"python": ..., "torch": ..., "torch_npu": ..., "transformers": ..., "deepspeed": ...,
    "CANN": ..., "driver": ..., "firmware": ..., "HCCL_...": ...}``: None where absent. The
    HCCL variables come through :func:`~hyport_lib.utils.redact.filter_environ` (a secret-named
    one is never included)."""
    environ = os.environ if environ is None else environ
    found: dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in PACKAGES:
        found[name] = package_version(name)
    npu = sys.modules.get("torch_npu")  # a source build has no metadata
    if found["torch_npu"] is None and npu is not None:
        found["torch_npu"] = getattr(npu, "__version__", None)
    cann = collect_cann(environ, root=root)
    drivers = read_driver_versions(Path(root), cann.version)
    found.update(CANN=cann.version, driver=drivers.driver or cann.driver_version, firmware=drivers.firmware)
    found.update(filter_environ(("HCCL_",), environ=environ))
    return found


def compared(fingerprint: Mapping[str, Optional[str]]) -> dict[str, Optional[str]]:
    """The entries two nodes must agree on (a host's own address left out)."""
    return {k: v for k, v in fingerprint.items() if k not in HOST_SPECIFIC}


def differences(reference: Mapping[str, Optional[str]],
                other: Mapping[str, Optional[str]]) -> list[tuple[str, Optional[str], Optional[str]]]:
    """``[(name, reference's, other's)]`` for every compared entry that differs, in the
    fingerprint's order (packages first, then CANN, driver, firmware, the HCCL variables)."""
    ours, theirs = compared(reference), compared(other)
    names = list(ours) + [k for k in theirs if k not in ours]
    return [(name, ours.get(name), theirs.get(name)) for name in names if ours.get(name) != theirs.get(name)]
