#!/usr/bin/env bash
# Configures and builds vinci into build/ (binaries in build/bin/). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DVINCI_BUILD_BENCH=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# VINCI_WERROR=1 (CI) makes compiler warnings errors when build/ is first configured.
werror=()
if [ -n "${VINCI_WERROR:-}" ]; then werror=(-DVINCI_WERROR=ON); fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${werror[@]}" "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build --parallel "$(nproc)"
