#!/usr/bin/env bash
# The test command: set-up (venv, pins, chromium) then the whole suite, spread over one
# pytest-xdist worker per core (HYPORT_TEST_WORKERS=N to choose; 0 runs in this process).
# Tests sharing an expensive run are kept on one worker (tests/fixtures_workers.py).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
# Python's bytecode cache on, where the host turns it off (PYTHONDONTWRITEBYTECODE): without
# it every pytest worker, and every worker, kernel and child the tests start, compiles
# hyport_lib and re-rewrites each test module's asserts from source (the fast tier: 118 s
# against 91 s on a 2-core VM). The caches go into __pycache__/ (ignored by git).
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -n "${HYPORT_TEST_WORKERS:-auto}" "$@"
