#!/usr/bin/env bash
# On a GPU node: how `replay rescore --live --queue` scales with the number of GPU workers, and a
# live rescore of a short experiments/main.toml run through all of them.
#   bash scripts/queue_scale_check.sh OUT_DIR [BIN_DIR]
# 1. The smoke run's kernels through 1, 2, 4 and 8 workers (as many as there are GPUs), one GPU
#    each; each count starts fresh workers on a warm NVRTC cache (a first pass compiles).
# 2. experiments/main.toml, one RL step (the run docs/h200_rescore.md describes), rescored live
#    through every GPU; the new run comes back as OUT_DIR/main_rescored.tar.gz with its drift.md.
# Redis listens on loopback only. Writes OUT_DIR/queue_scale.md.
set -uo pipefail
out=${1:?usage: queue_scale_check.sh OUT_DIR [BIN_DIR]}
bin=${2:-build-gpu/bin}
mkdir -p "$out"
work=$(mktemp -d)
port=6398
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
rpid=$!
wpid=
trap 'kill $wpid "$rpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
url=redis://127.0.0.1:$port
gpus=$(nvidia-smi -L | grep -c '^GPU')
cache=$work/nvrtc
args=(--live --trials 2 --samples 5 --timing-budget 0.3)
"$bin/harness" run experiments/smoke.toml --out "$work" >"$out/scale_smoke_run.log" 2>&1 || exit 1
start_workers() {  # N
  local list
  list=$(seq -s, 0 $(($1 - 1)))
  "$bin/harness" workers --queue "$url" --gpus "$list" --nvrtc-cache "$cache" >>"$out/scale_workers.log" 2>&1 &
  wpid=$!
  sleep 3
}
stop_workers() { kill -INT "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; wpid=; }
# Warm-up: compile every kernel once.
start_workers 1
"$bin/replay" rescore "$work/smoke" "${args[@]}" --queue "$url" --out "$work/warm" >"$out/scale_warm.txt" 2>&1
stop_workers
plans=$(grep -c . "$work/warm/measurements.jsonl" 2>/dev/null || echo 0)
{
  echo "# Rescore through the queue on $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  echo
  echo "smoke run, $plans plans, rescore ${args[*]} --queue (NVRTC cache warm):"
  echo
  echo "| workers | seconds | plans/s |"
  echo "|---:|---:|---:|"
} >"$out/queue_scale.md"
# Rescores RUN into $work/NAME through N fresh workers; sets secs (wall) and rc (exit).
rescore_through() {  # N RUN NAME
  start_workers "$1"
  local t0 t1
  t0=$(date +%s.%N)
  "$bin/replay" rescore "$2" "${args[@]}" --queue "$url" --out "$work/$3" >"$out/$3.txt" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  stop_workers
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
}
for n in 1 2 4 8; do
  ((n > gpus)) && break
  rescore_through "$n" "$work/smoke" "scale_$n"
  awk -v s="$secs" -v n="$n" -v p="$plans" -v e="$rc" \
    'BEGIN { printf "| %d | %.2f | %.1f |%s\n", n, s, p / s, (e ? " exit " e : "") }' >>"$out/queue_scale.md"
done
# The main run, through every GPU.
"$bin/harness" run experiments/main.toml --set loop.steps=1 --set loop.batch_tasks=4 --set loop.rollouts=2 \
  --set eval.every=1 --out "$work" >"$out/main_run.log" 2>&1 || { tail "$out/main_run.log"; exit 1; }
rescore_through "$gpus" "$work/main" main_rescored
mplans=$(grep -c . "$work/main_rescored/measurements.jsonl" 2>/dev/null || echo 0)
{
  echo
  awk -v s="$secs" -v n="$gpus" -v p="$mplans" -v e="$rc" \
    'BEGIN { printf "main.toml (1 RL step) rescored live through %d workers: exit %d, %d plans in %.1f s (%.2f plans/s)\n", n, e, p, s, p / s }'
  grep -E '^(records|digest):' "$out/main_run.log" | sed 's/^/sim run /'
  "$bin/replay" verify "$work/main_rescored" 2>&1 | tail -n 1 | sed 's/^/rescored run verify: /'
} | tee -a "$out/queue_scale.md"
cp "$work/main_rescored/drift.md" "$out/main_drift.md" 2>/dev/null
cp "$work/main_rescored/measurements.jsonl" "$out/main_measurements.jsonl" 2>/dev/null
# The rescored run with its objects (those of the sim run it came from are shared under one root).
tar -C "$work" -czf "$out/main_rescored.tar.gz" main main_rescored objects 2>/dev/null
cat "$out/queue_scale.md"
