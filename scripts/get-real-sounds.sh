#!/usr/bin/env bash
# Real sound libraries, offline, without root: download the Debian packages of mlatr's sound-package table
# (apt-get download, no install), unpack only their sound files and copyright notices, each package's licence
# checked first (mlatr data unpack-debs: a package whose sounds may not be redistributed is refused), keep
# identical audio once (mlatr data dedup), and make one manifest with captions from the paths (folder context,
# numbering and jargon cleaned, the hand-reviewed captions of src/mlatr/data/real_sound_captions.json) and
# deterministic train/val/test splits (by a hash of each clip id).
#
#   scripts/get-real-sounds.sh [DEST]      # DEST defaults to data/real-sounds
#
# The packages, the files kept of each and why: src/mlatr/data/real_sound_packages.json and docs/real-sounds.md
# (tuxpaint-stamps-* is never fetched: it is kept for an independent check of the models trained here).
# Writes DEST/<library>/..., DEST/copyright/<package>, DEST/licences.json (package, version, licences, copyright
# holders) and DEST/manifest.jsonl. Idempotent and resumable: a package already unpacked is skipped, a .deb
# already downloaded is not downloaded again, and each step rewrites its output whole.
# Environment: REAL_SOUNDS_PACKAGES (another package table), KEEP_DEBS=1 (keep the .deb files), MLATR_PYTHON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$(mkdir -p "${1:-$root/data/real-sounds}" && cd "${1:-$root/data/real-sounds}" && pwd)"
py="${MLATR_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
table="${REAL_SOUNDS_PACKAGES:-$root/src/mlatr/data/real_sound_packages.json}"
debs="$dest/debs"
mkdir -p "$debs"

need=()
order=()
while read -r package library; do
  case "$package" in tuxpaint-stamps-*) echo "[real-sounds] $package is reserved: not fetched" >&2; continue ;; esac
  order+=("$library")
  if [ ! -f "$dest/$library/.done" ] && ! ls "$debs/${package}"_*.deb >/dev/null 2>&1; then need+=("$package"); fi
done < <("$py" -m mlatr data unpack-debs --packages "$table" --list "$debs" "$dest")

if [ ${#need[@]} -gt 0 ]; then
  if ! apt-cache show "${need[0]}" >/dev/null 2>&1; then
    echo "[real-sounds] apt-get update" >&2
    apt-get update -qq || { echo "[real-sounds] apt-get update failed (run it as root once)" >&2; exit 1; }
  fi
  echo "[real-sounds] downloading ${#need[@]} packages" >&2
  (cd "$debs" && apt-get download -q "${need[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
fi

"$py" -m mlatr data unpack-debs --packages "$table" "$debs" "$dest"
if [ "${KEEP_DEBS:-0}" != 1 ]; then
  while read -r package library; do
    [ -f "$dest/$library/.done" ] && rm -f "$debs/${package}"_*.deb
  done < <("$py" -m mlatr data unpack-debs --packages "$table" --list "$debs" "$dest")
fi

manifest="$dest/manifest.jsonl"
echo "[real-sounds] importing into $manifest" >&2
# the captions of the training corpus come from the paths and the reviewed table (data recaption), as they
# always did: not from the tags (mostly "Processed by SoX") nor with a package's name as folder words
"$py" -m mlatr data import --format folder --skip-bad --no-tag-captions --no-folder-words "$dest" -o "$manifest"
"$py" -m mlatr data dedup "$manifest" --no-progress --order "$(IFS=,; echo "${order[*]}")"
"$py" -m mlatr data recaption "$manifest" --in-place
"$py" -m mlatr data split "$manifest"
