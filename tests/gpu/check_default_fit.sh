#!/usr/bin/env bash
# The default profile (data/device_profiles/h200.toml) must be what `harness calibrate` fits to the
# committed measurements (data/measurements/calibration.toml) from the datasheet figures, and the
# held-out agreement must not fall below what data/measurements/calibration_expected.txt allows.
# A change to the simulator, the calibration or the data that moves either fails here: re-fit
# (`harness calibrate --out data/device_profiles/h200.toml`, then restore the comments) and say why.
set -euo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/harness" calibrate --out "$out/fit.toml" --report "$out/report.md" --check \
  --expect "$src/data/measurements/calibration_expected.txt" >/dev/null
# The fitted file names the profile it started from; the default is named h200.
sed 's/^name = "h200-datasheet"/name = "h200"/' "$out/fit.toml" >"$out/fit_named.toml"
"$bin/harness" calibrate --judge --profile "$src/data/device_profiles/h200.toml" >"$out/judge_default.md"
"$bin/harness" calibrate --judge --profile "$out/fit_named.toml" >"$out/judge_fit.md"
# Same figures (comments aside): the two profiles judge every plan alike.
if ! diff <(tail -n +2 "$out/judge_default.md") <(tail -n +2 "$out/judge_fit.md"); then
  echo "data/device_profiles/h200.toml is no longer the fit of the committed measurements: re-fit it"
  exit 1
fi
echo "h200.toml is the fit of the committed measurements; held-out goals hold as expected"
