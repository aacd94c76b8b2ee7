#!/usr/bin/env bash
# The test command: set-up (venv, pins, chromium) then the whole suite.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
exec .venv/bin/python -m pytest "$@"
