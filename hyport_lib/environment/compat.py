"""Which releases go together: each torch_npu release with its torch and CANN, and each
CANN release with the Ascend driver; the checks that judge an installation against them.

torch_npu X.Y.* works only with torch X.Y (anything else ends in ``undefined symbol``
inside ``libtorch_npu.so``); within X.Y a release is built against one torch patch release
and ships with one CANN release. :data:`TORCH_NPU_COMPAT` records this (source: the version
table of the Ascend Extension for PyTorch README, gitcode.com/Ascend/pytorch): add a row
when Ascend publishes a release; one missing is still judged by the version-number rule.
The driver is judged only where a CANN release note documents its pairing (the source,
and why ``compatible_version_*`` are shown but never judged: ``docs/containers.md``).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from packaging.version import InvalidVersion, Version

from hyport_lib.devices.ascend_versions import DriverVersions, normalise_cann
from hyport_lib.results import Check


class Pairing(NamedTuple):
    torch: str  # the torch release the torch_npu wheel is built against
    cann: str  # the CANN release it is published with


#: torch_npu release -> the torch and CANN releases it belongs with.
TORCH_NPU_COMPAT: dict[str, Pairing] = {
    # CANN 9.1.0
    "2.12.0": Pairing("2.12.0", "9.1.0"),
    "2.11.0": Pairing("2.11.0", "9.1.0"),
    "2.10.0.post4": Pairing("2.10.0", "9.1.0"),
    "2.9.0.post6": Pairing("2.9.0", "9.1.0"),
    "2.7.1.post8": Pairing("2.7.1", "9.1.0"),
    # CANN 9.0.0
    "2.10.0": Pairing("2.10.0", "9.0.0"),
    "2.9.0.post2": Pairing("2.9.0", "9.0.0"),
    "2.8.0.post4": Pairing("2.8.0", "9.0.0"),
    "2.7.1.post4": Pairing("2.7.1", "9.0.0"),
    # CANN 8.5.0
    "2.9.0": Pairing("2.9.0", "8.5.0"),
    "2.8.0.post2": Pairing("2.8.0", "8.5.0"),
    "2.7.1.post2": Pairing("2.7.1", "8.5.0"),
    "2.6.0.post5": Pairing("2.6.0", "8.5.0"),
    # CANN 8.3.RC1
    "2.8.0": Pairing("2.8.0", "8.3.RC1"),
    "2.7.1": Pairing("2.7.1", "8.3.RC1"),
    "2.6.0.post3": Pairing("2.6.0", "8.3.RC1"),
    "2.1.0.post17": Pairing("2.1.0", "8.3.RC1"),
    # CANN 8.2.RC1
    "2.6.0": Pairing("2.6.0", "8.2.RC1"),
    "2.5.1.post1": Pairing("2.5.1", "8.2.RC1"),
    "2.1.0.post13": Pairing("2.1.0", "8.2.RC1"),
    # CANN 8.1.RC1
    "2.5.1": Pairing("2.5.1", "8.1.RC1"),
    "2.4.0.post4": Pairing("2.4.0", "8.1.RC1"),
    "2.3.1.post6": Pairing("2.3.1", "8.1.RC1"),
    "2.1.0.post12": Pairing("2.1.0", "8.1.RC1"),
    # CANN 8.0.0
    "2.4.0.post2": Pairing("2.4.0", "8.0.0"),
    "2.3.1.post4": Pairing("2.3.1", "8.0.0"),
    "2.1.0.post10": Pairing("2.1.0", "8.0.0"),
    # CANN 8.0.RC3
    "2.4.0": Pairing("2.4.0", "8.0.RC3"),
    "2.3.1.post2": Pairing("2.3.1", "8.0.RC3"),
    "2.1.0.post8": Pairing("2.1.0", "8.0.RC3"),
    # CANN 8.0.RC2
    "2.3.1": Pairing("2.3.1", "8.0.RC2"),
    "2.2.0.post2": Pairing("2.2.0", "8.0.RC2"),
    "2.1.0.post6": Pairing("2.1.0", "8.0.RC2"),
    "1.11.0.post14": Pairing("1.11.0", "8.0.RC2"),
}

#: CANN release -> the Ascend HDK releases (driver ``major.minor``) its release notes pair it with.
HDK_FOR_CANN: dict[str, tuple[str, ...]] = {
    "8.5.0": ("25.5", "25.3", "25.2", "25.0"),
}
HDK_SOURCE = ("CANN 8.5.0 release notes, 'Mapping Between CANN and Driver Versions' "
              "(hiascend.com canncommercial/850 releasenote_0000)")


def _version(text: str, what: str) -> Version:
    try:
        return Version(str(text).strip())
    except InvalidVersion as exc:
        raise ValueError(f"{what}={text!r} is not a version number") from exc


def _release(version: Version, n: int = 3) -> str:
    parts = list(version.release[:n]) + [0] * (n - len(version.release[:n]))
    return ".".join(str(p) for p in parts)


def _table_key(torch_npu: Version) -> str:
    """``2.8.0.post2+git1a2b`` and ``2.8.0post2`` both look up ``2.8.0.post2``."""
    key = _release(torch_npu)
    if torch_npu.post is not None:
        key += f".post{torch_npu.post}"
    return key


def releases_for_torch(torch_version: str) -> list[tuple[str, Pairing]]:
    """torch_npu releases in the table for torch's major.minor, newest CANN first."""
    minor = _release(_version(torch_version, "torch_version"), 2)
    return [(k, p) for k, p in TORCH_NPU_COMPAT.items()
            if _release(Version(p.torch), 2) == minor]


