#!/usr/bin/env bash
# Re-records the golden run that CI replays (tests/golden/runs/smoke), from experiments/smoke.toml.
#
# Run it only for a deliberate change of behaviour (the code generator's output, the sim model,
# the backbone, the loop's records), in the same commit as that change, and say why in the
# commit message: the golden run exists to catch every change that is not deliberate.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
"$build/bin/harness" --help >/dev/null
rm -rf tests/golden/runs
"$build/bin/harness" run experiments/smoke.toml --out tests/golden/runs
"$build/bin/replay" verify tests/golden/runs/smoke
rm -f tests/golden/runs/smoke/*.svg tests/golden/runs/smoke/metrics.csv
echo "golden run re-recorded: tests/golden/runs/smoke"
