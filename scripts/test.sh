#!/usr/bin/env bash
# The test command: set-up (venv, pins, chromium) then the whole suite, spread over one
# pytest-xdist worker per core (HYPORT_TEST_WORKERS=N to choose; 0 runs in this process).
# Tests sharing an expensive run are kept on one worker (tests/fixtures_workers.py).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
exec .venv/bin/python -m pytest -n "${HYPORT_TEST_WORKERS:-auto}" "$@"
