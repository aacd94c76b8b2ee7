"""Is this an Ascend container started with everything its jobs need? Device nodes, driver
mounts and /dev/shm, judged against the ``docker run`` line Huawei's cloud manuals give
(``docs/containers.md``)::

    docker run -itd --net=bridge --device=/dev/davinci0 ... --device=/dev/davinci7 \\
      --device=/dev/davinci_manager --device=/dev/devmm_svm --device=/dev/hisi_hdc \\
      --shm-size=256g -v /usr/local/dcmi:/usr/local/dcmi \\
      -v /usr/local/Ascend/driver:/usr/local/Ascend/driver -v /var/log/npu/:/usr/slog \\
      -v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi ...

A missing node or mount shows up much later as an opaque torch_npu or HCCL error; here
each missing item is named with the one flag that adds it.

Every path is read under a ``root`` (``/``: this machine), so a copy of a host's folders
can be judged offline. Under ``/`` a device node must be a character device; under any
other root (a copied or test tree, where nodes cannot be made) any file stands for one.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.host_memory import check_container_shm, shm_size_flag, shm_size_from_mounts
from hyport_lib.devices.records import Check, worst_verdict
from hyport_lib.devices.visible_devices import parse_visible_devices
from hyport_lib.environment.driver_versions import DriverVersions

#: Files whose presence says "container", relative to the root.
CONTAINER_MARKERS = (".dockerenv", "run/.containerenv")
#: Words in /proc/1/cgroup that name a container runtime (cgroup v1 paths).
CGROUP_WORDS = ("docker", "kubepods", "containerd", "lxc", "libpod")


@dataclass(frozen=True)
class Item:
    """One thing the container needs: where, the flag that adds it, how bad its absence is.

    Attributes:
        path: the path inside the container (``/dev/davinci3``, ``/usr/local/dcmi``).
        flag: the ``docker run`` flag that adds it.
        need: what is lost without it, for the reason.
        missing_verdict: FAIL when jobs cannot start without it, WARN when a tool is lost.
        node: a device node (a character device under ``/``) rather than a file or folder.
    """

    path: str
    flag: str
    need: str
    missing_verdict: str = "FAIL"
    node: bool = False


def card_node(card: int) -> Item:
    path = f"/dev/davinci{card}"
    return Item(path, f"--device={path}", f"card {card}", "FAIL", node=True)


#: The nodes every Ascend container needs besides one per card.
CONTROL_NODES = (
    Item("/dev/davinci_manager", "--device=/dev/davinci_manager", "the device manager", node=True),
    Item("/dev/devmm_svm", "--device=/dev/devmm_svm", "shared virtual memory", node=True),
    Item("/dev/hisi_hdc", "--device=/dev/hisi_hdc", "host-device channel", node=True),
)
DRIVER = Item("/usr/local/Ascend/driver", "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver",
              "the driver's libraries")
DRIVER_VERSION = Item("/usr/local/Ascend/driver/version.info", DRIVER.flag,
                      "the driver's version file (a partial driver mount?)", "WARN")
NPU_SMI = Item("/usr/local/sbin/npu-smi", "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi",
               "npu-smi (the card listing and the busy-card check)", "WARN")
#: The folders and files the manual mounts, in its order.
MOUNTS = (
    Item("/usr/local/dcmi", "-v /usr/local/dcmi:/usr/local/dcmi", "the DCMI library npu-smi uses", "WARN"),
    DRIVER,
    DRIVER_VERSION,
    Item("/usr/slog", "-v /var/log/npu/:/usr/slog", "device logs kept on the host", "WARN"),
    NPU_SMI,
)


def is_machine_root(root: Path) -> bool:
    """True when ``root`` is this machine's own ``/`` (device nodes must then be real)."""
    return Path(root).resolve() == Path("/")


def under(root: Path, path: str) -> Path:
    """``path`` (absolute, as inside the container) read under ``root``."""
    return Path(root) / path.lstrip("/")


def container_evidence(root: Path) -> Optional[str]:
    """What says ``root`` is a container: a marker file, or a runtime named in /proc/1/cgroup;
    None when nothing does (cgroup v2 hosts name no runtime there, the markers still do)."""
    for marker in CONTAINER_MARKERS:
        if under(root, marker).exists():
            return f"/{marker}"
    try:
        cgroup = under(root, "proc/1/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    word = next((w for w in CGROUP_WORDS if w in cgroup), None)
    return f"/proc/1/cgroup names {word}" if word else None


def ascend_signs(root: Path) -> list[str]:
    """Paths under ``root`` that show Ascend software or devices (empty on a plain host)."""
    signs = [p for p in ("/usr/local/Ascend", "/dev/davinci_manager") if under(root, p).exists()]
    dev = under(root, "dev")
    if dev.is_dir():
        signs += sorted(f"/dev/{p.name}" for p in dev.glob("davinci[0-9]*"))[:1]
    return signs


def item_state(root: Path, item: Item) -> Optional[str]:
    """None when ``item`` is in place under ``root``; otherwise what is wrong with it."""
    path = under(root, item.path)
    if item.node and is_machine_root(root):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return "missing"
        except OSError as exc:
            return f"cannot be read ({exc.strerror})"
        return None if stat.S_ISCHR(mode) else "not a character device"
    return None if path.exists() else "missing"


def parse_card_list(value: str) -> list[int]:
    """``0-3,6`` -> ``[0, 1, 2, 3, 6]`` (ASCEND_VISIBLE_DEVICES, read by the Ascend Docker
    Runtime, allows ranges).

    Raises:
        ValueError: naming the entry that is neither a number nor a range.
    """
    cards: list[int] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        low, dash, high = entry.partition("-")
        if low.isdigit() and (not dash or high.isdigit()):
            span = range(int(low), int(high) + 1) if dash else [int(low)]
            cards += [c for c in span if c not in cards]
        else:
            raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a card number "
                             f"or a range like 0-3")
    return cards


