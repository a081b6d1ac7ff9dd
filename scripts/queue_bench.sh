#!/usr/bin/env bash
# Evaluations per second through the evaluation queue with 1, 2 and 4 sim workers, beside the
# same evaluations in process (docs/distributed.md, "Throughput"). A redis-server on a free
# loopback port in a temporary folder; the workers are `harness worker` processes.
#
#   bash scripts/queue_bench.sh [REQUESTS] [CALLERS]      (defaults 2000 and 16)
#
# Needs build/bin/harness and build/bin/queue_throughput (ninja -C build harness queue_throughput).
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-2000}
callers=${2:-16}
bin=build/bin
dir=$(mktemp -d /tmp/vinci_queue_bench_XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
redis_pid=$!
workers=()
cleanup() {
  for p in "${workers[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "machine: $(nproc) cores; $requests evaluations (small sizes of the smoke tasks), $callers callers through the queue"
printf '| evaluator | evaluations/s |\n|---|---|\n'
printf '| in process (one thread, as a run evaluates) | %s |\n' \
  "$($bin/queue_throughput --in-process --requests "$requests" | sed 's/.*: \([0-9]*\) evaluations\/s.*/\1/')"
for n in 1 2 4; do
  url="redis://127.0.0.1:$port/bench$n"
  workers=()
  for i in $(seq "$n"); do
    $bin/harness worker --queue "$url" --name "bench$n-$i" 2>>"$dir/workers.log" &
    workers+=($!)
  done
  sleep 1  # the workers load libtorch and join the group
  rate=$($bin/queue_throughput --queue "$url" --requests "$requests" --callers "$callers" |
         sed 's/.*: \([0-9]*\) evaluations\/s.*/\1/')
  printf '| queue, %d sim worker(s) | %s |\n' "$n" "$rate"
  for p in "${workers[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  workers=()
done
