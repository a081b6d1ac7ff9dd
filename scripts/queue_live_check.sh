#!/usr/bin/env bash
# On a GPU machine: re-measures one sim run's kernels on this GPU four times, in process and
# through a Redis queue with one GPU worker, alternating (in process, queued, in process, queued),
# and compares the verdicts plan by plan and the wall time per plan of the second pair (caches warm).
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
wpid=
trap 'kill $wpid "$rpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
url=redis://127.0.0.1:$port
"$bin/harness" run experiments/smoke.toml --out "$work" >"$out/queue_run.log" 2>&1 || { tail "$out/queue_run.log"; exit 1; }
args=(--live --trials 2 --samples 5 --timing-budget 0.3)
cache=$work/nvrtc
"$bin/harness" worker --queue "$url" --device cuda --gpu 0 --name gpu0 --nvrtc-cache "$cache" >"$out/queue_worker.log" 2>&1 &
wpid=$!
sleep 2
declare -A secs rc
for name in inproc1 queued1 inproc2 queued2; do
  extra=(--nvrtc-cache "$cache")
  [[ $name == queued* ]] && extra=(--queue "$url")
  t0=$(date +%s.%N)
  "$bin/replay" rescore "$work/smoke" "${args[@]}" "${extra[@]}" --out "$work/$name" >"$out/queue_$name.txt" 2>&1
  rc[$name]=$?
  t1=$(date +%s.%N)
  secs[$name]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
done
"$bin/harness" queue status --queue "$url" >"$out/queue_status.txt" 2>&1
plans=$(grep -c . "$work/inproc2/measurements.jsonl" 2>/dev/null || echo 0)
{
  echo "# Rescore on this GPU: in process vs through Redis (one GPU worker)"
  echo
  echo "- run: experiments/smoke.toml; rescore ${args[*]}; plans measured: $plans"
  for name in inproc1 queued1 inproc2 queued2; do echo "- $name: exit ${rc[$name]}, ${secs[$name]} s"; done
  awk -v a="${secs[inproc2]}" -v b="${secs[queued2]}" -v n="$plans" 'BEGIN {
    if (n > 0) printf "- per plan, queued minus in process (second pair, caches warm): %.2f ms\n", 1000 * (b - a) / n }'
  for pair in "inproc1 inproc2" "queued1 queued2" "inproc1 queued1" "inproc2 queued2"; do
    set -- $pair
    echo "- verdicts $1 vs $2: $(python3 scripts/verdict_diff.py "$bin" "$work/$1" "$work/$2" | tail -n 1)"
  done
  echo
  echo '```'
  for pair in "inproc1 inproc2" "inproc1 queued1" "inproc2 queued2" "queued1 queued2"; do
    set -- $pair
    echo "== $1 vs $2"
    python3 scripts/verdict_diff.py "$bin" "$work/$1" "$work/$2" | head -n 40
  done
  echo '```'
  "$bin/replay" verify "$work/queued2" 2>&1 | tail -n 1 | sed 's/^/- queued run verify: /'
} | tee "$out/queue_live.md"
