#!/usr/bin/env python3
"""Compares the measurements of two runs plan by plan: which plans one calls correct and the other
wrong, with each trial's largest error, the tolerance and the error text. Reads `replay cat` output.

    python3 scripts/verdict_diff.py BIN_DIR RUN_A RUN_B
"""
import json
import subprocess
import sys


def measurements(replay, run):
    out = subprocess.run([replay, "cat", run, "--no-manifest"], check=True, capture_output=True, text=True).stdout
    by_plan = {}
    for line in out.splitlines():
        rec = json.loads(line)
        m = rec.get("measurement")
        if not m or not m.get("plan"):
            continue
        by_plan.setdefault(m["plan"], (rec.get("task", "?"), m))
    return by_plan


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    replay = sys.argv[1] + "/replay"
    a, b = measurements(replay, sys.argv[2]), measurements(replay, sys.argv[3])
    differ = 0
    for plan in sorted(set(a) & set(b)):
        ta, ma = a[plan]
        _, mb = b[plan]
        if ma["correct"] == mb["correct"]:
            continue
        differ += 1
        tol = dict((s["key"], s["value"]) for s in ma.get("settings", [])).get("tolerance", "?")
        print(f"{ta} {plan[:12]} A={'ok' if ma['correct'] else 'wrong'} B={'ok' if mb['correct'] else 'wrong'} "
              f"tolerance={tol}")
        for name, m in (("A", ma), ("B", mb)):
            errs = " ".join(f"{t['maxAbsErr']:.3g}" if isinstance(t.get("maxAbsErr"), (int, float))
                            else str(t.get("maxAbsErr")) for t in m.get("trials", []))
            print(f"    {name}: trial max errors [{errs}] flags={m.get('flags')} error={m.get('error', '')[:160]!r}")
    print(f"plans in both: {len(set(a) & set(b))}; verdicts differ: {differ}")


if __name__ == "__main__":
    main()
