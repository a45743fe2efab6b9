#!/usr/bin/env bash
# Quick start 1: set up, then run the offline demo (extra arguments go to `mlatr demo`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$root"
exec mlatr demo "$@"
