#!/usr/bin/env bash
# Quick start 2: set up, then run the test suite (extra arguments go to pytest).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
source "$root/scripts/setup-system.sh"
cd "$root"
exec python -m pytest "$@"
