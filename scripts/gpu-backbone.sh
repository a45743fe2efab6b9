#!/usr/bin/env bash
# aiSFX's last conv block and its whole CNN trained with the shipped heads on a device machine (issue 47;
# docs/real-sounds.md, "The audio backbone on a GPU"; the blocks' rate 3e-4 chosen as "The last block on this
# CPU" says): the leave-one-library-out protocol of `mlatr experiment learning-curve` from a compact bundle
# (no audio, no text encoder there).
#
# Here, once (needs the translated manifest of the 8,267 clips and PyPI):
#   scripts/gpu-backbone.sh prepare [MANIFEST]
#     -> runs/gpu-bundle (the compact bundle) and .whl/ (the 7 wheels, 2.6 MB, the device image lacks)
# There, with the device tool (one call; carry the three paths, runs/gpu-curve only once it exists):
#   run(command="bash scripts/gpu-backbone.sh run", carry=["runs/gpu-bundle", ".whl", "runs/gpu-curve"],
#       timeout_s=600)
#   The points of PLAN run in order until BUDGET_S (480) seconds have passed; every held-out fold is recorded
#   as it ends, so a call cut short keeps what it finished: $OUT/results.json comes back. Put it into
#   runs/gpu-curve/ and call again to go on (the curve resumes from it).
#
# PLAN: points "BLOCKS:SEEDS:FOLDS" (FOLDS original = the 12 original libraries and the in-library split,
# added = every fold), RECIPE: the learning-curve options of every point, DEVICE (cuda), BUNDLE, CURVE: folders.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
BUNDLE=${BUNDLE:-runs/gpu-bundle}
CURVE=${CURVE:-runs/gpu-curve}
ORIGINAL=flare,freedesktop,lincity,lmms,micropolis,minetest,qabcs,scratch,sonic-pi,sound-icons,wesnoth,widelands
RECIPE=${RECIPE:---heads near-identity-kcl --ensemble 3 --batch-size 256 --epochs 10 --tail-epochs 6 --tail-patience 2 --tail-lr 3e-4 --added-groups 12 --fractions 1}
PLAN=${PLAN:-1:0:original 4:0:original 1:1,2:original 4:1,2:original 1:0,1,2:added 4:0,1,2:added}

case "${1:-}" in
prepare)
  manifest=${2:-data/real-sounds/manifest.spa-cat.jsonl}
  [[ -f "$manifest" ]] || { echo "no $manifest: mlatr data translate data/real-sounds/manifest.jsonl --to spa,cat --backend apertium -o $manifest" >&2; exit 2; }
  PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m mlatr experiment learning-curve --manifest "$manifest" \
    --cache-dir "${CACHE:-runs/gpu-cache}" --export-bundle "$BUNDLE" --compact
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
  # what mlatr's CLI imports and the device image lacks (docs/real-sounds.md: checked with every other package
  # blocked); Python 3.12 there
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl bm25s==0.3.16 PyStemmer==3.1.0 orjson==3.13.0 stopwordsiso==0.7.1 soundfile==0.14.0 cffi==2.1.1 \
    pycparser==3.12
  du -sh "$BUNDLE" .whl
  ;;
run)
  started=$SECONDS
  budget=${BUDGET_S:-480}
  site=""
  if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    site=/tmp/site
  fi
  export PYTHONPATH="$PWD/src${site:+:$site}" PYTHONUNBUFFERED=1
  "$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')"
  for point in $PLAN; do
    IFS=: read -r blocks seeds folds <<< "$point"
    left=$((budget - (SECONDS - started)))
    if ((left < 30)); then echo "budget spent: $point and after not started"; break; fi
    which=()
    if [[ "$folds" == original ]]; then which=(--libraries "$ORIGINAL" --in-library); fi
    echo "=== $(date -Is) blocks $blocks seeds $seeds folds $folds (${left} s left)"
    # shellcheck disable=SC2086  # RECIPE is a list of options
    if ! timeout "$left" "$PY" -m mlatr experiment learning-curve --bundle "$BUNDLE" --device "${DEVICE:-cuda}" \
        --workers 1 --no-progress -o "$CURVE" --train-blocks "$blocks" --seeds "$seeds" "${which[@]}" $RECIPE; then
      echo "stopped at $point"; break
    fi
  done
  [[ -f "$CURVE/results.json" ]] || { echo "no fold finished"; exit 1; }
  if [[ -n "${OUT:-}" ]]; then cp "$CURVE/results.json" "$OUT/results.json"; fi
  "$PY" - "$CURVE/results.json" <<'EOF'
import json, sys
from mlatr.lab.experiments.learning_curve import summarize_point
points = json.load(open(sys.argv[1]))["points"]
for key, p in points.items():
    s = summarize_point(p["folds"])
    for name in ("original", "added"):
        g = s["groups"][name]
        if g.get("libraries"):
            print(f"{key} {name} ({g['libraries']} folds): R@10 {g['t2a']['avg']['R10']:.1f} R@1 {g['t2a']['avg']['R1']:.1f} "
                  f"MRV {g['mrv']:.0f} single-target t2a R@10 {g['captions']['t2a']['R10']:.1f}")
    if "in_library" in s:
        print(f"{key} in-library: single-target t2a R@1 {s['in_library']['captions']['t2a']['R1']:.1f} "
              f"R@10 {s['in_library']['captions']['t2a']['R10']:.1f}")
EOF
  ;;
*)
  echo "usage: $0 prepare [MANIFEST] | run" >&2; exit 2 ;;
esac
