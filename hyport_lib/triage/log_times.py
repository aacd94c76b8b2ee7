"""When a log line was written, from the time it carries (``docs/triage.md``, "Several
nodes"): Python's logging, DeepSpeed and transformers (``2026-12-07 17:04:28,123``),
torchrun's failure summary (``time : 2026-12-07_17:04:28``), CANN and HCCL
(``2025-07-23-03:47:57.070.463``), and torch's C++ and Python loggers, which give no year
(``[W1207 16:54:59.205972192 TCPStore.cpp:138]``, ``E1207 17:04:30.251000 28311 ...]``).

Times without a zone are read in this host's zone: the hosts of one job are taken to write
the same zone, and their clocks are not corrected.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Optional

#: A date and a time of day: ``-``, ``_``, ``T`` or a space between them; a fraction after
#: ``.`` or ``,`` (CANN's ``.070.463`` gives its milliseconds).
_DATED = re.compile(r"(?<!\d)(?P<y>(?:19|20)\d\d)-(?P<mo>\d\d)-(?P<d>\d\d)[ T_-](?P<h>\d\d):(?P<mi>\d\d):"
                    r"(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?")
#: torch's loggers (glog's layout): a level letter, month and day, the time with a fraction.
_GLOG = re.compile(r"(?<![\w])[IWEF](?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.(?P<f>\d{1,9})")
#: Characters of a line looked at: a time is written near its start (after torchrun's
#: ``[default0]:[rank0]:`` and CANN's ``EI0006: [PID: 1292363]``), not in its message.
WINDOW = 200
#: How far after the reference (the file's modification) a line's date may lie: clocks and
#: zones differ between a host and its file server.
_YEAR_SLACK_S = 86400.0


def line_time(text: str, reference: float) -> Optional[float]:
    """Seconds since the epoch at which ``text`` says it was written, or None. ``reference``
    (seconds since the epoch, the file's modification time) gives the year where the line
    has none (of the year before, its own and the year after, the date nearest it that is not
    more than a day after it)."""
    head = text[:WINDOW]
    if ":" not in head:
        return None
    dated, glog = _DATED.search(head), _GLOG.search(head)
    if dated is not None and (glog is None or dated.start() <= glog.start()):
        return _seconds(int(dated["y"]), dated)
    if glog is None:
        return None
    # The year nearest the reference (a line written just after New Year on a host whose
    # clock runs ahead of the file server's; a Feb 29 line in a file copied a year later),
    # but not one more than a day after it: a file is modified after its lines are written.
    year = datetime.fromtimestamp(reference).year
    choices = [t for t in (_seconds(y, glog) for y in (year - 1, year, year + 1)) if t is not None]
    possible = [t for t in choices if t <= reference + _YEAR_SLACK_S] or choices
    return min(possible, key=lambda t: abs(t - reference), default=None)


def _seconds(year: int, match: re.Match) -> Optional[float]:
    fraction = match["f"] or ""
    try:
        when = datetime(year, int(match["mo"]), int(match["d"]), int(match["h"]), int(match["mi"]),
                        int(match["s"]))
    except ValueError:  # 13th month, 25th hour: digits that are no time
        return None
    return when.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
