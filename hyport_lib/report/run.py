"""The data model of a report run: one :class:`ReportRun` with a :class:`StageOutcome`
per stage. The runner fills it; the index, the blog drafts and ``run.json`` read it.
Kept apart from the runner so that the modules that render a run do not import the
module that executes one.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class StageOutcome:
    stage: str
    verdict: str
    summary: str = ""
    duration_s: float = 0.0
    notebook: Optional[str] = None  # relative to the run folder
    html: Optional[str] = None
    log: Optional[str] = None
    error: Optional[str] = None
    headline: dict = field(default_factory=dict)
    provenance: Optional[dict] = None
    parameters: dict = field(default_factory=dict)
    interrupted: bool = False


@dataclass
class ReportRun:
    run_id: str
    run_dir: Path
    profile: Optional[str]
    parameters: dict
    stages: list[StageOutcome]
    versions: dict
    started: str
    finished: str = ""
    unused_parameters: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.verdict != "FAIL" for s in self.stages)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["run_dir"] = str(self.run_dir)
        data["ok"] = self.ok
        return data


def new_run_dir(output_root: Path) -> tuple[str, Path]:
    """A fresh ``<timestamp>-<random>`` folder; two concurrent runs never share one."""
    output_root.mkdir(parents=True, exist_ok=True)
    while True:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_id = f"{stamp}-{secrets.token_hex(3)}"
        run_dir = output_root / run_id
        try:
            run_dir.mkdir()
            return run_id, run_dir
        except FileExistsError:
            continue
