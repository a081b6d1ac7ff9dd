#!/usr/bin/env bash
# The cost of the live evaluator's timing protocol per evaluation, two builds side by side on one
# GPU: `harness eval TASK --device cuda --size full` of the generator's plan, REPEAT times per task
# and build, the builds alternating, each a fresh process (the worker's own "evaluation ... ms", so
# process start and the CUDA context are not counted). Prints each build's median per task and the
# ratio. docs/live_evaluator.md ("Timing") quotes its output.
#
#   bash scripts/timing_overhead.sh BEFORE_BIN AFTER_BIN [REPEAT] [TASK...]
set -euo pipefail
before=$1
after=$2
repeat=${3:-5}
shift 3 || shift $#
tasks=("$@")
((${#tasks[@]})) || tasks=(L1_019 L1_001)
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
one() {  # BIN TASK -> the worker's evaluation time in ms
  "$1/harness" eval "$2" --device cuda --size full --nvrtc-cache /tmp/vinci-nvrtc-overhead 2>&1 >/dev/null |
    sed -n 's/.*evaluation \([0-9.]*\) ms.*/\1/p'
}
printf '%-8s %12s %12s %8s\n' task before_ms after_ms ratio
for t in "${tasks[@]}"; do
  one "$before" "$t" >/dev/null  # warm the NVRTC cache and the GPU for both
  one "$after" "$t" >/dev/null
  b=() a=()
  for _ in $(seq "$repeat"); do
    b+=("$(one "$before" "$t")")
    a+=("$(one "$after" "$t")")
  done
  mb=$(printf '%s\n' "${b[@]}" | median)
  ma=$(printf '%s\n' "${a[@]}" | median)
  printf '%-8s %12.1f %12.1f %8.3f\n' "$t" "$mb" "$ma" "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print a / b}')"
done
