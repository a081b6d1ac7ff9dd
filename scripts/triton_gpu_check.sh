#!/usr/bin/env bash
# Triton candidates on the GPU machine, in one go (after a build; scripts/gpu_figures.sh runs it as
# its `triton` stage):
#   1. the hostile Triton plans, each rejected with its reason, then every Triton plan of
#      tests/gpu/triton_plans correct at the small size (gpu_live_test's Triton test);
#   2. Triton compile time per kernel, cold and cached, beside NVRTC's (gpu_triton_bench);
#   3. every Triton plan beside the code generator's default plan for the same task, both through
#      `harness eval --device cuda` at the full size (correctness, median times, speedups).
# Writes triton_hostile.txt, triton_vs_cuda.md (and .jsonl) and triton_compile.txt into $VINCI_FIGS
# (default: triton-figures) and prints the tables.
#
#   bash scripts/triton_gpu_check.sh [BIN_DIR]     (BIN_DIR: default build-gpu/bin)
#
# Triton runs in whichever python can import it: $VINCI_TRITON_PYTHON, python3, or the torch
# virtual environment of the GPU machine (/opt/torch/.venv/bin/python3); the script exports it.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-gpu/bin}
figs=${VINCI_FIGS:-triton-figures}
mkdir -p "$figs"
size=${VINCI_TRITON_SIZE:-full}
samples=${VINCI_TRITON_SAMPLES:-30}
trials=${VINCI_TRITON_TRIALS:-3}
t0=${VINCI_T0:-$(date +%s)}

py=""
for c in "${VINCI_TRITON_PYTHON:-}" python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  [ -n "$c" ] || continue
  if "$c" -c 'import triton' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "triton: no python here can import triton (set VINCI_TRITON_PYTHON)"; exit 1
fi
export VINCI_TRITON_PYTHON=$py
echo "triton: $("$py" -c 'import sys, triton; print(triton.__version__, "from", sys.executable)')"

# 1. Hostile plans and the honest ones at the small size, through one evaluator.
"$bin/gpu_live_test" --gtest_filter='CudaEvaluator.TritonPlansMeetEveryCheckOfACudaPlan' 2>&1 |
  tee "$figs/triton_hostile.txt" | grep -E "^\S+ +.* (yes|NO) |OK \]|FAILED|SKIPPED|Skipped"

# 2. Compile times, cold and cached, beside NVRTC's.
"$bin/gpu_triton_bench" --size "$size" --cache /tmp/vinci-triton-bench 2>&1 | tee "$figs/triton_compile.txt"

# 3. Each Triton plan beside the generator's default plan, full size. With VINCI_DEADLINE (seconds
# from VINCI_T0, as gpu_figures.sh exports them) the plans left when time runs short are skipped.
rm -rf /tmp/vinci-triton-cache
jsonl=$figs/triton_vs_cuda.jsonl
: >"$jsonl"
for f in tests/gpu/triton_plans/*.md; do
  name=$(basename "$f" .md)
  task=${name:0:6}
  if [ -n "${VINCI_DEADLINE:-}" ] && [ $(( $(date +%s) - t0 )) -gt $(( VINCI_DEADLINE - 45 )) ]; then
    echo "triton: $name skipped: the deadline is near"; continue
  fi
  for kind in triton cuda; do
    args=("$task" --device cuda --size "$size" --trials "$trials" --samples "$samples"
      --nvrtc-cache /tmp/vinci-triton-cache)
    [ "$kind" = triton ] && args+=(--plan "$f")
    out=$("$bin/harness" eval "${args[@]}" 2>/tmp/vinci-triton-eval.err)
    echo "exit $?" >>/tmp/vinci-triton-eval.err
    "$py" - "$name" "$kind" "$out" "$(cat /tmp/vinci-triton-eval.err)" >>"$jsonl" <<'PY'
import json, sys
name, kind, out, err = sys.argv[1:5]
try:
    r = json.loads(out.splitlines()[0]) if out.strip() else {}
except Exception:
    r = {}
print(json.dumps({"plan": name, "kind": kind, "correct": r.get("correct"), "kernel_us": r.get("kernelUs"),
                  "reference_us": r.get("referenceUs"), "speedup": r.get("speedup"),
                  "error": (r.get("error") or "")[:300],
                  "triton_version": {e["key"]: e["value"] for e in r.get("settings", [])}.get("triton_version"),
                  "stderr": err[-400:]}))
PY
  done
done
"$py" - "$jsonl" "$size" >"$figs/triton_vs_cuda.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["plan"], {})[r["kind"]] = r
print("Triton plans beside the code generator's default CUDA plan, size %s, on the GPU\n" % sys.argv[2])
print("| plan | triton correct | triton us | cuda correct | cuda us | reference us | triton speedup | cuda speedup | triton/cuda time |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|")
fmt = lambda v: "-" if v is None else ("%.4g" % v)
for plan, k in sorted(by.items()):
    t, c = k.get("triton", {}), k.get("cuda", {})
    ratio = t["kernel_us"] / c["kernel_us"] if t.get("kernel_us") and c.get("kernel_us") and t.get("correct") and c.get("correct") else None
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (plan, t.get("correct"), fmt(t.get("kernel_us")),
          c.get("correct"), fmt(c.get("kernel_us")), fmt(t.get("reference_us")), fmt(t.get("speedup")),
          fmt(c.get("speedup")), fmt(ratio)))
for plan, k in sorted(by.items()):
    for kind, r in sorted(k.items()):
        if not r.get("correct"):
            print("\n%s (%s): %s %s" % (plan, kind, r.get("error"), r.get("stderr", "")[-200:]))
PY
cat "$figs/triton_vs_cuda.md"

