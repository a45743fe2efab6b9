#!/usr/bin/env bash
# The GPU suite (docs/gpu-planning.md): every ATRI preset x precision (fp32 + TF32, bf16) x attention (sdpa,
# eager) x batch (typical, worst: benchmarks/gpu_suite_lengths.json), plus gradient caching and checkpointing,
# at full size with random weights (no downloads, no network): measured torch.cuda.max_memory_allocated beside
# `mlatr plan`'s prediction. About 4-6 minutes on one H100; cases stop being started after BUDGET_S (330) s.
# Writes $OUT/gpu-suite.json and $OUT/gpu-suite.txt ($OUT defaults to ./gpu-suite-out) and prints the table.
# Needs python3 with torch, numpy, pyyaml and transformers (mlatr itself is read from src/, not installed).
# Further arguments go to benchmarks/gpu_suite.py (e.g. --schemes kcl --attentions sdpa).
# CPU mechanics (what the tests run): DEVICE=cpu TINY=1 benchmarks/gpu_suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-gpu-suite-out}
extra=()
if [[ "${TINY:-0}" == 1 ]]; then extra+=(--tiny); fi
if [[ "$DEVICE" == cuda* ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: run with DEVICE=cpu TINY=1')"
  "$PY" -c "import torch, transformers; print(torch.cuda.get_device_name(0), 'torch', torch.__version__, 'transformers', transformers.__version__)"
fi
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/gpu_suite.py --device "$DEVICE" --out "$OUT" \
  --budget-s "${BUDGET_S:-330}" "${extra[@]}" "$@"
