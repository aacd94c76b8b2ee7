"""What the blog drafts read: each planned stage's outcome and its recorded result file.

The drafts are rewritten at the start of a run (every stage ``PENDING``), after every
stage and when the run is stopped, so nothing here may assume a stage ran: a result
file may be missing, half-written by a killed kernel, or not a JSON object; each such
case becomes a :class:`StageView` with no result and a ``problem`` saying why, which
the stage's section then states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hyport_lib.report.blog_format import is_number, num, recorded
from hyport_lib.report.run import ReportRun, StageOutcome

#: Verdicts of a stage that finished (the rest are statuses of one that did not).
FINISHED = ("PASS", "WARN", "FAIL", "SKIP")


@dataclass
class StageView:
    """One planned stage as the drafts see it.

    Attributes:
        outcome: the runner's record of the stage (verdict, summary, error, headline).
        result: the parsed ``results/<stage>.json``; None when absent or unreadable.
        problem: why ``result`` is None when a file was there but could not be read.
    """

    outcome: StageOutcome
    result: Optional[dict] = None
    problem: str = ""

    @property
    def stage(self) -> str:
        return self.outcome.stage

    @property
    def name(self) -> str:
        """``train`` for ``04_train``: what picks the section that renders the stage."""
        return self.outcome.stage.partition("_")[2]

    @property
    def number(self) -> str:
        return self.outcome.stage.partition("_")[0]

    @property
    def verdict(self) -> str:
        return str(self.outcome.verdict or "")

    @property
    def finished(self) -> bool:
        return self.verdict in FINISHED

    @property
    def data(self) -> dict:
        """The result's ``data`` (empty when there is none), safe to :func:`dig` into."""
        data = (self.result or {}).get("data")
        return data if isinstance(data, dict) else {}

    @property
    def has_data(self) -> bool:
        """The stage finished and recorded data the stage's own section can show."""
        return self.finished and bool(self.data)

    @property
    def headline(self) -> dict:
        recorded = (self.result or {}).get("headline")
        if isinstance(recorded, dict) and recorded:
            return recorded
        return self.outcome.headline if isinstance(self.outcome.headline, dict) else {}

    @property
    def summary(self) -> str:
        return str((self.result or {}).get("summary") or self.outcome.summary or "")

    @property
    def provenance(self) -> dict:
        recorded = (self.result or {}).get("provenance") or self.outcome.provenance
        return recorded if isinstance(recorded, dict) else {}


@dataclass
class Ctx:
    """What every section renderer gets: the run, all stage views, the language's fixed
    sentences and the figures drawn for this run (name -> path relative to the drafts).

    ``notes`` collects problems met while drafting (a figure that could not be drawn),
    which the caveats section lists.
    """

    run: ReportRun
    views: list[StageView]
    t: dict
    lang: str
    figures: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def yes_no(self, value: Any) -> str:
        return self.t["yes"] if value else self.t["no"]

    def value(self, value: Any) -> str:
        """A recorded value for a table: numbers by :func:`~hyport_lib.report.blog_format.num`,
        yes / no, texts as recorded (marked as code in Chinese)."""
        if isinstance(value, bool):
            return self.yes_no(value)
        if is_number(value) or value is None:
            return num(value)
        return recorded(value, self.lang)

    def prov(self, provenance: Optional[dict]) -> str:
        """Where a stage's figures came from, in words (never an NPU for CPU figures)."""
        words = self.t["prov"]
        provenance = provenance if isinstance(provenance, dict) else {}
        device = str(provenance.get("device") or "")
        if provenance.get("emulated"):
            return words["emulated"].format(device=device.upper() or "?")
        return words.get(device, words["unknown"])


def dig(value: Any, *keys: Any, default: Any = None) -> Any:
    """``value[k1][k2]...`` through dicts and lists, or ``default`` where a level is missing
    or of another type (recorded files of older versions, or half-written ones)."""
    for key in keys:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        else:
            return default
    return default if value is None else value


def as_list(value: Any) -> list:
    """``value`` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def read_result(path: Path) -> tuple[Optional[dict], str]:
    """``(result, problem)``: the parsed file, or None and why (empty when there is no file)."""
    if not path.is_file():
        return None, ""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"{path.name}: {exc}"
    if not isinstance(raw, dict):
        return None, f"{path.name}: not a JSON object"
    return raw, ""


def load_views(run: ReportRun) -> list[StageView]:
    """A :class:`StageView` per planned stage, in the run's order."""
    folder = Path(run.run_dir) / "results"
    views = []
    for outcome in run.stages:
        result, problem = read_result(folder / f"{outcome.stage}.json")
        views.append(StageView(outcome, result, problem))
    return views


def find(views: list[StageView], name: str) -> Optional[StageView]:
    """The view of the stage called ``name`` (``train``, ``weights``...), if planned."""
    return next((v for v in views if v.name == name), None)


__all__ = ["FINISHED", "Ctx", "StageView", "as_list", "dig", "find", "load_views", "read_result"]