def needed_cards(num_cards: Optional[int], environ: Mapping[str, str],
                 listed: Optional[list[int]] = None) -> tuple[list[int], str]:
    """The ``/dev/davinciN`` numbers the next stages' cards need, and where they came from.

    ``ASCEND_VISIBLE_DEVICES`` names host cards (the Ascend Docker Runtime mounts them with
    their numbers); ``ASCEND_RT_VISIBLE_DEVICES`` picks positions among the cards the
    runtime sees (the listing's, or ``0..`` when no listing was read); without either, the
    listing's cards, else ``0..num_cards-1``. ``num_cards`` keeps the first ones.

    Args:
        num_cards: cards the next stages will use; None: all of them.
        environ: the environment holding the visible-devices variables.
        listed: card numbers npu-smi listed (None: no listing was read).

    Raises:
        ValueError: ``ASCEND_VISIBLE_DEVICES`` is not a list of numbers and ranges.
    """
    host_cards, host_var = None, environ.get("ASCEND_VISIBLE_DEVICES", "").strip()
    if host_var:
        host_cards = parse_card_list(host_var)
    runtime_var = environ.get("ASCEND_RT_VISIBLE_DEVICES")
    seen = host_cards if host_cards is not None else listed
    if runtime_var is not None and runtime_var.strip():
        positions = parse_visible_devices(runtime_var, "ASCEND_RT_VISIBLE_DEVICES")
        cards = [seen[p] for p in positions if p < len(seen)] if seen is not None else positions
        source = f"ASCEND_RT_VISIBLE_DEVICES={runtime_var}"
        if host_cards is not None:
            source += f" within ASCEND_VISIBLE_DEVICES={host_var}"
        elif seen is None:
            source += " (no listing: positions taken as card numbers)"
    elif host_cards is not None:
        cards, source = host_cards, f"ASCEND_VISIBLE_DEVICES={host_var}"
    elif listed:
        cards, source = list(listed), "the cards npu-smi lists"
    elif num_cards:
        cards, source = list(range(num_cards)), f"num_cards={num_cards}"
    else:
        return [], "no card count known"
    if num_cards and len(cards) > num_cards:
        cards, source = cards[:num_cards], f"the first {num_cards} of {source}"
    return cards, source


@dataclass
class ContainerFindings:
    """What the container checks found; ``to_dict`` is the report's ``container`` section.

    Attributes:
        root: the filesystem root read.
        in_container: a container marker was found under it.
        evidence: which one (``/.dockerenv``...); None outside a container.
        judged: the node and mount checks ran (a container on an Ascend backend or tree).
        cards / cards_from: the card nodes required, and why those.
        missing: ``{"path", "problem", "flag", "verdict"}`` per item not in place.
        flags: the ``docker run`` flags that add every missing item, each once.
        shm_total_gb: /dev/shm size read (None: unknown or not read).
        versions: the driver, firmware and CANN versions read under ``root``.
        checks: the checks, for the stage's list.
    """

    root: str
    in_container: bool
    evidence: Optional[str]
    judged: bool
    versions: DriverVersions
    cards: list[int] = field(default_factory=list)
    cards_from: str = ""
    missing: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    shm_total_gb: Optional[float] = None
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("checks")
        data["versions"] = self.versions.to_dict()
        return data


def _judge_items(name: str, root: Path, items: list[Item], where: str,
                 missing: list[dict]) -> Check:
    """One check over ``items``: PASS when all are in place, else every gap with its flag."""
    gaps = []
    for item in items:
        problem = item_state(root, item)
        if problem is not None:
            gaps.append((item, problem))
            missing.append({"path": item.path, "problem": problem, "flag": item.flag,
                            "verdict": item.missing_verdict})
    if not gaps:
        return Check(name, "PASS", f"{', '.join(i.path for i in items)} in place{where}")
    verdict = worst_verdict(i.missing_verdict for i, _ in gaps)
    detail = "; ".join(f"{i.path} {problem} ({i.need}): add {i.flag}" for i, problem in gaps)
    return Check(name, verdict, f"{len(gaps)} of {len(items)} missing{where}: {detail}")


