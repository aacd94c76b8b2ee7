"""One host's versions fingerprint: what must be the same on every node of a job (torch,
torch_npu, CANN, driver, firmware, transformers, deepspeed, python, the HCCL variables), and
which HCCL variables are each host's own: the one list the handshake and ``hyport env
--compare`` both read, so that the two never disagree.
Cheap: package metadata and version files, nothing heavy imported."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.ascend_versions import collect_cann, read_driver_versions
from hyport_lib.utils.imports import package_version
from hyport_lib.utils.redact import filter_environ, scrub_text

#: The packages every node must have at the same version.
PACKAGES = ("torch", "torch_npu", "transformers", "deepspeed", "accelerate")
#: HCCL variables that name a host's own interface, address, ports or whitelist file: each host
#: has its own value (shown, never compared).
HCCL_PER_HOST = ("HCCL_SOCKET_IFNAME", "HCCL_IF_IP", "HCCL_IF_IPV6", "HCCL_IF_BASE_PORT", "HCCL_WHITELIST_FILE",
                 "HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE")
#: Set on one node and not another, or set differently, these make ranks disagree on buffers,
#: algorithms, address families or timeouts (a node that gives up first is blamed). Always shown
#: by ``hyport env --compare``; any other HCCL variable either host sets must match as well.
HCCL_MUST_MATCH = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_BUFFSIZE", "HCCL_ALGO",
                   "HCCL_DETERMINISTIC", "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE",
                   "HCCL_SOCKET_FAMILY", "HCCL_OP_EXPANSION_MODE")


def must_match(name: str) -> bool:
    """Must every node have the same value of ``name`` (a fingerprint entry or a variable)?"""
    return name not in HCCL_PER_HOST


def versions_fingerprint(environ: Optional[Mapping[str, str]] = None,
                         root: os.PathLike = Path("/")) -> dict[str, Optional[str]]:
    """``{"python": ..., "torch": ..., "torch_npu": ..., "transformers": ..., "deepspeed": ...,
    "CANN": ..., "driver": ..., "firmware": ..., "HCCL_...": ...}``: None where absent. The
    HCCL variables come through :func:`~hyport_lib.utils.redact.filter_environ` (a secret-named
    one is never included) and their values are scrubbed of secret values (the fingerprint goes
    into the store and into each node's exit file)."""
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
    secrets_of = {**os.environ, **environ}
    found.update({k: scrub_text(v, secrets_of) for k, v in filter_environ(("HCCL_",), environ=environ).items()})
    return found


def compared(fingerprint: Mapping[str, Optional[str]]) -> dict[str, Optional[str]]:
    """The entries two nodes must agree on (a host's own interface and address left out)."""
    return {k: v for k, v in fingerprint.items() if must_match(k)}


def differences(reference: Mapping[str, Optional[str]],
                other: Mapping[str, Optional[str]]) -> list[tuple[str, Optional[str], Optional[str]]]:
    """``[(name, reference's, other's)]`` for every compared entry that differs, in the
    fingerprint's order (packages first, then CANN, driver, firmware, the HCCL variables)."""
    ours, theirs = compared(reference), compared(other)
    names = list(ours) + [k for k in theirs if k not in ours]
    return [(name, ours.get(name), theirs.get(name)) for name in names if ours.get(name) != theirs.get(name)]