def _suggest(torch_version: Version) -> str:
    rows = releases_for_torch(str(torch_version))
    if not rows:
        return ""
    listed = ", ".join(f"{k} (CANN {p.cann})" for k, p in rows[:3])
    return f"; for torch {_release(torch_version, 2)} the table lists torch_npu {listed}"


def check_torch_npu_compat(torch_version: Optional[str], torch_npu_version: Optional[str]) -> Check:
    """A torch / torch_npu pair: FAIL when major.minor differ (the wheel cannot load), WARN
    when the patch release is not the one torch_npu is built for."""
    name = "torch_npu_compat"
    if not torch_npu_version:
        return Check(name, "SKIP", "torch_npu is not installed")
    if not torch_version:
        return Check(name, "FAIL", f"torch_npu {torch_npu_version} is installed but torch is not")
    torch_v = _version(torch_version, "torch_version")
    npu_v = _version(torch_npu_version, "torch_npu_version")
    pairing = TORCH_NPU_COMPAT.get(_table_key(npu_v))
    expected = pairing.torch if pairing else _release(npu_v)
    pair = f"torch {torch_version} with torch_npu {torch_npu_version}"
    if _release(torch_v, 2) != _release(npu_v, 2):
        return Check(name, "FAIL", f"{pair}: torch_npu {_release(npu_v, 2)}.* needs torch "
                                   f"{_release(npu_v, 2)} (undefined-symbol errors otherwise); "
                                   f"install torch=={expected}{_suggest(torch_v)}")
    if _release(torch_v) != expected:
        return Check(name, "WARN", f"{pair}: this torch_npu is built for torch {expected}; "
                                   f"install torch=={expected}")
    where = f" (CANN {pairing.cann})" if pairing else " (release not in hyport's table; matched by number)"
    return Check(name, "PASS", f"{pair}: built for each other{where}")


def check_cann_compat(torch_npu_version: Optional[str], cann_version: Optional[str]) -> Check:
    """The installed CANN against the one the torch_npu release is published with: WARN (not
    FAIL) on a difference, as newer CANN releases usually keep older torch_npu working."""
    name = "cann_compat"
    if not torch_npu_version:
        return Check(name, "SKIP", "torch_npu is not installed")
    cann = normalise_cann(cann_version)
    if not cann:
        return Check(name, "SKIP", f"CANN version unknown (torch_npu {torch_npu_version})")
    pairing = TORCH_NPU_COMPAT.get(_table_key(_version(torch_npu_version, "torch_npu_version")))
    if pairing is None:
        return Check(name, "SKIP", f"torch_npu {torch_npu_version} is not in hyport's table "
                                   f"(CANN {cann} installed)")
    if cann.upper().startswith(pairing.cann.upper()):
        return Check(name, "PASS", f"CANN {cann} is the release torch_npu {torch_npu_version} ships with")
    return Check(name, "WARN", f"torch_npu {torch_npu_version} is published for CANN {pairing.cann}, "
                               f"installed CANN {cann}")


def hdk_release(driver_version: Optional[str]) -> Optional[str]:
    """``25.0.rc1.1`` / ``25.3.RC1`` / ``24.1.0`` -> ``25.0`` / ``25.3`` / ``24.1``; None
    when the text does not start with two numbers."""
    match = re.match(r"\s*(\d+)\.(\d+)", driver_version or "")
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


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
    release = ".".join(versions.cann.split(".")[:3])  # 8.5.0.1 / 8.5.0.alpha001: the release 8.5.0
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