def _mount_items(root: Path) -> list[Item]:
    """The mounts to judge: version.info only when the driver folder itself is there (a
    missing folder is one gap, not two)."""
    return [i for i in MOUNTS if i is not DRIVER_VERSION or under(root, DRIVER.path).is_dir()]


def listed_cards(listing) -> Optional[list[int]]:
    """The card numbers an npu-smi listing shows (its NPU ids when each NPU has one chip,
    else the chips' order); None when the cards were not listed by npu-smi, or the listing
    is not trusted (a table cut short names too few cards)."""
    if getattr(listing, "source", None) != "npu-smi" or not listing.devices or getattr(listing, "distrust", None):
        return None
    ids = [d.npu_id for d in listing.devices]
    if None in ids or len(set(ids)) != len(ids):
        return [d.index for d in listing.devices]
    return ids


def present_card_nodes(root: Path) -> list[int]:
    """The N of each ``/dev/davinciN`` under ``root``, sorted."""
    dev = under(root, "dev")
    if not dev.is_dir():
        return []
    numbers = (p.name[len("davinci"):] for p in dev.glob("davinci[0-9]*"))
    return sorted(int(n) for n in numbers if n.isdigit())


def check_container(root: Path, *, kind: str, requested: str, num_cards: Optional[int],
                    environ: Mapping[str, str], listed: Optional[list[int]],
                    versions: DriverVersions, shm_gb_per_card: float,
                    machine_shm_gb: Optional[float] = None) -> ContainerFindings:
    """The container checks of the tree under ``root``.

    Args:
        root: the filesystem root to read (``/``: this machine).
        kind: the backend kind judged; requested: the kind asked for.
        num_cards: cards the next stages will use; None: all.
        environ: the environment with the visible-devices variables.
        listed: card numbers npu-smi listed; None when no listing was read.
        versions: the driver / firmware / CANN versions read under ``root``.
        shm_gb_per_card: /dev/shm each card's rank needs.
        machine_shm_gb: this machine's /dev/shm size, judged by ``dev_shm`` when root is ``/``.
    """
    root = Path(root)
    machine = is_machine_root(root)
    where = "" if machine else f" under {root}"
    evidence = container_evidence(root)
    signs = ascend_signs(root)
    ascend_backend = "npu" in (kind, requested)
    findings = ContainerFindings(str(root), evidence is not None, evidence, False, versions)
    names = ("container_devices", "container_mounts", "container_shm")
    if evidence is None:
        why = (f"not a container (no /.dockerenv, /run/.containerenv or runtime in /proc/1/cgroup"
               f"{where}): the docker run checks do not apply")
        findings.checks = [Check(n, "SKIP", why) for n in names]
        return findings
    if not ascend_backend and not signs:
        why = (f"a container ({evidence}{where}) with no Ascend device or /usr/local/Ascend: "
               f"nothing to check for the {kind} backend")
        findings.checks = [Check(n, "SKIP", why) for n in names]
        return findings
    findings.judged = True
    bad_variable = None
    try:
        cards, source = needed_cards(num_cards, environ, listed)
    except ValueError as exc:
        cards, source, bad_variable = [], "", str(exc)
    if not cards:  # no count known: the nodes present, and at least card 0
        cards = present_card_nodes(root) or [0]
        source = (f"{bad_variable}; judged: " if bad_variable else "") + \
            "no card count known, so the card nodes present (at least one)"
    findings.cards, findings.cards_from = cards, source
    devices = _judge_items("container_devices", root, [card_node(c) for c in cards] + list(CONTROL_NODES),
                           where, findings.missing)
    verdict = worst_verdict([devices.verdict, "WARN" if bad_variable else "PASS"])
    devices = Check(devices.name, verdict, f"{devices.reason} (cards from {source})")
    mounts = _judge_items("container_mounts", root, _mount_items(root), where, findings.missing)
    has_driver, has_smi = (item_state(root, i) is None for i in (DRIVER, NPU_SMI))
    if has_driver != has_smi:
        mounts = Check(mounts.name, mounts.verdict, f"{mounts.reason}; the manual mounts the driver "
                                                    f"and npu-smi together")
    per_card = shm_gb_per_card
    count = len(cards)
    if machine:
        findings.shm_total_gb = machine_shm_gb
        shm = Check("container_shm", "SKIP", "this machine's /dev/shm is judged by the dev_shm check")
        if machine_shm_gb is not None and machine_shm_gb < per_card * count:
            findings.flags.append(shm_size_flag(per_card * count))
    else:
        try:
            mounts_text = under(root, "proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            mounts_text = ""
        findings.shm_total_gb = shm_size_from_mounts(mounts_text)
        shm = check_container_shm(findings.shm_total_gb, count, per_card, f" in {root}")
        if shm.verdict == "WARN":
            findings.flags.append(shm_size_flag(per_card * count))
    if not ascend_backend:
        note = f" (judged for NPU use: {signs[0]} is there, though the backend is {kind})"
        devices, mounts = (Check(c.name, c.verdict, c.reason + note) for c in (devices, mounts))
    findings.flags = list(dict.fromkeys([m["flag"] for m in findings.missing] + findings.flags))
    findings.checks = [devices, mounts, shm]
    return findings
