"""The Ascend driver, firmware and CANN versions of a host (or a copy of its folders), read
under a ``root`` from the driver's and firmware's ``version.info`` (``Version=24.1.rc3``,
``compatible_version_fw=[7.0.0,7.5.99]`` ...) and the CANN install info, and the one
compatibility rule Huawei documents between them.

The rule (see ``docs/containers.md``): the release notes of CANN 8.5.0,
"CANN Version Mapping / Mapping Between CANN and Driver Versions"
(hiascend.com/document/detail/en/canncommercial/850/releasenote/releasenote_0000.html),
pair CANN 8.5.0 with Ascend HDK 25.5.X, 25.3.X, 25.2.X and 25.0.X. The Ascend HDK release
is the driver's ``Version`` (``25.0.rc1.1`` belongs to HDK 25.0). Other CANN releases are
not in :data:`HDK_FOR_CANN`: their versions are reported, never judged.

The ``compatible_version_fw`` / ``compatible_version_drv`` fields are reported as written,
not judged: their meaning is not documented, and Huawei's own example of the files (a
24.1.rc1 driver beside a firmware whose ``compatible_version_drv`` lists only 23.0 releases)
shows that a plain reading of them would call a working host broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hyport_lib.results import Check
from hyport_lib.environment.compat import normalise_cann
from hyport_lib.environment.tree_files import MAX_VERSION_BYTES, read_optional, tree_file
from hyport_lib.utils.printable import printable
from hyport_lib.utils.redact import is_secret_name, scrub_secret_shapes

DRIVER_VERSION_FILE = "usr/local/Ascend/driver/version.info"
FIRMWARE_VERSION_FILE = "usr/local/Ascend/firmware/version.info"

#: CANN release -> the Ascend HDK releases (driver ``major.minor``) its release notes pair it with.
HDK_FOR_CANN: dict[str, tuple[str, ...]] = {
    "8.5.0": ("25.5", "25.3", "25.2", "25.0"),
}
HDK_SOURCE = ("CANN 8.5.0 release notes, 'Mapping Between CANN and Driver Versions' "
              "(hiascend.com canncommercial/850 releasenote_0000)")


@dataclass
class DriverVersions:
    """What the version files of one tree say (None: the file is absent or has no such key);
    ``errors``: ``PATH: cannot be read: WHY`` for each version file (or CANN info) present
    but not read (unreadable, a FIFO or device node, too large, a link loop)."""

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
    """``key=value`` lines of a ``version.info``; blank, comment and secret-named lines dropped,
    the values shown without terminal escapes or secret-shaped text (a tree's file may hold
    either, and the values go into the report as they are)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and not key.startswith("#") and not is_secret_name(key):
            values[key] = printable(scrub_secret_shapes(value.strip().strip('"')))
    return values


def read_version_file(root: Path, path: str, refused: list[str]) -> tuple[Optional[str], dict[str, str]]:
    """``(file read, its key=value pairs)`` of ``path`` under ``root``, read bounded (a
    version file is a few dozen lines); ``(None, {})`` when it is absent, or refused (then
    ``refused`` gets the one line saying why)."""
    text = read_optional(root, path, MAX_VERSION_BYTES, refused)
    if text is None:
        return None, {}
    return str(tree_file(root, path)), parse_version_info(text)


def read_driver_versions(root: Path, cann_version: Optional[str] = None,
                         cann_refused: tuple[str, ...] = ()) -> DriverVersions:
    """The driver and firmware ``version.info`` files under ``root``, and the CANN release
    found there (:func:`hyport_lib.environment.facts.collect_cann`); the CANN files present
    but not read (``cann_refused``) are kept in ``errors``: without them the pairing cannot
    be judged."""
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


def hdk_release(driver_version: Optional[str]) -> Optional[str]:
    """``25.0.rc1.1`` / ``25.3.RC1`` / ``24.1.0`` -> ``25.0`` / ``25.3`` / ``24.1``; None
    when the text does not start with two numbers."""
    match = re.match(r"\s*(\d+)\.(\d+)", driver_version or "")
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def _cann_release(cann: str) -> str:
    """``8.5.0.1`` / ``8.5.0.alpha001`` -> ``8.5.0``: the release a mapping row names."""
    return ".".join(cann.split(".")[:3])


def check_driver_cann(versions: DriverVersions, *, applies: bool, where: str = "") -> Check:
    """CANN against the driver, where Huawei documents the pairing; otherwise the versions.
    SKIP unless it ``applies`` (an Ascend backend or host); ``where``: `` under TREE`` for a
    copied tree."""
    name = "driver_cann_compat"
    seen = versions.describe()
    if not applies:
        return Check(name, "SKIP", f"not an Ascend host ({seen}{where})")
    if versions.errors:
        return Check(name, "WARN", f"{'; '.join(versions.errors)} ({seen}{where}: the pairing is not judged)")
    if not versions.driver or not versions.cann:
        if versions.driver_file and not versions.driver:
            missing = f"{versions.driver_file} has no Version= line"
        else:
            missing = "no driver version.info" if not versions.driver else "no CANN install info"
        return Check(name, "SKIP", f"{seen}{where}: {missing}, nothing to pair")
    release = _cann_release(versions.cann)
    documented = HDK_FOR_CANN.get(release)
    hdk = hdk_release(versions.driver)
    if documented is None:
        return Check(name, "SKIP", f"{seen}{where}: hyport knows no vendor-documented driver "
                                   f"pairing for CANN {versions.cann}; versions reported, not judged")
    wanted = ", ".join(f"{r}.X" for r in documented)
    if hdk in documented:
        return Check(name, "PASS", f"{seen}{where}: driver {versions.driver} is Ascend HDK {hdk}.X, "
                                   f"which CANN {release} pairs with ({HDK_SOURCE})")
    oldest = min(documented, key=_release_key)
    if hdk is not None and _release_key(hdk) < _release_key(oldest):
        return Check(name, "FAIL", f"{seen}{where}: CANN {release} pairs only with Ascend HDK {wanted} "
                                   f"({HDK_SOURCE}); driver {versions.driver} is older than all of them: "
                                   f"install a listed driver on the host, or use an image built for a "
                                   f"CANN that supports this driver")
    # A release note lists the drivers that existed when it was written; a later driver is
    # paired with this CANN by later notes, if at all, which hyport does not hold.
    return Check(name, "WARN", f"{seen}{where}: CANN {release}'s notes list Ascend HDK {wanted} "
                               f"({HDK_SOURCE}); driver {versions.driver} is not among them and not "
                               f"older than them: check the pairing in the driver's own release notes")


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))
