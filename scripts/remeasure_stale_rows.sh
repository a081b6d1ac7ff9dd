#!/usr/bin/env bash
# Measures again, on the GPU machine, every row of the calibration sets
# (data/measurements/calibration.toml) whose plan the code generator now writes differently, each
# set with the task folder, reference precision, trials and samples its sweep used:
#
#   VINCI_DEADLINE=580 bash scripts/gpu_figures.sh "sh:bash scripts/remeasure_stale_rows.sh"
#
# (carry [".deps"]). The new rows come back in figures.tar.gz as f/suite_l1, f/suite_l1b and
# f/kernelbench (measurements.jsonl each); put them in place of the rows they repeat with
#   python3 scripts/replace_measurements.py f/suite_l1/measurements.jsonl data/measurements/h200_full_l1.jsonl
#   python3 scripts/replace_measurements.py f/suite_l1b/measurements.jsonl data/measurements/h200_full_l1b_l2_l3.jsonl
#   python3 scripts/replace_measurements.py f/kernelbench/measurements.jsonl data/measurements/h200_kernelbench_suite.jsonl \
#     data/measurements/h200_kernelbench_suite_l3_additions.jsonl data/measurements/h200_kernelbench_suite_l3_030.jsonl \
#     data/measurements/h200_library_gemm.jsonl
# then re-fit the default profile (docs/sim_model.md, "The default profile"). A row that was stale
# before the change (a later sweep measured its task again) is measured too: leave it out of the
# new rows, so that its task is not counted twice.
set -euo pipefail
bin=${VINCI_BIN:-build-gpu/bin}
figs=${VINCI_FIGS:-remeasure-out}
m=data/measurements
common=(--size full --nvrtc-cache /tmp/vinci-nvrtc --no-calibrate --stale-only)
suite=(--tasks $m/suite_2026-12-02 --reference-precision fp32 --trials 5)
show() { grep -E "^(L|harness)" || true; }
"$bin/harness" measure "${common[@]}" "${suite[@]}" --samples 20 --timing-budget 1 \
  --remeasure $m/h200_full_l1.jsonl --out "$figs/suite_l1" 2>&1 | show
"$bin/harness" measure "${common[@]}" "${suite[@]}" --samples 10 --timing-budget 0.5 \
  --remeasure $m/h200_full_l1b_l2_l3.jsonl --out "$figs/suite_l1b" 2>&1 | show
"$bin/harness" measure "${common[@]}" --trials 2 --samples 10 --timing-budget 0.5 \
  --remeasure $m/h200_kernelbench_suite.jsonl --remeasure $m/h200_kernelbench_suite_l3_additions.jsonl \
  --remeasure $m/h200_kernelbench_suite_l3_030.jsonl --remeasure $m/h200_library_gemm.jsonl \
  --out "$figs/kernelbench" 2>&1 | show
