#!/usr/bin/env bash
# Real sound libraries, offline, without root: download twelve Debian packages (apt-get download, no
# install), unpack only their sound files and copyright notices (dpkg-deb --fsys-tarfile | tar), and
# make one manifest with captions from the paths (folder context, numbering and jargon cleaned, the
# hand-reviewed captions of src/mlatr/data/real_sound_captions.json) and deterministic train/val/test
# splits (by a hash of each clip id).
#
#   scripts/get-real-sounds.sh [DEST]      # DEST defaults to data/real-sounds
#
# Packages (licences: docs/real-sounds.md): scratch (Media/Sounds, CC-BY-SA-3.0), minetest-data
# (minetest_game mods' sounds, CC-BY-SA-3.0 / CC-BY-3.0 / CC0), wesnoth-1.16-data (only its sound
# effects: data/core/sounds and sounds; GPL-2+; the 146 MB .deb is downloaded once and deleted after
# unpacking unless KEEP_DEBS=1), sound-theme-freedesktop (GPL-2+ / CC-BY-SA-3.0 / CC-BY-3.0), and,
# for variety (animals, weather, vehicles, household, instruments, machines): qabcs-data (its
# "noises": animals, instruments, objects; GPL-3+), widelands-data (sound effects and critters only,
# not the music; GPL-2+), lincity-ng-data (city sounds; GPL-2+ / CC-BY-SA-2.0), flare-game (sound
# effects without the merchants' speech; CC-BY-SA-3.0+), sonic-pi-samples (CC0 / CC-BY-SA-4.0),
# lmms-common (samples, without the single-cycle waveforms; GPL-2+), sound-icons (GPL-2+),
# micropolis-data (GPL-3+). The tuxpaint-stamps-* packages are kept out on purpose: they are reserved
# for an independent check of models trained here.
# Layout under DEST: scratch/<Category>/Name.wav, minetest/<mod>/<name>.ogg (the "<mod>_" prefix of
# the file names dropped, so captions read "dig cracky" not "default dig cracky"),
# wesnoth/{core,ui,ambient,...}/..., freedesktop/<name>.oga, qabcs/<name>.ogg, widelands/<folder>/...,
# lincity/<Name>.wav, flare/<mod>/<folder>/..., sonic-pi/<name>.flac, lmms/<folder>/..., sound-icons/,
# micropolis/, copyright/<package>, manifest.jsonl.
# Idempotent: a package already unpacked is skipped. Needs apt-get (Debian/Ubuntu) and dpkg-deb.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$(mkdir -p "${1:-$root/data/real-sounds}" && cd "${1:-$root/data/real-sounds}" && pwd)"
py="${MLATR_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
debs="$dest/debs"
mkdir -p "$debs" "$dest/copyright"
packages=(scratch minetest-data wesnoth-1.16-data sound-theme-freedesktop qabcs-data widelands-data
          lincity-ng-data flare-game sonic-pi-samples lmms-common sound-icons micropolis-data)
declare -A target=([scratch]=scratch [minetest-data]=minetest [wesnoth-1.16-data]=wesnoth
                   [sound-theme-freedesktop]=freedesktop [qabcs-data]=qabcs [widelands-data]=widelands
                   [lincity-ng-data]=lincity [flare-game]=flare [sonic-pi-samples]=sonic-pi
                   [lmms-common]=lmms [sound-icons]=sound-icons [micropolis-data]=micropolis)

