#!/usr/bin/env bash
# Optional Debian packages that some features and their tests use; sourced by scripts/test.sh.
# Each test that needs one skips with the reason when it is missing, so this never fails the set-up:
# without root or apt-get (a laptop, a container without sudo) it says what it skipped and goes on.
# Add a package here with the feature that needs it.
system_packages=(
  chromium chromium-driver   # mlatr serve's web page, tested in a real browser (tests/test_serve_browser.py)
  apertium-eng-spa  # mlatr demo-real's default recipe, data translate / translation-qa --backend apertium (eng<->spa)
  apertium-eng-cat  # the same for eng<->cat
)
missing=()
for pkg in "${system_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing Debian packages: ${missing[*]}" >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"; } >/tmp/mlatr-apt.log 2>&1; then
      echo "[setup] apt-get failed (see /tmp/mlatr-apt.log); the tests that need ${missing[*]} will skip" >&2
    fi
  else
    echo "[setup] not root or no apt-get: skipping Debian packages ${missing[*]} (their tests will skip)" >&2
  fi
fi
