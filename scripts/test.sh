#!/usr/bin/env bash
# Sets up, builds and runs every test (the README's second command; .ci/run calls it).
# Pass ctest arguments to narrow it: scripts/test.sh -LE slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" "$@"
