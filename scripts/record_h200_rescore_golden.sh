#!/usr/bin/env bash
# Re-records tests/golden/h200/main_nocoldstart_h200: the H200 rescore of a short main_nocoldstart
# run, re-derived without a GPU from data/measurements/h200_rescore_nocoldstart_step1.jsonl (every
# plan the run makes, measured on an H200). CI re-prices its plans under the sim's default profile
# (tests/replay/check_h200_agreement.sh).
#
# It works only while today's code makes the plans the file holds: a change to the generator, the
# knobs or the sim backbone that makes other plans stops here, naming the first plan the file
# lacks. Then measure the run on a GPU first (docs/h200_rescore.md, "Against the default profile")
# and commit the new file with the re-recorded run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
measurements=data/measurements/h200_rescore_nocoldstart_step1.jsonl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/harness" run experiments/main_nocoldstart.toml --set loop.steps=1 --set loop.batch_tasks=4 \
  --set loop.rollouts=2 --set eval.every=1 --set tts.enabled=false --out "$tmp/sim" >/dev/null
mkdir -p "$tmp/golden"
"$build/bin/replay" rescore "$tmp/sim/main_nocoldstart" --device cuda --offline --trials 2 --samples 5 \
  --reuse "$measurements" --out "$tmp/golden/main_nocoldstart_h200" | tail -n 1
# The measurements are committed once, in data/measurements.
rm "$tmp/golden/main_nocoldstart_h200/measurements.jsonl"
sed -i "s#$tmp/golden#tests/golden/h200#g; s#$tmp/sim#/tmp/vr#g" "$tmp/golden/main_nocoldstart_h200/drift.md"
"$build/bin/replay" verify "$tmp/golden/main_nocoldstart_h200" | tail -n 1
rm -rf tests/golden/h200
mkdir -p tests/golden
mv "$tmp/golden" tests/golden/h200
echo "re-recorded tests/golden/h200/main_nocoldstart_h200 from $measurements"
