"""Is this an Ascend container started with everything its jobs need? Device nodes, driver
mounts and /dev/shm, judged against the ``docker run`` line of Huawei's cloud manuals;
``docs/containers.md`` says what is checked, which cards are needed, and why. Every path is
read under a ``root`` (``/``: this machine), so a copy of a host's folders can be judged
offline; under any other root (where nodes cannot be made) any file stands for a node.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from hyport_lib.devices.host_memory import check_container_shm, shm_size_flag, shm_size_from_mounts
from hyport_lib.devices.visible_devices import parse_visible_devices
from hyport_lib.results import Check, worst_verdict
from hyport_lib.devices.ascend_versions import DriverVersions
from hyport_lib.environment.facts import container_evidence
from hyport_lib.utils.file_tree import MAX_PROC_BYTES, is_machine_root, present, read_optional, under
from hyport_lib.utils.bounded_files import kind_of
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted


@dataclass(frozen=True)
class Item:
    """One thing the container needs: its path inside the container, the ``docker run``
    flag that adds it, what is lost without it, and how bad that is."""

    path: str
    flag: str
    need: str
    missing_verdict: str = "FAIL"
    #: ``node`` (a character device under ``/``), ``dir`` or ``file``: docker turns a ``-v``
    #: source missing on the host into an empty folder, so a folder where a file belongs is a gap.
    kind: str = "dir"
    alternatives: tuple[str, ...] = ()  # other paths where the same thing is accepted
    nonempty: bool = False  # an empty folder is a gap (a mount whose source was missing)


def card_node(card: int, virtual: bool = False) -> Item:
    """``/dev/davinciN``; for a vNPU the runtime mounts the host's ``/dev/vdavinciN`` there
    (a privileged container shows it under its host name, accepted too)."""
    path = f"/dev/davinci{card}"
    if virtual:
        return Item(path, f"--device=/dev/vdavinci{card}:{path}", f"vNPU {card}", kind="node",
                    alternatives=(f"/dev/vdavinci{card}",))
    return Item(path, f"--device={path}", f"card {card}", kind="node")


#: The nodes every Ascend container needs besides one per card.
CONTROL_NODES = (
    Item("/dev/davinci_manager", "--device=/dev/davinci_manager", "the device manager", kind="node"),
    Item("/dev/devmm_svm", "--device=/dev/devmm_svm", "shared virtual memory", kind="node"),
    Item("/dev/hisi_hdc", "--device=/dev/hisi_hdc", "host-device channel", kind="node"),
)
DRIVER_FLAG = "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver"
DRIVER = Item("/usr/local/Ascend/driver", DRIVER_FLAG, "the driver", nonempty=True)
#: Judged only when the driver folder is in place (a missing folder is one gap, not three).
DRIVER_LIB64 = Item("/usr/local/Ascend/driver/lib64", DRIVER_FLAG,
                    "the driver's libraries (libascend_hal.so): torch_npu cannot load without them",
                    nonempty=True)  # mounted on its own (vLLM Ascend's line), a missing source is empty
DRIVER_VERSION = Item("/usr/local/Ascend/driver/version.info", DRIVER_FLAG,
                      "the driver's version file (a partial driver mount?)", "WARN", kind="file")
NPU_SMI = Item("/usr/local/sbin/npu-smi", "-v /usr/local/sbin/npu-smi:/usr/local/sbin/npu-smi",
               "npu-smi (the card listing and the busy-card check)", "WARN", kind="file",
               alternatives=("/usr/local/bin/npu-smi",))
#: The folders and files the manual mounts, in its order.
MOUNTS = (
    Item("/usr/local/dcmi", "-v /usr/local/dcmi:/usr/local/dcmi", "the DCMI library npu-smi uses",
         "WARN", nonempty=True),
    DRIVER,
    DRIVER_LIB64,
    DRIVER_VERSION,
    Item("/usr/slog", "-v /var/log/npu/:/usr/slog", "device logs kept on the host", "WARN"),
    NPU_SMI,
)
#: What docker leaves where a ``-v`` source did not exist on the host.
EMPTY_MOUNT = "docker makes a -v source missing on the host into an empty folder"
#: The highest right end of a range the Ascend Docker Runtime accepts (``maxDevice``).
MAX_RANGE_END = 128
#: ``AscendXXX-Y`` as the runtime matches it.
CHIP_NAME = re.compile(r"^Ascend(910|310|310B|310P)-(\d+)$")
#: Values of ASCEND_VISIBLE_DEVICES with which the runtime mounts no NPU.
NO_NPU_VALUES = ("", "void")


def ascend_signs(root: Path) -> list[str]:
    """Paths under ``root`` that show Ascend software or devices."""
    signs = [p for p in ("/usr/local/Ascend", "/dev/davinci_manager") if present(root, p)]
    if present(root, "/dev"):
        signs += sorted(printable(f"/dev/{p.name}") for p in under(root, "dev").glob("davinci[0-9]*"))[:1]
    return signs


def _path_problem(root: Path, path: str, item: Item) -> Optional[str]:
    """What is wrong with ``path`` under ``root`` for ``item``; None when nothing is."""
    try:
        target = under(root, path)
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing (a folder above it is a file)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if item.kind == "node":
        # a copied or test tree cannot hold device nodes: any path stands for one there
        return None if stat.S_ISCHR(mode) or not is_machine_root(root) else "not a character device"
    if item.kind == "file":
        if stat.S_ISDIR(mode):
            return f"a folder, not a file ({EMPTY_MOUNT})"
        # a FIFO or a device node copied in its place is not the tool or version file
        return None if stat.S_ISREG(mode) else f"{kind_of(mode)}, not a regular file"
    if not stat.S_ISDIR(mode):
        return "not a folder"
    if item.nonempty:
        try:
            empty = next(target.iterdir(), None) is None
        except OSError as exc:
            return f"cannot be read ({exc.strerror})"
        if empty:
            return f"an empty folder ({EMPTY_MOUNT}: is it installed at {path} on the host?)"
    return None


def locate(root: Path, item: Item) -> tuple[Optional[str], Optional[str]]:
    """``(path found, None)`` when ``item`` (or one of its alternatives) is in place under
    ``root``; ``(None, problem)`` with the problem of its main path otherwise."""
    problem = _path_problem(root, item.path, item)
    if problem is None:
        return item.path, None
    for other in item.alternatives:
        if _path_problem(root, other, item) is None:
            return other, None
    return None, problem


@dataclass
class ContainerFindings:
    """The report's ``container`` section; ``judged``: the node and mount checks ran (a
    container on an Ascend backend or tree); ``missing``: ``{"path", "problem", "flag",
    "verdict"}`` per item not in place; ``flags``: the flags that add them, each once."""

    root: str
    in_container: bool
    evidence: Optional[str]
    judged: bool
    versions: DriverVersions
    cards: list[int] = field(default_factory=list)
    cards_from: str = ""
    virtual: bool = False
    missing: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    shm_total_gb: Optional[float] = None
    refused: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("checks")
        return data


def _judge_items(name: str, root: Path, items: list[Item], where: str, missing: list[dict],
                 more_gaps: list[tuple[Item, str]] = ()) -> Check:
    """PASS, or every gap with its flag."""
    gaps, elsewhere = [], []
    for item in items:
        found, problem = locate(root, item)
        if problem is not None:
            gaps.append((item, problem))
        elif found != item.path:
            elsewhere.append(f"{item.path.rsplit('/', 1)[-1]} found at {found}")
    gaps += list(more_gaps)
    for item, problem in gaps:
        missing.append({"path": item.path, "problem": problem, "flag": item.flag,
                        "verdict": item.missing_verdict})
    found_note = f" ({'; '.join(elsewhere)})" if elsewhere else ""
    if not gaps:
        return Check(name, "PASS", f"{', '.join(i.path for i in items)} in place{where}{found_note}")
    verdict = worst_verdict(i.missing_verdict for i, _ in gaps)
    detail = "; ".join(f"{i.path} {problem} ({i.need}): add {i.flag}" for i, problem in gaps)
    return Check(name, verdict, f"{len(gaps)} of {len(items) + len(more_gaps)} not in place{where}: "
                                f"{detail}{found_note}")


def _mount_items(root: Path) -> list[Item]:
    driver_ok = locate(root, DRIVER)[1] is None
    return [i for i in MOUNTS if driver_ok or i not in (DRIVER_LIB64, DRIVER_VERSION)]


# --- which card nodes --------------------------------------------------------------------
def listed_cards(listing) -> Optional[list[int]]:
    """The card numbers an npu-smi listing shows (its NPU ids when each NPU has one chip,
    else the chips' order); None without a trusted npu-smi listing (a table cut short names
    too few cards)."""
    if listing.source != "npu-smi" or not listing.devices or listing.distrust:
        return None
    ids = [d.npu_id for d in listing.devices]
    if None in ids or len(set(ids)) != len(ids):
        return [d.index for d in listing.devices]
    return ids


def present_card_nodes(root: Path, virtual: bool = False) -> list[int]:
    """The N of each card node under ``root`` (``/dev/davinciN``; with ``virtual`` also
    ``/dev/vdavinciN``), sorted, each once; under ``/`` only character devices count."""
    if not present(root, "/dev"):
        return []
    dev = under(root, "dev")
    numbers = set()
    for prefix in ("davinci", "vdavinci") if virtual else ("davinci",):
        for path in dev.glob(f"{prefix}[0-9]*"):
            number = path.name[len(prefix):]
            probe = Item(f"/dev/{path.name}", "", "", kind="node")
            if number.isdigit() and locate(root, probe)[1] is None:
                numbers.add(int(number))
    return sorted(numbers)


@dataclass
class CardNeed:
    """The card nodes (``N`` of each ``/dev/davinciN``) the next stages need in the
    container, and where those numbers came from."""

    cards: list[int]
    source: str
    #: Further nodes needed whose numbers nothing names (``num_cards`` above the cards
    #: present): any free card of the host will do.
    short: int = 0
    virtual: bool = False
    no_npu: Optional[str] = None  # why: ASCEND_VISIBLE_DEVICES asks the runtime to mount none
    problem: Optional[str] = None  # why ASCEND_VISIBLE_DEVICES could not be read (then ignored)


def _card_range(entry: str, value: str) -> range:
    low, _, high = (part.strip() for part in entry.partition("-"))
    if not (low.isdigit() and high.isdigit()):
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a card number "
                         f"or a range like 0-3")
    first, last = int(low), int(high)
    if last > MAX_RANGE_END:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: range {entry!r} ends above "
                         f"{MAX_RANGE_END}, which the Ascend Docker Runtime refuses")
    if first > last:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: range {entry!r} runs backwards "
                         f"(write {last}-{first})")
    return range(first, last + 1)


def _chip_names(entries: list[str], value: str) -> list[int]:
    cards, chips = [], set()
    for entry in entries:
        match = CHIP_NAME.match(entry)
        if not match:
            raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a chip name "
                             f"like Ascend910-1 (names and numbers do not mix)")
        chips.add(match.group(1))
        cards.append(int(match.group(2)))
    if len(chips) > 1:
        raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: names chips of {len(chips)} types "
                         f"({', '.join(sorted('Ascend' + c for c in chips))}); the runtime "
                         f"takes one type")
    return cards


def parse_card_list(value: str) -> list[int]:
    """ASCEND_VISIBLE_DEVICES as the runtime reads it: ``0-3,6`` or ``Ascend910-0,Ascend910-1``
    -> the card numbers, sorted, each once; ValueError naming an entry the runtime refuses."""
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if "Ascend" in value:
        return sorted(set(_chip_names(entries, value)))
    cards: set[int] = set()
    for entry in entries:
        if "-" in entry:
            cards.update(_card_range(entry, value))
        elif entry.isdigit():
            cards.add(int(entry))
        else:
            raise ValueError(f"ASCEND_VISIBLE_DEVICES={value!r}: {entry!r} is not a card number "
                             f"or a range like 0-3")
    return sorted(cards)


def needed_cards(num_cards: Optional[int], environ: Mapping[str, str],
                 listed: Optional[list[int]] = None,
                 present: Optional[list[int]] = None) -> CardNeed:
    """The card nodes needed, as docs/containers.md ("Which cards") reads them. Without
    ``listed`` (npu-smi's card numbers) and ``present`` (the card nodes in the container),
    ``0..num_cards-1`` and positions stand for the numbers, as on a bare host."""
    virtual = "VIRTUAL" in environ.get("ASCEND_RUNTIME_OPTIONS", "").upper()
    host_cards, notes, problem, no_npu = None, [], None, None
    host_var = environ.get("ASCEND_VISIBLE_DEVICES")
    if host_var is not None:
        text = host_var.strip()
        if text.lower() in NO_NPU_VALUES:
            no_npu = (f"ASCEND_VISIBLE_DEVICES={host_var!r} asks the Ascend Docker Runtime to "
                      f"mount no NPU")
            notes.append(f"{no_npu}; the card nodes added by hand are judged")
        elif environ.get("ASCEND_VNPU_SPECS", "").strip():
            notes.append(f"ASCEND_VNPU_SPECS={environ['ASCEND_VNPU_SPECS'].strip()}: a vNPU cut "
                         f"from card {text}, mounted under the ID the runtime created")
        else:
            try:
                host_cards = parse_card_list(text)
            except ValueError as exc:
                problem = str(exc)
                notes.append(f"{problem} (ignored)")
    if host_cards is not None:
        seen, seen_from = host_cards, f"ASCEND_VISIBLE_DEVICES={host_var.strip()}"
    elif listed is not None:
        seen, seen_from = list(listed), "the cards npu-smi lists"
    elif present is not None:
        seen, seen_from = list(present), "the card nodes present"
    else:
        seen, seen_from = None, ""
    if no_npu and not seen:
        return CardNeed([], no_npu, virtual=virtual, no_npu=no_npu)
    short = 0
    runtime_var = environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if runtime_var is not None and runtime_var.strip():
        # positions among the cards seen; a position past them names a card not mounted
        positions = parse_visible_devices(runtime_var, "ASCEND_RT_VISIBLE_DEVICES")
        source = f"ASCEND_RT_VISIBLE_DEVICES={runtime_var}"
        if seen is None:
            cards, source = positions, source + " (no listing: positions taken as card numbers)"
        else:
            cards = [seen[p] for p in positions if p < len(seen)]
            short, source = len(positions) - len(cards), f"{source} within {seen_from}"
    elif seen is not None:
        cards, source = list(seen), seen_from
        if num_cards and len(cards) < num_cards:
            short, source = num_cards - len(cards), f"num_cards={num_cards}, {len(cards)} in {source}"
        elif not num_cards and not cards:
            short, source = 1, f"{source}: no card count known, at least one card node needed"
    elif num_cards:
        cards, source = list(range(num_cards)), f"num_cards={num_cards}"
    else:
        cards, source = [], "no card count known"
    if num_cards and len(cards) > num_cards:
        cards, source = cards[:num_cards], f"the first {num_cards} of {source}"
    source = "; ".join(notes + [source])
    return CardNeed(cards, source, short, virtual, no_npu, problem)


def _shortfall(need: CardNeed, present: list[int]) -> list[tuple[Item, str]]:
    """A gap per card node asked for beyond those present, named by the lowest numbers not
    taken (any free card of the host will do)."""
    why = (f"missing ({len(need.cards) + need.short} card nodes needed, {len(present)} present; "
           f"any free card of the host will do, this number is the first free one)")
    taken = {*present, *need.cards}
    free = [n for n in range(len(taken) + need.short) if n not in taken][:need.short]
    return [(card_node(n, need.virtual), why) for n in free]


def check_container(root: Path, *, kind: str, requested: str, num_cards: Optional[int],
                    environ: Mapping[str, str], listed: Optional[list[int]],
                    versions: DriverVersions, shm_gb_per_card: float,
                    machine_shm_gb: Optional[float] = None) -> ContainerFindings:
    """``root`` ``/`` is this machine, whose /dev/shm (``machine_shm_gb``) the ``dev_shm``
    check judges; ``listed``: the card numbers npu-smi listed (None: no listing read)."""
    root = Path(root)
    machine = is_machine_root(root)
    where = "" if machine else f" under {root}"
    refused: list[str] = []
    evidence = container_evidence(root, refused)
    signs = ascend_signs(root)
    ascend_backend = "npu" in (kind, requested)
    findings = ContainerFindings(str(root), evidence is not None, evidence, False, versions,
                                 refused=refused)
    names = ("container_devices", "container_mounts", "container_shm")
    if evidence is None and refused:
        # a FIFO or device node where /proc/1/cgroup belongs: "not a container" is a guess
        what = "this machine" if machine else str(root)
        why = f"cannot tell whether {what} is a container: {'; '.join(refused)}"
        findings.checks = [Check(names[0], "WARN", f"{why}; the docker run checks are not judged"),
                           *(Check(n, "SKIP", "not judged: see container_devices") for n in names[1:])]
        return findings
    if evidence is None:
        why = (f"not a container (no /.dockerenv, /run/.containerenv or Kubernetes service account folder, "
               f"no runtime in /proc/1/cgroup, / not an overlay mount{where}): the docker run checks do not apply")
    elif not ascend_backend and not signs:
        why = (f"a container ({evidence}{where}) with no Ascend device or /usr/local/Ascend: "
               f"nothing to check for the {kind} backend")
    else:
        why = None
    if why:
        findings.checks = [Check(n, "SKIP", why) for n in names]
        return findings
    findings.judged = True
    virtual = "VIRTUAL" in environ.get("ASCEND_RUNTIME_OPTIONS", "").upper()
    present = present_card_nodes(root, virtual)
    need = needed_cards(num_cards, environ, listed, present)
    findings.cards, findings.cards_from, findings.virtual = need.cards, need.source, need.virtual
    if need.no_npu and not need.cards:
        why = (f"{need.no_npu} and no card node is present{where}: no NPU to check; to use NPUs, "
               f"start the container with -e ASCEND_VISIBLE_DEVICES=<cards> or --device=/dev/davinciN")
        findings.checks = [Check(n, "SKIP", why) for n in names]
        return findings
    devices = _judge_items("container_devices", root,
                           [card_node(c, need.virtual) for c in need.cards] + list(CONTROL_NODES),
                           where, findings.missing, _shortfall(need, present))
    verdict = worst_verdict([devices.verdict, "WARN" if need.problem else "PASS"])
    devices = Check(devices.name, verdict, f"{devices.reason} (cards from {need.source})")
    mounts = _judge_items("container_mounts", root, _mount_items(root), where, findings.missing)
    has_driver, has_smi = (locate(root, i)[1] is None for i in (DRIVER, NPU_SMI))
    if has_driver != has_smi:
        mounts = Check(mounts.name, mounts.verdict, f"{mounts.reason}; the manual mounts the driver "
                                                    f"and npu-smi together")
    per_card = shm_gb_per_card
    count = len(need.cards) + need.short
    if machine:
        findings.shm_total_gb = machine_shm_gb
        shm = Check("container_shm", "SKIP", "this machine's /dev/shm is judged by the dev_shm check")
        if machine_shm_gb is not None and machine_shm_gb < per_card * count:
            findings.flags.append(shm_size_flag(per_card * count))
    else:
        mounts_refused: list[str] = []
        mounts_text = read_optional(root, "proc/mounts", MAX_PROC_BYTES, mounts_refused)
        findings.refused += mounts_refused
        findings.shm_total_gb = shm_size_from_mounts(mounts_text or "")
        if mounts_refused:
            shm = Check("container_shm", "WARN", f"{'; '.join(mounts_refused)}: /dev/shm size not judged "
                                                 f"({per_card * count:g} GiB needed for {counted(count, 'card')})")
        else:
            shm = check_container_shm(findings.shm_total_gb, count, per_card, f" in {root}")
        if shm.verdict == "WARN" and not mounts_refused:
            findings.flags.append(shm_size_flag(per_card * count))
    if not ascend_backend:
        note = f" (judged for NPU use: {signs[0]} is there, though the backend is {kind})"
        devices, mounts = (Check(c.name, c.verdict, c.reason + note) for c in (devices, mounts))
    findings.flags = list(dict.fromkeys([m["flag"] for m in findings.missing] + findings.flags))
    findings.checks = [devices, mounts, shm]
    return findings
