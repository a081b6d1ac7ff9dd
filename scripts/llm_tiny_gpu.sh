#!/usr/bin/env bash
# The learning loop's figures on the GPU machine (docs/training.md, "Measured"), run as a stage of
# scripts/gpu_figures.sh after its build:
#
#   VINCI_DEADLINE=585 bash scripts/gpu_figures.sh 'sh:bash scripts/llm_tiny_gpu.sh tests throughput'
#   (then, on the warm machine)  source build-gpu/env.sh && VINCI_FIGS=$OUT/f bash scripts/llm_tiny_gpu.sh loop python
#
# 1. lm_tests against the machine's CUDA libtorch (the device branch of the tests);
# 2. harness lm's generation and training throughput, on the GPU with passes of 16 samples and
#    on one CPU thread, same sizes (scripts/lm_throughput.py);
# 3. experiments/llm_tiny.toml with a larger batch (7 training tasks x 8 rollouts a step) against
#    harness lm on the GPU, its wall time per step, and replay verify of the run;
# 4. whether vLLM and PEFT can be imported there.
# Everything goes to $VINCI_FIGS (packed by gpu_figures.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
figs=${VINCI_FIGS:-gpu-figures/f}
bin=build-gpu/bin
mkdir -p "$figs"
parts=" ${*:-all} "
has() { [[ "$parts" == *" $1 "* || "$parts" == *" all "* ]]; }
if has tests; then
echo "== lm_tests"
timeout 300 "$bin/lm_tests" --gtest_brief=1 >"$figs/lm_tests.txt" 2>&1
echo "lm_tests rc=$?"; tail -n 5 "$figs/lm_tests.txt"
fi
if has throughput; then
echo "== throughput"
for dev in "cuda --train-batch 16" "cpu"; do
  # shellcheck disable=SC2086
  timeout 240 python3 scripts/lm_throughput.py --harness "$bin/harness" --device $dev --requests 8 \
    --prompt-tokens 256 --max-tokens 128 --samples 64 --sample-tokens 384 --epochs 2 --batch 16 \
    2>&1 | tee -a "$figs/lm_throughput.jsonl"
done
fi
if has loop; then
echo "== llm_tiny, larger batch, on the GPU"
store=$(mktemp -d)
"$bin/harness" lm --port 0 --store "$store" --context 512 --device cuda --train-batch 16 \
  >"$figs/lm_port.txt" 2>"$figs/lm_server.txt" &
lm=$!
for _ in $(seq 600); do grep -q "^listening on" "$figs/lm_port.txt" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$figs/lm_port.txt")
url=http://127.0.0.1:$port/v1
s0=$(date +%s)
timeout 420 "$bin/harness" run experiments/llm_tiny.toml --out "$figs/runs" --name llm_tiny_gpu \
  --set backbone.base_url=$url --set trainer.url=$url --set loop.batch_tasks=7 --set loop.rollouts=8 \
  --set trainer.batch=16 --set backbone.concurrency=8 >"$figs/llm_tiny_gpu.out" 2>"$figs/llm_tiny_gpu.err"
echo "llm_tiny_gpu rc=$? in $(( $(date +%s) - s0 )) s"
kill "$lm"; wait "$lm" 2>/dev/null
tail -n 12 "$figs/llm_tiny_gpu.err"; tail -n 4 "$figs/llm_tiny_gpu.out"; tail -n 2 "$figs/lm_server.txt"
"$bin/replay" verify "$figs/runs/llm_tiny_gpu" 2>&1 | tail -n 2
tar -C "$figs/runs" -czf "$figs/llm_tiny_gpu_run.tar.gz" llm_tiny_gpu objects 2>/dev/null
rm -rf "$figs/runs" "$store"
fi
if has python; then
echo "== python packages"
python3 - <<'PY' 2>&1 | tee "$figs/python.txt"
import importlib
for m in ("torch", "transformers", "peft", "vllm"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "missing:", type(e).__name__, str(e)[:120])
PY
fi
