#!/usr/bin/env bash
# The live CUDA evaluator's figures on the GPU machine, in one go: builds vinci (scripts/build_gpu.sh),
# runs the hostile-plan test and the generated-plan correctness test, then `harness measure` and
# whatever else the stage names, and packs every log and report into $OUT/figures.tar.gz (one file,
# so the device tool brings it back whole). A short table is printed last.
#
#   bash scripts/gpu_figures.sh STAGE...
#     STAGE: hostile | cudarun | triton | measure[:ARGS] | rescore[:ARGS] | llm[:ARGS] | eval:ARGS | sh:CMD
#
# triton runs scripts/triton_gpu_check.sh: the hostile Triton plans, every Triton plan of
# tests/gpu/triton_plans beside the generator's CUDA plan for its task, and Triton's compile times.
#
# sh:CMD runs CMD with bash after the build, with build-gpu/env.sh sourced, VINCI_FIGS (the folder
# packed into figures.tar.gz) and VINCI_T0 (the script's start, in seconds) exported.
#
# measure:ARGS passes ARGS (comma-separated) to `harness measure`, e.g. measure:--level,1,--plans,8;
# with VINCI_DEADLINE=S (seconds from the start of this script) a measure stage gets a --budget
# that ends it in time. rescore:ARGS records a short sim run of experiments/main.toml (ARGS are
# its --set overrides) and re-measures its kernels with `replay rescore --live`; its measurements
# come back as rescoreN_measurements.jsonl, and VINCI_RESCORE_REUSE=FILE (a carried copy of one)
# makes a later call measure only the rest. VINCI_DEADLINE stops a rescore in time too.
# llm:ARGS runs experiments/llm_main.toml (ARGS: its --set overrides) against `harness serve` on
# loopback, every candidate compiled and timed on the GPU, verifies it there, and brings the run
# back as $OUT/llm_run.tar.gz (replay verify it on any machine).
# Run from the repository root with carry [".deps"]; docs/live_evaluator.md has the command.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-figures}
mkdir -p "$out/f"
figs=$out/f
pack() { tar -C "$out" -czf "$out/figures.tar.gz" f 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
# For sh: stages: where figures go, and when the script started (VINCI_DEADLINE counts from it).
export VINCI_FIGS=$figs VINCI_T0=$t0
if ! VINCI_GPU_CTEST=0 bash scripts/build_gpu.sh -DVINCI_BUILD_BENCH=OFF >"$figs/build.log" 2>&1; then
  tail -n 40 "$figs/build.log"
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
source build-gpu/env.sh
bin=build-gpu/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >"$figs/gpu.txt" 2>&1
# What a Triton compile runs in there (the triton_sandbox setting of its measurements), and the
# warning when part of the sandbox is missing.
"$bin/harness" env 2>&1 | grep -E "^triton_sandbox:|WARNING" >>"$figs/gpu.txt"
cat "$figs/gpu.txt"
n=0
for stage in "$@"; do
  n=$((n + 1))
  s0=$(date +%s)
  case "$stage" in
    hostile)
      "$bin/gpu_live_test" 2>&1 | tee "$figs/hostile.txt" | grep -E "^\S+ +\S+ +(yes|NO) |OK|FAILED|workers" ;;
    cudarun)
      "$bin/gpu_cuda_run_test" 2>&1 | tee "$figs/cudarun.txt" | tail -n 8
      "$bin/gpu_fused_compare_test" 2>&1 | tee "$figs/fused_compare.txt" | tail -n 4 ;;
    triton)
      bash scripts/triton_gpu_check.sh "$bin" 2>&1 | tee "$figs/triton.txt" | tail -n 60 ;;
    measure*)
      args=${stage#measure}
      args=${args#:}
      IFS=, read -r -a a <<<"$args"
      if [ -n "${VINCI_DEADLINE:-}" ]; then
        a+=(--budget "$(( VINCI_DEADLINE - ($(date +%s) - t0) - 45 ))")
      fi
      "$bin/harness" measure --out "$figs/measure$n" --nvrtc-cache /tmp/vinci-nvrtc "${a[@]}" \
        >"$figs/measure$n.stdout" 2>"$figs/measure$n.log"
      echo "measure$n: exit $?"
      grep -E "Guaranteed|Correctness agreement|per minute|Workers" "$figs/measure$n/report.md" ;;
    rescore*)
      args=${stage#rescore}
      args=${args#:}
      sets=()
      IFS=, read -r -a a <<<"${args:-loop.steps=1,loop.batch_tasks=4,loop.rollouts=2,eval.every=1}"
      for x in "${a[@]}"; do sets+=(--set "$x"); done
      rm -rf /tmp/vinci-rescore
      "$bin/harness" run experiments/main.toml "${sets[@]}" --out /tmp/vinci-rescore >"$figs/rescore_run$n.log" 2>&1
      echo "sim run: exit $? ($(grep -E '^(records|digest):' "$figs/rescore_run$n.log" | tr '\n' ' '))"
      r=()
      [ -n "${VINCI_RESCORE_REUSE:-}" ] && r=(--reuse "$VINCI_RESCORE_REUSE")
      lim=()
      [ -n "${VINCI_DEADLINE:-}" ] && lim=(timeout "$(( VINCI_DEADLINE - ($(date +%s) - t0) - 40 ))")
      "${lim[@]}" "$bin/replay" rescore /tmp/vinci-rescore/main --live --out /tmp/vinci-rescore/rescored$n --trials 2 \
        --samples 5 --timing-budget 0.3 --nvrtc-cache /tmp/vinci-nvrtc "${r[@]}" >"$figs/drift$n.txt" \
        2>"$figs/rescore$n.log"
      echo "rescore: exit $?"
      # What it measured comes back even when the deadline stopped it (--reuse takes it up again).
      cp /tmp/vinci-rescore/rescored$n/measurements.jsonl "$figs/rescore${n}_measurements.jsonl" 2>/dev/null
      tail -n 2 "$figs/rescore$n.log"
      tail -n 3 "$figs/drift$n.txt"
      cp /tmp/vinci-rescore/rescored$n/drift.md "$figs/drift$n.md" 2>/dev/null
      if [ -f /tmp/vinci-rescore/rescored$n/drift.md ]; then
        "$bin/replay" verify /tmp/vinci-rescore/rescored$n 2>&1 | tee -a "$figs/drift$n.txt"
        # The sim run, the rescored run and their objects, to rescore again on any machine.
        tar -C /tmp -czf "$figs/rescore${n}_runs.tar.gz" vinci-rescore/main vinci-rescore/rescored$n vinci-rescore/objects
      fi ;;
    llm*)
      args=${stage#llm}
      args=${args#:}
      sets=()
      IFS=, read -r -a a <<<"$args"
      for x in "${a[@]}"; do [ -n "$x" ] && sets+=(--set "$x"); done
      rm -rf /tmp/vinci-llm
      mkdir -p /tmp/vinci-llm
      "$bin/harness" serve --port 0 >"$figs/serve$n.log" 2>&1 &
      spid=$!
      for _ in $(seq 50); do grep -q "listening on" "$figs/serve$n.log" && break; sleep 0.2; done
      port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$figs/serve$n.log")
      lim=()
      [ -n "${VINCI_DEADLINE:-}" ] && lim=(timeout "$(( VINCI_DEADLINE - ($(date +%s) - t0) - 60 ))")
      "${lim[@]}" "$bin/harness" run experiments/llm_main.toml --out /tmp/vinci-llm \
        --set "backbone.base_url=http://127.0.0.1:$port/v1" "${sets[@]}" >"$figs/llm_run$n.log" 2>&1
      echo "llm run: exit $? ($(grep -E '^(records|digest):' "$figs/llm_run$n.log" | tr '\n' ' '))"
      kill "$spid"; wait "$spid" 2>/dev/null
      tail -n 4 "$figs/llm_run$n.log"
      "$bin/replay" verify /tmp/vinci-llm/llm_main 2>&1 | tee "$figs/llm_verify$n.txt" | tail -n 3
      tar -C /tmp -czf "$out/llm_run.tar.gz" vinci-llm ;;
    eval:*)
      IFS=, read -r -a a <<<"${stage#eval:}"
      "$bin/harness" eval "${a[@]}" --nvrtc-cache /tmp/vinci-nvrtc 2>&1 | tee -a "$figs/eval.txt" | tail -c 600; echo ;;
    sh:*)
      bash -c "${stage#sh:}" 2>&1 | tee -a "$figs/sh.txt" | tail -n 30 ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "stage $stage: $(( $(date +%s) - s0 )) s"
done
