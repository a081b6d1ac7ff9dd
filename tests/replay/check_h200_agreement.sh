#!/usr/bin/env bash
# The sim's default profile against the H200, with no GPU: tests/golden/h200/main_nocoldstart_h200
# is the H200 rescore of a short main_nocoldstart run (every plan measured on an H200,
# data/measurements/h200_rescore_nocoldstart_step1.jsonl; scripts/record_h200_rescore_golden.sh
# re-derives it). This test
#  1. re-derives that run bit for bit (`replay verify`): today's loop reads it as it was written;
#  2. re-prices its plans under today's default profile (`replay rescore --device sim`);
# and the final evaluation's fast_p (last turn, all levels) must agree with the H200's within 5
# points at every threshold. A change to the sim model or the default profile is judged here
# against the same H200 measurements; no GPU is needed.
set -euo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=$src/tests/golden/h200/main_nocoldstart_h200
"$bin/replay" verify "$run" >"$out/verify.txt" 2>&1 || { tail -n 5 "$out/verify.txt"; exit 1; }
"$bin/replay" rescore "$run" --device sim --profile "$src/data/device_profiles/h200.toml" --out "$out/sim" \
  >"$out/sim.txt" 2>&1 || { tail -n 5 "$out/sim.txt"; exit 1; }
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
