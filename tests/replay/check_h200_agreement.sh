#!/usr/bin/env bash
# The sim's default profile against the H200, on the committed measurements and no GPU:
#  1. the short main_nocoldstart run docs/h200_rescore.md describes is recorded in the sim;
#  2. `replay rescore --offline` re-derives the H200 rescore of it from
#     data/measurements/h200_rescore_nocoldstart_step1.jsonl (every plan measured on an H200);
#  3. `replay rescore --device sim` of that H200 run re-prices its plans under the default profile;
# and the final evaluation's fast_p (last turn, all levels) must agree within 5 points at every
# threshold. A change to the generator or the sim backbone that makes other plans fails step 2,
# naming a plan: re-measure the run on a GPU (docs/h200_rescore.md, "Against the default profile").
set -euo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/harness" run "$src/experiments/main_nocoldstart.toml" --set loop.steps=1 --set loop.batch_tasks=4 \
  --set loop.rollouts=2 --set eval.every=1 --set tts.enabled=false --out "$out" >"$out/run.txt" 2>&1 ||
  { tail -n 20 "$out/run.txt"; exit 1; }
"$bin/replay" rescore "$out/main_nocoldstart" --device cuda --offline --trials 2 --samples 5 \
  --reuse "$src/data/measurements/h200_rescore_nocoldstart_step1.jsonl" --out "$out/h200" >"$out/h200.txt" 2>&1 ||
  { tail -n 5 "$out/h200.txt"; exit 1; }
"$bin/replay" verify "$out/h200" >/dev/null
"$bin/replay" rescore "$out/h200" --device sim --out "$out/sim" >"$out/sim.txt" 2>&1 ||
  { tail -n 5 "$out/sim.txt"; exit 1; }
# Rows "| last | all | p | H200 (recorded) | sim (here) | change |".
python3 - "$out/sim/drift.md" <<'PY'
import re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"\| last \| all \|", l)]
assert len(rows) == 4, rows
worst = 0.0
for r in rows:
    p, h200, sim = [c.strip() for c in r.strip().strip("|").split("|")][2:5]
    print(f"fast_{p}: H200 {h200}, sim {sim}")
    worst = max(worst, abs(float(h200) - float(sim)))
if worst > 5.0:
    sys.exit(f"the sim's fast_p is {worst:.1f} points from the H200's (at most 5 allowed)")
print(f"within {worst:.1f} points of the H200 at every threshold")
PY
