"""Two hosts' stage-01 records side by side (``hyport env --compare A.json B.json``): the
fields every node of one job must share (the software stack and the HCCL settings its
ranks agree on) and, for reading, a few that may differ. Computed here; the command shows it.
Which HCCL variables must match is :mod:`hyport_lib.nodes.versions`' list, the one stage 04's
handshake compares by: the two never disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from hyport_lib.environment.stage import STAGE, EnvironmentReport
from hyport_lib.nodes.versions import HCCL_MUST_MATCH, HCCL_PER_HOST, must_match
from hyport_lib.results import StageRecord, load_record

Read = Callable[[EnvironmentReport], Optional[str]]


def _version(package: str) -> Read:
    return lambda r: r.versions.get(package)


def _driver(r: EnvironmentReport) -> Optional[str]:
    versions = r.container.versions if r.container is not None else None
    return (versions.driver if versions is not None else None) or r.cann.driver_version


def _firmware(r: EnvironmentReport) -> Optional[str]:
    return r.container.versions.firmware if r.container is not None else None


def _variable(name: str) -> Read:
    return lambda r: r.env_vars.get(name)


#: (field, how it is read, must it match)
FIELDS: tuple[tuple[str, Read, bool], ...] = (
    ("python", _version("python"), True),
    ("torch", _version("torch"), True),
    ("torch_npu", _version("torch_npu"), True),
    ("CANN", lambda r: r.cann.version, True),
    ("driver", _driver, True),
    ("firmware", _firmware, True),
    ("transformers", _version("transformers"), True),
    ("deepspeed", _version("deepspeed"), True),
    ("accelerate", _version("accelerate"), True),
    *((name, _variable(name), True) for name in HCCL_MUST_MATCH),
    *((name, _variable(name), False) for name in HCCL_PER_HOST),
    ("device", lambda r: r.device or None, False),
    ("cards", lambda r: str(r.num_cards) if r.num_cards else None, False),
    ("os", lambda r: r.system.get("os"), False),
    ("kernel", lambda r: r.system.get("kernel"), False),
)


@dataclass
class FieldRow:
    field: str
    a: Optional[str]
    b: Optional[str]
    must_match: bool

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclass
class HostComparison:
    a_path: str
    b_path: str
    a_host: str
    b_host: str
    rows: list[FieldRow] = field(default_factory=list)

    @property
    def mismatched(self) -> list[FieldRow]:
        """Fields that must match and do not."""
        return [r for r in self.rows if r.must_match and r.differs]

    def frame(self):
        import pandas as pd

        a, b = f"host A ({self.a_host})", f"host B ({self.b_host})"

        def shown(row: FieldRow, value: Optional[str]) -> str:
            return value if value is not None else "(unset)" if row.field.startswith("HCCL_") else "not found"

        return pd.DataFrame([{"": ("≠" if r.differs and r.must_match else "~" if r.differs else ""),
                              "field": r.field, a: shown(r, r.a), b: shown(r, r.b),
                              "must match": "yes" if r.must_match else "no"} for r in self.rows],
                            columns=["", "field", a, b, "must match"])


def read_environment_record(path: os.PathLike | str) -> StageRecord[EnvironmentReport]:
    """A stage-01 record read typed; ValueError (one line naming the file) otherwise."""
    record = load_record(path, EnvironmentReport)
    if record.stage != STAGE:
        raise ValueError(f"{path}: a {record.stage} record, not {STAGE}'s (results/{STAGE}.json)")
    return record


def compare_hosts(a: StageRecord[EnvironmentReport], b: StageRecord[EnvironmentReport],
                  a_path: str = "A", b_path: str = "B") -> HostComparison:
    """Every field of :data:`FIELDS`, then any other HCCL variable either host sets (it must
    match, as in the handshake); a variable neither host sets is left out."""
    listed = {name for name, _, _ in FIELDS}
    others = sorted({k for r in (a.data, b.data) for k in r.env_vars if k.startswith("HCCL_") and k not in listed})
    rows = []
    for name, read, must in (*FIELDS, *((k, _variable(k), must_match(k)) for k in others)):
        va, vb = read(a.data), read(b.data)
        if name.startswith("HCCL_") and va is None and vb is None:
            continue
        rows.append(FieldRow(name, None if va is None else str(va), None if vb is None else str(vb), must))
    return HostComparison(a_path, b_path, _host(a.data), _host(b.data), rows)


def _host(report: EnvironmentReport) -> str:
    return (report.nodes.host_name if report.nodes is not None else "") or "host name not recorded"
