"""What the report reads of each planned stage: outcome, recorded result, ``show`` hooks.

The run's files are rewritten from the start of a run (every stage ``PENDING``), so
nothing here assumes a stage ran: a missing, half-written or odd result file becomes a
:class:`StageView` with no result (and a ``problem`` saying why). The report knows no
stage by name: its hooks come from ``hyport_lib.<name>.show`` (:mod:`hyport_lib.drafting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.drafting.values import as_dict
from hyport_lib.report.run import RESULTS_DIR, ReportRun, StageOutcome
from hyport_lib.results import UnreadableResult, read_result, result_file
from hyport_lib.stages import stage_part

#: Verdicts of a stage that finished (the rest are statuses of one that did not).
FINISHED = ("PASS", "WARN", "FAIL", "SKIP")


def stage_hook(stage_id: str, name: str) -> Optional[Callable]:
    """The function ``name`` (``glance``, ``blog_values``...) of stage ``NN_name``'s ``show``
    module, or None where the module does not define it."""
    return getattr(stage_part(stage_id.partition("_")[2], "show"), name, None)


@dataclass
class StageView:
    """One planned stage as the report sees it."""

    outcome: StageOutcome  # the runner's record of it (verdict, summary, error, headline)
    result: Optional[dict] = None  # ``results/<stage>.json``; None when absent or unreadable
    problem: str = ""  # why a file that was there could not be read

    @property
    def stage(self) -> str:
        return self.outcome.stage

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
        """The result's ``data`` (empty when there is none)."""
        return as_dict(as_dict(self.result).get("data"))

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
    def provenance(self) -> dict:
        recorded = (self.result or {}).get("provenance") or self.outcome.provenance
        return recorded if isinstance(recorded, dict) else {}

    def hook(self, name: str) -> Optional[Callable]:
        """The stage's ``show`` function ``name``, or None (see :func:`stage_hook`)."""
        return stage_hook(self.stage, name)


def read_view(outcome: StageOutcome, results: Path) -> StageView:
    """The :class:`StageView` of one planned stage, its result read from ``results``."""
    try:
        return StageView(outcome, read_result(result_file(results, outcome.stage)))
    except FileNotFoundError:
        return StageView(outcome)
    except UnreadableResult as exc:
        return StageView(outcome, problem=str(exc))


def load_views(run: ReportRun) -> list[StageView]:
    """A :class:`StageView` per planned stage, in the run's order."""
    results = Path(run.run_dir) / RESULTS_DIR
    return [read_view(outcome, results) for outcome in run.stages]
