#!/usr/bin/env bash
# On a GPU machine: re-measures one sim run's kernels on this GPU twice, in process and through a
# Redis queue with one GPU worker, and compares the verdicts and the wall time per plan.
#   bash scripts/queue_live_check.sh OUT_DIR [BIN_DIR]
# Redis listens on loopback only. Writes OUT_DIR/queue_live.md.
set -uo pipefail
out=${1:?usage: queue_live_check.sh OUT_DIR [BIN_DIR]}
bin=${2:-build-gpu/bin}
mkdir -p "$out"
work=$(mktemp -d)
port=6399
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always \
  --dir "$work" >"$work/redis.log" 2>&1 &
rpid=$!
trap 'kill "$wpid" "$rpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
url=redis://127.0.0.1:$port
"$bin/harness" run experiments/smoke.toml --out "$work" >"$out/queue_run.log" 2>&1 || { tail "$out/queue_run.log"; exit 1; }
args=(--live --trials 2 --samples 5 --timing-budget 0.3)
t0=$(date +%s.%N)
"$bin/replay" rescore "$work/smoke" "${args[@]}" --out "$work/inproc" >"$out/queue_inproc.txt" 2>&1
e1=$?
t1=$(date +%s.%N)
"$bin/harness" worker --queue "$url" --device cuda --gpu 0 --name gpu0 >"$out/queue_worker.log" 2>&1 &
wpid=$!
sleep 2
t2=$(date +%s.%N)
"$bin/replay" rescore "$work/smoke" "${args[@]}" --queue "$url" --out "$work/queued" >"$out/queue_queued.txt" 2>&1
e2=$?
t3=$(date +%s.%N)
"$bin/harness" queue status --queue "$url" >"$out/queue_status.txt" 2>&1
plans=$(grep -c . "$work/inproc/measurements.jsonl" 2>/dev/null || echo 0)
verdicts() { sed -n 's/^| \(L[0-9]_[0-9]*\) | \([0-9]*\) | [0-9]* | \([0-9]*\) | .*/\1 \2 \3/p' "$1"; }
{
  echo "# Rescore on this GPU: in process vs through Redis (one GPU worker)"
  echo
  echo "- run: experiments/smoke.toml; rescore ${args[*]}; plans measured: $plans"
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v n="$plans" -v e1="$e1" -v e2="$e2" 'BEGIN {
    printf "- in process: exit %d, %.1f s\n- queued: exit %d, %.1f s\n", e1, b - a, e2, d - c
    if (n > 0) printf "- per plan, queued minus in process: %.2f ms\n", 1000 * ((d - c) - (b - a)) / n }'
  if diff <(verdicts "$work/inproc/drift.md") <(verdicts "$work/queued/drift.md") >"$work/vd"; then
    echo "- correct plans per task: the same in both ($(verdicts "$work/inproc/drift.md" | wc -l) tasks)"
  else
    echo "- correct plans per task DIFFER:"; sed 's/^/    /' "$work/vd"
  fi
  "$bin/replay" verify "$work/queued" 2>&1 | tail -n 1 | sed 's/^/- queued run verify: /'
} | tee "$out/queue_live.md"
