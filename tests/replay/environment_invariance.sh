#!/usr/bin/env bash
# A run's digest depends on the code and its config, not on the machine's incidental settings:
# the golden run verifies, and a re-run of its config diffs equal to it, under environment
# variables a machine may or may not set (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset and set,
# ATEN_CPU_CAPABILITY unset), another time zone and locale, one CPU, another working folder and
# runs root, and OpenBLAS offered ahead of the reference BLAS where the machine has it. docs/determinism.md ("Numeric pinning") says what is compared and why.
#
# usage: environment_invariance.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
golden=$src/tests/golden/runs/smoke
work=$(mktemp -d /tmp/vinci_envinv_XXXXXX)
trap 'rm -rf "$work"' EXIT

# One CPU when the machine lets us choose (taskset is in util-linux); all of them otherwise.
one_cpu=()
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then one_cpu=(taskset -c 0); fi

# name | environment (env(1) arguments)
cases=(
  "unset|-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u ATEN_CPU_CAPABILITY"
  "set|OPENBLAS_CORETYPE=Haswell OPENBLAS_L2_SIZE=1048576"
  "elsewhere|TZ=Pacific/Chatham LANG=C.UTF-8 LC_ALL=C.UTF-8 OPENBLAS_CORETYPE=Zen"
)
# Where OpenBLAS is on the machine, offer it first: the reference BLAS must still be the one in
# effect (vinci's RPATH pins it).
for lib in /usr/lib/*/openblas*/libblas.so.3; do
  [ -e "$lib" ] && cases+=("openblas|LD_LIBRARY_PATH=$(dirname "$lib")") && break
done
failed=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a vars <<<"${c#*|}"
  out=$(env "${vars[@]}" "$bin/replay" verify "$golden" 2>&1) || {
    echo "FAIL [$name] replay verify of the golden run:"; echo "$out"; failed=1; continue; }
  if grep -q "note:" <<<"$out"; then
    echo "FAIL [$name] verify reports other numeric settings where none differ in effect:"
    echo "$out"; failed=1
  fi
  # A re-run from another folder, into another runs root, on one CPU.
  dir=$work/$name/a/deeper/cwd
  mkdir -p "$dir"
  if ! out=$(cd "$dir" && env "${vars[@]}" "${one_cpu[@]}" "$bin/harness" run \
      "$src/experiments/smoke.toml" --out "$work/$name/runs root" 2>&1); then
    echo "FAIL [$name] harness run:"; echo "$out"; failed=1; continue
  fi
  if ! out=$("$bin/replay" diff "$golden" "$work/$name/runs root/smoke" 2>&1); then
    echo "FAIL [$name] the re-run differs from the golden run:"; echo "$out"; failed=1; continue
  fi
  echo "ok   [$name] golden run verifies and a re-run diffs equal"
done
exit $failed
