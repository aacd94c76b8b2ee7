#!/usr/bin/env bash
# The main job: set-up, then the full report on the embedded default (tiny model, CPU).
#   bash scripts/report.sh [hyport report args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/hyport report --profile default "$@"
