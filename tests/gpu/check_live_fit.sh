#!/usr/bin/env bash
# The committed fitted profile (gpu/device_profiles/h200_live_fit.toml) must be what the committed
# sweeps (gpu/measurements/h200_full_l1*.jsonl) fit to with this build's simulator and calibration:
# a change to either that moves the fit fails here, and the profile must be re-fitted (the command
# is in the profile's header). The sweeps measured the suite of 2026-12-02 (63 tasks, before the
# suite became all of KernelBench and some tasks became KernelBench's own problems), kept in
# gpu/measurements/suite_2026-12-02/ so the plans they name are generated again.
set -euo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/harness" measure --size full --tasks "$src/gpu/measurements/suite_2026-12-02" --from-measurements "$src/gpu/measurements/h200_full_l1.jsonl" \
  --from-measurements "$src/gpu/measurements/h200_full_l1b_l2_l3.jsonl" --out "$out" >/dev/null 2>"$out/err" || {
  cat "$out/err"
  # exit 1 only means some guaranteed plan was wrong live; the fit is still written.
  [ -f "$out/fitted_profile.toml" ] || exit 1
}
grep -v '^#' "$src/gpu/device_profiles/h200_live_fit.toml" | sed 's/^name = "h200-live-fit"/name = "h200-datasheet"/' >"$out/want.toml"
if ! diff -u "$out/want.toml" "$out/fitted_profile.toml"; then
  echo "the fit of the committed measurements changed: re-fit gpu/device_profiles/h200_live_fit.toml (see its header)"
  exit 1
fi
grep -q "Guaranteed plans correct: 212 / 219" "$out/report.md" || { grep Guaranteed "$out/report.md"; exit 1; }
echo "h200_live_fit.toml reproduces"
