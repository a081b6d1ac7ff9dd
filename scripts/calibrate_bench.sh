#!/usr/bin/env bash
# Wall and CPU time of the default-fit check (tests/gpu/check_default_fit.sh: `harness calibrate`
# with --check, then two --judge tables), the median of N runs, and whether every output is the
# same as a reference binary's, byte for byte (fit.toml, report.md, the --check verdict, both
# --judge tables). Use it to show a speed-up leaves the fit as it was.
#
#   bash scripts/calibrate_bench.sh [RUNS] [REFERENCE_HARNESS]     (default 3 runs, no comparison)
#
# Needs build/bin/harness (ninja -C build harness).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
ref=${2:-}
dir=$(mktemp -d /tmp/vinci_calibrate_bench_XXXXXX)
trap 'rm -rf "$dir"' EXIT

# Every output of the check's three commands, into $2.
outputs() {
  local bin=$1 o=$2
  mkdir -p "$o"
  local rc=0
  "$bin" calibrate --out "$o/fit.toml" --report "$o/report.md" --check \
    --expect data/measurements/calibration_expected.txt >"$o/stdout.md" 2>"$o/stderr.txt" || rc=$?
  echo "$rc" >"$o/check_rc.txt"
  sed -i "s#$o#OUT#g" "$o/stderr.txt"
  sed 's/^name = "h200-datasheet"/name = "h200"/' "$o/fit.toml" >"$o/fit_named.toml"
  "$bin" calibrate --judge --profile data/device_profiles/h200.toml >"$o/judge_default.md"
  "$bin" calibrate --judge --profile "$o/fit_named.toml" >"$o/judge_fit.md"
}

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  /usr/bin/time -f "%e %U %S" -o "$dir/t$i" bash tests/gpu/check_default_fit.sh build/bin . >"$dir/log$i" 2>&1
  read -r real user sys <"$dir/t$i"
  echo "run $i: ${real} s wall, ${user} s user, ${sys} s sys"
  echo "$real" >>"$dir/walls"
done
echo "median wall: $(sort -n "$dir/walls" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s"
if [[ -n "$ref" ]]; then
  outputs build/bin/harness "$dir/new"
  outputs "$ref" "$dir/ref"
  if diff -r "$dir/ref" "$dir/new"; then echo "outputs: identical to $ref"; else echo "outputs: DIFFER from $ref"; exit 1; fi
fi