need=()
for p in "${packages[@]}"; do
  [ -f "$dest/${target[$p]}/.done" ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if ! apt-cache show "${need[0]}" >/dev/null 2>&1; then
    echo "[real-sounds] apt-get update" >&2
    apt-get update -qq || { echo "[real-sounds] apt-get update failed (run it as root once)" >&2; exit 1; }
  fi
  echo "[real-sounds] downloading ${need[*]}" >&2
  have=()
  for p in "${need[@]}"; do ls "$debs/${p}"_*.deb >/dev/null 2>&1 || have+=("$p"); done
  [ ${#have[@]} -eq 0 ] || (cd "$debs" && apt-get download -q "${have[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
fi

sounds_re='\.(wav|ogg|oga|mp3|flac)$'
unpack() {  # unpack <package> <tmp dir>: the package's sound files and copyright file
  local pkg="$1" tmp="$2" deb
  deb="$(ls "$debs/${pkg}"_*.deb 2>/dev/null | head -n1)"
  [ -n "$deb" ] || { echo "[real-sounds] no .deb for $pkg in $debs" >&2; exit 1; }
  # tar exits non-zero when one of the patterns matches nothing (no .flac in a package): list first
  local members
  members="$(dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -Ei "$sounds_re|/usr/share/doc/$pkg/copyright$")"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" -T <(printf '%s\n' "$members")
  cp "$tmp/usr/share/doc/$pkg/copyright" "$dest/copyright/$pkg"
}

for p in "${need[@]}"; do
  out="$dest/${target[$p]}"
  tmp="$(mktemp -d "$dest/.unpack-XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "[real-sounds] unpacking $p" >&2
  unpack "$p" "$tmp"
  rm -rf "$out"; mkdir -p "$out"
  case "$p" in
    scratch)
      cp -r "$tmp/usr/share/scratch/Media/Sounds/." "$out/" ;;
    minetest-data)
      for d in "$tmp"/usr/share/games/minetest/games/minetest_game/mods/*/sounds; do
        mod="$(basename "$(dirname "$d")")"
        mkdir -p "$out/$mod"
        for f in "$d"/*; do
          name="$(basename "$f")"
          cp "$f" "$out/$mod/${name#"${mod}"_}"
        done
      done ;;
    wesnoth-1.16-data)
      w="$tmp/usr/share/games/wesnoth/1.16"
      cp -r "$w/data/core/sounds" "$out/core"
      cp -r "$w/sounds" "$out/ui" ;;
    sound-theme-freedesktop)
      cp "$tmp"/usr/share/sounds/freedesktop/stereo/*.oga "$out/" ;;
    qabcs-data)  # the noises only: the other folders are spoken letters and words
      cp "$tmp"/usr/share/qabcs/abcs/all/noises/* "$out/" ;;
    widelands-data)
      w="$tmp/usr/share/games/widelands/data"
      cp -r "$w/sound/." "$out/"
      mkdir -p "$out/critters"
      for d in "$w"/world/critters/*/; do
        [ -n "$(find "$d" -maxdepth 1 -name '*.ogg' -print -quit)" ] || continue
        mkdir -p "$out/critters/$(basename "$d")"
        cp "$d"*.ogg "$out/critters/$(basename "$d")/"
      done ;;
    lincity-ng-data)
      cp "$tmp"/usr/share/games/lincity-ng/sounds/*.wav "$out/" ;;
    flare-game)  # sound effects; not the music, not the merchants' speech (soundfx/npcs)
      for m in "$tmp"/usr/share/games/flare/mods/*/soundfx; do
        mod="$(basename "$(dirname "$m")")"
        cp -r "$m" "$out/$mod"
        rm -rf "$out/$mod/npcs"
      done ;;
    sonic-pi-samples)
      cp "$tmp"/usr/share/sonic-pi/samples/*.flac "$out/" ;;
    lmms-common)  # not shapes/ and waveforms/ (single-cycle oscillator waveforms, not recordings)
      for d in "$tmp"/usr/share/lmms/samples/*/; do
        case "$(basename "$d")" in shapes|waveforms) continue ;; esac
        cp -r "$d" "$out/"
      done ;;
    sound-icons)  # the named links (at, capital, ...) point at these files: only the files
      find "$tmp/usr/share/sounds/sound-icons" -type f -name '*.wav' -exec cp {} "$out/" \; ;;
    micropolis-data)
      cp "$tmp"/usr/share/games/micropolis/res/sounds/*.wav "$out/" ;;
  esac
  find "$out" -type f | { grep -Eiv "$sounds_re" || true; } | xargs -r rm -f
  rm -rf "$tmp"; trap - EXIT
  touch "$out/.done"
  [ "${KEEP_DEBS:-0}" = 1 ] || rm -f "$debs/${p}"_*.deb
done

manifest="$dest/manifest.jsonl"
echo "[real-sounds] importing into $manifest" >&2
"$py" -m mlatr data import --format folder --skip-bad "$dest" -o "$manifest"
"$py" -m mlatr data recaption "$manifest" --in-place
"$py" -m mlatr data split "$manifest"
