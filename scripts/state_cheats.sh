#!/usr/bin/env bash
# The hostile plans that keep state between runs (tests/gpu/hostile/hostile_plans.json, expect
# "contained"), each evaluated by `harness eval --device cuda` of every build given: what each
# build's timing protocol pays them. A build whose timed samples share state pays the cheat; a
# fresh-state build times the work the plan does.
#
#   bash scripts/state_cheats.sh BIN... (folders holding harness)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import json, sys
for e in json.load(open("tests/gpu/hostile/hostile_plans.json")):
    if e["expect"] == "contained":
        with open("%s/%s__%s__%s.json" % (sys.argv[1], e["name"], e["plan"]["task"], e["size"]), "w") as f:
            json.dump(e["plan"], f)
PY
printf '%-44s %-28s %8s %s\n' plan build speedup verdict
for f in "$dir"/*.json; do
  base=$(basename "$f" .json)
  name=${base%%__*}
  rest=${base#*__}
  task=${rest%%__*}
  size=${rest#*__}
  for bin in "$@"; do
    line=$("$bin/harness" eval "$task" --plan "$f" --device cuda --size "$size" --nvrtc-cache /tmp/vinci-nvrtc-cheats \
      2>/dev/null | head -n 1 || true)
    verdict=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%.3f" % r.get("speedup", 0), "correct" if r.get("correct") else "rejected: " + r.get("error", "")[:80])' "$line" 2>/dev/null || echo "- no record")
    printf '%-44s %-28s %s\n' "$name" "$bin" "$verdict"
  done
done
