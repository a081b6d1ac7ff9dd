#!/usr/bin/env bash
# KernelBench modules on the GPU machine, after a build (docs/kernelbench_format.md):
#   1. the import check of each module of tests/gpu/kernelbench_modules in the module sandbox
#      (`harness eval L1_019 --plan FILE --check-import --module-cache DIR`; a CUDA module's
#      load_inline compile runs there), twice: cold, then from the build cache, with wall-clock times;
#   2. load_inline's own compile of the CUDA module outside any sandbox, as KernelBench's evaluator
#      runs it: cold (a fresh TORCH_EXTENSIONS_DIR) and cached (the same folder, a new process).
# Prints a table and writes it to $VINCI_FIGS/module_check.md (default: module-figures).
#
#   bash scripts/module_gpu_check.sh [BIN_DIR]     (BIN_DIR: default build-gpu/bin)
#
# VINCI_MODULE_DIRS (default tests/gpu/kernelbench_modules) names the folders of modules to check,
# e.g. KernelBench's own examples (its src/kernelbench/prompts/model_new_ex_*.py) copied beside.
#
# The modules run in whichever python has torch with CUDA: $VINCI_MODULE_PYTHON, python3, or the
# GPU machine's /opt/torch/.venv/bin/python3; the script exports it.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-gpu/bin}
figs=${VINCI_FIGS:-module-figures}
mkdir -p "$figs"
out=$figs/module_check.md

py=""
for c in "${VINCI_MODULE_PYTHON:-}" python3 /opt/torch/.venv/bin/python3; do
  [ -n "$c" ] || continue
  if "$c" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "module_gpu_check: no python here has torch with CUDA (set VINCI_MODULE_PYTHON)"; exit 1
fi
export VINCI_MODULE_PYTHON=$py
# load_inline finds nvcc and ninja on PATH.
export PATH=/usr/local/cuda/bin:$(dirname "$py"):$PATH
versions=$("$py" -c 'import sys, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "from", sys.executable)')
echo "module_gpu_check: $versions"

{
  echo "# KernelBench modules: import check and load_inline compile times"
  echo
  echo "$versions; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
  echo
  echo "| module | backend | import check | kind | cold s (cache) | again s (cache) | static flags |"
  echo "|---|---|---|---|---|---|---|"
} >"$out"
status=0
cache=$(mktemp -d /tmp/vinci_module_cache_XXXXXX)
field() { "$py" -c 'import json, sys
try:
    v = json.loads(sys.argv[1]).get(sys.argv[2], "-")
    print("; ".join(v) or "none" if isinstance(v, list) else v)
except Exception:
    print("?")' "$1" "$2"; }
for f in $(for d in ${VINCI_MODULE_DIRS:-tests/gpu/kernelbench_modules}; do ls "$d"/*.py; done); do
  name=$(basename "$f" .py)
  times=()
  for pass in cold again; do
    t0=$(date +%s.%N)
    json=$("$bin/harness" eval L1_019 --plan "$f" --check-import --module-cache "$cache" 2>"$figs/$name.$pass.err")
    rc=$?
    t1=$(date +%s.%N)
    echo "$json" >"$figs/$name.$pass.json"
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') ($(field "$json" cache))")
  done
  verdict=$(field "$json" import)
  [ "$rc" -eq 0 ] || { status=1; verdict="$verdict (exit $rc: $(head -c 300 "$figs/$name.again.err" | tr '\n' ' '))"; }
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$(field "$json" backend)" "$verdict" "$(field "$json" kind)" \
    "${times[0]}" "${times[1]}" "$(field "$json" static_flags)" >>"$out"
done
rm -rf "$cache"

# load_inline outside the sandbox, as KernelBench's evaluator runs it.
ext=$(mktemp -d /tmp/vinci_load_inline_XXXXXX)
{
  echo
  echo "| load_inline of relu_cuda.py (no sandbox) | wall s |"
  echo "|---|---|"
} >>"$out"
for run in cold cached; do
  s=$(TORCH_EXTENSIONS_DIR=$ext "$py" -c 'import importlib.util, sys, time
t = time.time()
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
print("%.1f" % (time.time() - t))' tests/gpu/kernelbench_modules/relu_cuda.py 2>"$figs/load_inline_$run.err")
  echo "| $run | ${s:-failed: $(head -c 300 "$figs/load_inline_$run.err" | tr '\n' ' ')} |" >>"$out"
done
rm -rf "$ext"
cat "$out"
exit $status
