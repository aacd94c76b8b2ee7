"""The Ascend stack's versions as its own files say them: CANN (``ascend_toolkit_install.info``),
the driver's and firmware's ``version.info``. Read under a root (this machine's ``/`` or a copied
tree, :mod:`hyport_lib.utils.file_tree`); stage 01 judges them, the nodes of a job compare them.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.utils.file_tree import MAX_VERSION_BYTES, is_machine_root, read_optional, regular_file_in_tree, tree_file
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import is_secret_name, scrub_secret_shapes

DRIVER_VERSION_FILE = "usr/local/Ascend/driver/version.info"
FIRMWARE_VERSION_FILE = "usr/local/Ascend/firmware/version.info"
DEFAULT_ASCEND_ROOT = Path("/usr/local/Ascend")


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
