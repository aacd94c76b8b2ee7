#!/usr/bin/env bash
# Everything hyport checks that needs a CUDA GPU, as one prepared command: run it at once
# on any CUDA host and paste its summary into the issue note.
#
#   bash scripts/gpu_check.sh [OUT_DIR]      # default: outputs/gpu-check-<timestamp>
#
# Uses the Python on PATH (PYTHON=... to choose) with its own torch (CUDA) and
# transformers; hyport runs from this checkout (PYTHONPATH), nothing is installed.
# Steps (each logged to OUT_DIR/<step>.log; a failing step does not stop the others):
#   1. bench/bench_varlen_gpu.py            the drop-in's varlen path vs torch's kernels
#   2. hyport attention --device cuda --full   the numerics grid on the GPU
#   3. hyport infer --device cuda           the per-card inference grid
#   4. bench/zoo_matrix.py --device cuda    the 14-architecture zoo through 02 and 03
#   5. pytest -m "not slow"                 the fast suite in this Python, on a GPU host
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-outputs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: $PYTHON has no torch with a CUDA GPU (torch missing, or torch.cuda.is_available() is False)" >&2
  exit 2
fi
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, '| CUDA', torch.version.cuda, '|', torch.cuda.get_device_name(0), '| transformers', transformers.__version__)" | tee "$OUT/host.txt"

declare -a names codes seconds
step() {  # step NAME COMMAND...
  local name="$1"; shift
  local started=$SECONDS
  echo "== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  local code=$?
  names+=("$name"); codes+=("$code"); seconds+=("$((SECONDS - started))")
  tail -n 25 "$OUT/$name.log"
  echo "== $name: exit $code in $((SECONDS - started)) s"
}

step varlen_bench "$PYTHON" bench/bench_varlen_gpu.py
step attention "$PYTHON" -m hyport_lib attention --device cuda --full --json "$OUT/attention.json"
step infer "$PYTHON" -m hyport_lib infer --device cuda --no-record --log-dir "$OUT/infer_logs"
step zoo "$PYTHON" bench/zoo_matrix.py --device cuda --stages attention,infer --out "$OUT/zoo_cuda.md"
step suite "$PYTHON" -m pytest -q -m "not slow" -p no:cacheprovider

echo
echo "gpu_check summary ($OUT):"
failed=0
for i in "${!names[@]}"; do
  printf '  %-13s exit %-3s %5s s\n' "${names[$i]}" "${codes[$i]}" "${seconds[$i]}"
  [ "${codes[$i]}" = 0 ] || failed=1
done
exit $failed
