"""Each card's RoCE link, as ``hccn_tool`` (the Ascend driver's network tool) reports it:
``hccn_tool -i <card> -link -g`` prints ``link status: UP``, ``hccn_tool -i <card> -ip -g``
prints ``ipaddr:192.168.1.8`` and ``netmask:255.255.255.0`` (both empty, ``ipaddr:``, for a card
without an address). HCCL's traffic between hosts
goes over these links; one down, or without an address, stops a job of several hosts.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hyport_lib.results import Check
from hyport_lib.utils.printable import printable
from hyport_lib.utils.wording import counted

#: Where the driver installs it; not on PATH unless the user adds it.
DRIVER_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
HCCN_TIMEOUT_S = 10.0
# [ \t]*, not \s*: an empty ``ipaddr:`` must not take the next line's ``netmask:`` as its value.
_LINK = re.compile(r"link status[ \t]*:[ \t]*(\w+)", re.IGNORECASE)
_IP = re.compile(r"ipaddr[ \t]*:[ \t]*(\S+)", re.IGNORECASE)
_NETMASK = re.compile(r"netmask[ \t]*:[ \t]*(\S+)", re.IGNORECASE)


@dataclass
class RoceLink:
    """One card's link: its state (``UP`` / ``DOWN``), address, or why hccn_tool did not say."""

    card: int
    link: Optional[str] = None
    ip: Optional[str] = None
    netmask: Optional[str] = None
    error: Optional[str] = None

    def problem(self, expected_ip: Optional[str] = None) -> Optional[str]:
        if self.error:
            return f"card {self.card}: {self.error}"
        if (self.link or "").upper() != "UP":
            return f"card {self.card}: link {self.link or 'state not printed'}"
        if not self.ip:
            return f"card {self.card}: no IP (hccn_tool -i {self.card} -ip -s address ... netmask ...)"
        if expected_ip and expected_ip != self.ip:
            return f"card {self.card}: IP {self.ip}, the rank table's device_ip is {expected_ip}"
        return None


def find_hccn_tool(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    environ = os.environ if environ is None else environ
    found = shutil.which("hccn_tool", path=environ.get("PATH"))
    if found:
        return found
    return DRIVER_HCCN_TOOL if os.access(DRIVER_HCCN_TOOL, os.X_OK) else None


def parse_link(text: str) -> Optional[str]:
    match = _LINK.search(text)
    return match.group(1).upper() if match else None


def parse_ip(text: str) -> tuple[Optional[str], Optional[str]]:
    """``(ip, netmask)``; None for one not printed or not an address (``ipaddr:`` empty)."""
    ip, mask = _IP.search(text), _NETMASK.search(text)
    return _an_address(ip.group(1) if ip else None), _an_address(mask.group(1) if mask else None)


def _an_address(text: Optional[str]) -> Optional[str]:
    try:
        return str(ipaddress.ip_address(text)) if text else None
    except ValueError:
        return None


def _ask(tool: str, card: int, what: str, timeout_s: float) -> tuple[Optional[str], Optional[str]]:
    """``(stdout, None)`` or ``(None, why not)``."""
    command = [tool, "-i", str(card), f"-{what}", "-g"]
    try:
        proc = subprocess.run(command, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"hccn_tool -i {card} -{what} -g did not answer within {timeout_s:g} s"
    except OSError as exc:
        return None, f"hccn_tool cannot run: {exc.strerror or exc}"
    out = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        detail = (proc.stderr.decode("utf-8", errors="replace") or out).strip().splitlines()
        return None, (f"hccn_tool -i {card} -{what} -g exited {proc.returncode}: "
                      f"{printable(detail[-1]) if detail else 'no output'}")
    return out, None


def query_links(tool: str, cards: Sequence[int], timeout_s: float = HCCN_TIMEOUT_S) -> list[RoceLink]:
    """Both questions for every card at once (hccn_tool takes a fraction of a second each)."""
    answers: dict[tuple[int, str], tuple[Optional[str], Optional[str]]] = {}

    def ask(card: int, what: str):
        answers[(card, what)] = _ask(tool, card, what, timeout_s)

    threads = [threading.Thread(target=ask, args=(c, w), daemon=True) for c in cards for w in ("link", "ip")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    links = []
    for card in cards:
        link_out, link_err = answers.get((card, "link"), (None, "hccn_tool did not finish"))
        ip_out, ip_err = answers.get((card, "ip"), (None, "hccn_tool did not finish"))
        ip, mask = parse_ip(ip_out) if ip_out is not None else (None, None)
        links.append(RoceLink(card, parse_link(link_out) if link_out is not None else None, ip, mask,
                              link_err or ip_err))
    return links


def check_roce_links(kind: str, tool: Optional[str], cards: Sequence[int], links: Sequence[RoceLink],
                     multinode: bool, expected_ips: Optional[Mapping[str, str]] = None) -> Check:
    """FAIL on a job of several hosts; a WARN on one host, where HCCL does not use RoCE."""
    name = "roce_links"
    if tool is None:
        where = f"on PATH or at {DRIVER_HCCN_TOOL}"
        if kind == "npu":
            verdict = "WARN" if multinode else "SKIP"
            return Check(name, verdict, f"hccn_tool not found ({where}): the RoCE links cannot be checked"
                                        + ("; mount the driver's tools folder into the container" if multinode else
                                           " (one host: HCCL does not use them)"))
        return Check(name, "SKIP", f"hccn_tool not found ({where}): not an Ascend host ({kind} backend)")
    if not cards:
        return Check(name, "SKIP", f"no card to ask hccn_tool about ({kind} backend, no card listed)")
    expected = expected_ips or {}
    problems = [p for p in (link.problem(expected.get(str(link.card))) for link in links) if p]
    if problems:
        scope = "" if multinode else " (one host: HCCL does not use them between cards of one host)"
        return Check(name, "FAIL" if multinode else "WARN", "; ".join(problems) + scope)
    shown = ", ".join(f"{link.card} {link.ip}" for link in links[:8]) + (" ..." if len(links) > 8 else "")
    return Check(name, "PASS", f"{counted(len(links), 'RoCE link')} UP, each with an IP (card {shown})")
