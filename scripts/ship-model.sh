#!/usr/bin/env bash
# Rebuild the model that ships inside the package (src/mlatr/data/models/real-sounds) from the real-sound corpus:
# the corpus (scripts/get-real-sounds.sh), mlatr demo-real's model (three KCL head pairs over frozen aisfx + USE),
# then the model folder with float16 weights, its card quoting demo-real's figures, the corpus's licence table and
# docs/shipped-model-notes.md. Run from the repository root after `source .venv/bin/activate`:
#
#   scripts/ship-model.sh [--run DIR] [--manifest FILE] [--calibration FOLDS] [--output DIR]
#
#   --run DIR            demo-real's output folder (default runs/demo-real; reused when it holds model.pt, else
#                        mlatr demo-real trains it there)
#   --manifest FILE      the corpus's manifest (default data/real-sounds/manifest.jsonl; fetched by
#                        scripts/get-real-sounds.sh when absent)
#   --calibration FOLDS  the recipe's kept fold embeddings (demo-real --unseen-epochs N writes DIR/unseen/embeddings):
#                        mlatr experiment calibrate fits the calibration on them and stores it in the folder's
#                        config.json, stamped with the folder's own weights (float16 as loaded), so it travels with them
#                        (fitted on the features of searches that translate Spanish and Catalan queries, as searches
#                        do where Apertium is installed)
#   --output DIR         where the folder goes (default src/mlatr/data/models/real-sounds)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="$root/runs/demo-real"
manifest="$root/data/real-sounds/manifest.jsonl"
calibration=""
output="$root/src/mlatr/data/models/real-sounds"
while [ $# -gt 0 ]; do
  case "$1" in
    --run|--manifest|--calibration|--output)
      [ $# -ge 2 ] || { echo "ship-model.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --run) run="$2" ;; --manifest) manifest="$2" ;; --calibration) calibration="$2" ;; --output) output="$2" ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ship-model.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
if [ -n "$calibration" ] && [ ! -d "$calibration" ]; then
  echo "ship-model.sh: --calibration $calibration: no such folder of fold embeddings" >&2; exit 2
fi
[ -f "$manifest" ] || "$root/scripts/get-real-sounds.sh" "$(dirname "$manifest")"
[ -f "$run/model.pt" ] || mlatr demo-real --manifest "$manifest" -o "$run"
mlatr export --model "$run/model.pt" --weights-dtype float16 -o "$output" \
  --metrics "$run/results.json" --training-data "$manifest" --notes "$root/docs/shipped-model-notes.md"
if [ -n "$calibration" ]; then
  mlatr experiment calibrate --embeddings "$calibration" --manifest "$manifest" --cache-dir "$run/cache" \
    --model "$output" --translated-queries -o "$run/calibration-shipped"
fi
