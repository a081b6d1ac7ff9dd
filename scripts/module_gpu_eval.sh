#!/usr/bin/env bash
# KernelBench modules evaluated on the GPU machine's GPU, after a build (docs/kernelbench_format.md,
# "Live evaluation"): `harness eval TASK --plan FILE --device cuda --module-cache DIR` for each
# module, twice where VINCI_MODULE_AGAIN=1 (the second from the build cache), and a table of the
# verdicts: correct or the rejection, speedup, the module's and the reference's median, time
# coverage, decoy, flags, and the wall-clock seconds of the whole evaluation.
#
#   bash scripts/module_gpu_eval.sh [BIN_DIR]     (BIN_DIR: default build-gpu/bin)
#
# VINCI_MODULE_DIRS (default: tests/gpu/kernelbench_modules and its hostile/ and suite/ folders) names the
# folders of modules; VINCI_MODULE_FILES, when set, names the module files instead. A module's task
# is named by a line `# vinci-task: ID` in it; KernelBench's own examples (model_new_ex_add*.py,
# few_shot/model_new_ex_*.py of a KernelBench checkout) are evaluated on the tasks of
# tests/gpu/kernelbench_modules/examples; any other module on L1_019. VINCI_MODULE_SIZE: full
# (default) or small. Writes the table to
# $VINCI_FIGS/module_eval.md (default module-figures) and each record to $VINCI_FIGS/NAME.json.
# VINCI_MODULE_EVAL_ARGS: more arguments of each `harness eval` (e.g. --profile-phases).
# Secrets are set in the harness's environment (VINCI_TEST_API_KEY) to show they do not reach a
# module.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build-gpu/bin}
figs=${VINCI_FIGS:-module-figures}
size=${VINCI_MODULE_SIZE:-full}
mkdir -p "$figs"
out=$figs/module_eval.md

py=""
for c in "${VINCI_MODULE_PYTHON:-}" python3 /opt/torch/.venv/bin/python3; do
  [ -n "$c" ] || continue
  if "$c" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then
  echo "module_gpu_eval: no python here has torch with CUDA (set VINCI_MODULE_PYTHON)"; exit 1
fi
export VINCI_MODULE_PYTHON=$py
export PATH=/usr/local/cuda/bin:$(dirname "$py"):$PATH
export VINCI_TEST_API_KEY=sk-vinci-test-secret-0123456789
versions=$("$py" -c 'import sys, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)')
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
echo "module_gpu_eval: $versions on $gpu, size $size"
{
  echo "# KernelBench modules on the GPU: verdicts"
  echo
  echo "$versions; $gpu; size $size"
  echo
  echo "| module | task | verdict | speedup | module us | reference us | coverage | flags | wall s |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$out"
cache=$(mktemp -d /tmp/vinci_module_eval_cache_XXXXXX)
dirs=${VINCI_MODULE_DIRS:-tests/gpu/kernelbench_modules tests/gpu/kernelbench_modules/hostile tests/gpu/kernelbench_modules/suite}
files=${VINCI_MODULE_FILES:-$(for d in $dirs; do ls "$d"/*.py; done)}
for f in $files; do
  name=$(basename "$(dirname "$f")")_$(basename "$f" .py)
  task=$(sed -n 's/^# vinci-task: *\([A-Za-z0-9_]*\).*/\1/p' "$f" | head -n1)
  tasks=()
  if [ -z "$task" ]; then
    case $(basename "$f") in
      model_new_ex_add*.py) task=KB_ADD ;;
      model_new_ex_fuse_gelu.py) task=KB_FUSE_GELU ;;
      model_new_ex_tiled_matmul.py) task=KB_TILED_MATMUL ;;
      model_new_ex_flash_attn.py) task=KB_FLASH_ATTN ;;
      model_new_ex_mnist2.py) task=KB_MNIST2 ;;
    esac
    [ -n "$task" ] && tasks=(--tasks tests/gpu/kernelbench_modules/examples)
  fi
  task=${task:-L1_019}
  passes=first
  [ "${VINCI_MODULE_AGAIN:-0}" = 1 ] && passes="first again"
  for pass in $passes; do
    t0=$(date +%s.%N)
    "$bin/harness" eval "$task" "${tasks[@]}" --plan "$f" --device cuda --size "$size" --module-cache "$cache" ${VINCI_MODULE_EVAL_ARGS:-} \
      >"$figs/$name.$pass.json" 2>"$figs/$name.$pass.err"
    rc=$?
    t1=$(date +%s.%N)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    row=$("$py" - "$figs/$name.$pass.json" "$figs/$name.$pass.err" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception:
    err = open(sys.argv[2]).read().strip().splitlines()
    print("| no record: %s | | | | | |" % (err[-1][:200] if err else "?"))
    sys.exit(0)
flags = [f for f in r.get("flags", []) if not f.startswith("static:")]
statics = [f[len("static: "):].split(":")[0] for f in r.get("flags", []) if f.startswith("static:")]
rejected = [f[len("rejected: "):] for f in flags if f.startswith("rejected: ")]
verdict = "correct" if r.get("correct") else ("rejected: " + (rejected[0] if rejected else "?"))
other = [f for f in flags if not f.startswith("rejected: ")]
text = "; ".join(x[:90] for x in other) + (" [static: %s]" % ", ".join(statics) if statics else "")
err = r.get("error", "")
if err and not r.get("correct"):
    text = err[:160].replace("|", "/") + ("; " + text if text else "")
print("| %s | %.3g | %.1f | %.1f | %.2f | %s |" % (verdict, r.get("speedup", 0) or 0, r.get("kernelUs", 0) or 0,
      r.get("referenceUs", 0) or 0, r.get("timeCoverage", 0) or 0, text.replace("\n", " ")))
PY
)
    echo "| $name${pass/first/} | $task $row $wall |" | sed 's/ again/ (again)/' >>"$out"
    echo "module_gpu_eval: $name ($pass): rc $rc, $wall s"
  done
done
rm -rf "$cache"
cat "$out"
