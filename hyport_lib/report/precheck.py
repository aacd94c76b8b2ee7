"""``python -m hyport_lib.report.precheck``: the report's pre-run plans, in a fresh process.

Reads the requests of :func:`hyport_lib.report.run_parameters.check_before_running` (JSON on
stdin) and prints what the plans found as one JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from hyport_lib.report.run_parameters import PlanRequest, make_plans


def main() -> int:
    requests = [PlanRequest(**item) for item in json.loads(sys.stdin.read())]
    print(json.dumps(dataclasses.asdict(make_plans(requests))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
