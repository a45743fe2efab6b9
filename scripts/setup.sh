#!/usr/bin/env bash
# Idempotent set-up: a virtualenv in .venv with the CPU torch and mlatr installed (editable).
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MLATR_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtualenv $venv" >&2
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# torch first, pinned to the CPU build: an open range would pull a multi-GB CUDA build.
if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0 (CPU build)" >&2
  "${pip[@]}" install "torch==2.13.0"
fi
stamp="$venv/.mlatr-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "[setup] installing mlatr and its dependencies" >&2
  "${pip[@]}" install -e "$root[dev,hf,real,serve,parquet,log,shards,milvus]"
  # aisfx pins old librosa/numpy: take only its wheel (mlatr reads its shipped checkpoint).
  "${pip[@]}" install --no-deps "aisfx==0.1.2"
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
