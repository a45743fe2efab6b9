#!/usr/bin/env bash
# The GPU suite for the day a GPU is lent (docs/gpu-planning.md): every scheme and memory option of the ATRI
# preset at full size with random weights (no downloads), measured torch.cuda.max_memory_allocated and step
# time (bf16 and fp32, torch.compile for the plain step) beside `mlatr plan`'s prediction, and the data
# loader's throughput against the step's. About ten minutes on one H100. Writes $OUT (default
# gpu-suite.json) and prints the table; further arguments go to benchmarks/gpu_suite.py (e.g. --schemes kcl).
# CPU mechanics (what the tests run): DEVICE=cpu TINY=1 STEPS=1 benchmarks/gpu_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-5}
OUT=${OUT:-gpu-suite.json}
CONFIG=${CONFIG:-configs/atri-kcl-audiocaps.yaml}
extra=()
if [[ "${TINY:-0}" == 1 ]]; then extra+=(--tiny --loader-clips 8); fi
if [[ "$DEVICE" == cuda* ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: run with DEVICE=cpu TINY=1')"
  "$PY" -c "import torch; print(torch.cuda.get_device_name(0), torch.__version__)"
  extra+=(--compile)
fi
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/gpu_suite.py --config "$CONFIG" --device "$DEVICE" \
  --steps "$STEPS" --json "$OUT" "${extra[@]}" "$@"
