#!/usr/bin/env python3
"""Runs the smoke ablation suite twice and checks its report against `replay score`.

    check_report.py BUILD_DIR OUT_DIR

1. Every per-run figure in the report's Runs table equals `replay score RUN --format csv --turn
   last` of that run (all-tasks denominator), to the report's one decimal.
2. Every mean ± sd in the fast_p tables equals the mean and sample sd of those per-run figures;
   the oracle row's, those of `harness oracle` at each seed.
3. A second invocation reuses every run (nothing re-runs) and writes the same report.
"""
import csv
import io
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build, out = sys.argv[1], sys.argv[2]
report = os.path.join(out, "report.md")


def suite():
    p = subprocess.run([sys.executable, "ablations/run_suite.py", "ablations/smoke_suite.toml",
                        "--build", build, "--out", out, "--report", report],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


first = suite()
text = open(report).read()
runs = re.findall(r"^\| (\S+) \| (\d+) \| `([^`]+)` \| (.*) \|$", text, re.M)
assert runs, "no runs table in the report"
header = re.search(r"^\| row \| seed \| run \| (.*) \|$", text, re.M).group(1).split(" | ")
per_run = {}
for row, seed, run, cells in runs:
    values = [float(c) for c in cells.split(" | ")]
    p = subprocess.run([os.path.join(build, "bin", "replay"), "score", run, "--format", "csv",
                        "--turn", "last"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    scored = {}
    for r in csv.DictReader(io.StringIO(p.stdout)):
        if r.get("denominator") == "all":
            scored[f"{r['level']} F{float(r['threshold']):g}"] = 100 * float(r["value"])
    for name, v in zip(header, values):
        assert f"{scored[name]:.1f}" == f"{v:.1f}", (run, name, scored[name], v)
    per_run.setdefault(row, []).append({name: scored[name] for name in header})
# The oracle row: `harness oracle CONFIG --set run.seed=S --budget 200` of the first row's config.
import json
oracle_runs = []
for seed in sorted({int(seed) for _, seed, _, _ in runs}):
    p = subprocess.run([os.path.join(build, "bin", "harness"), "oracle", "experiments/smoke.toml", "--set",
                        f"run.seed={seed}", "--budget", "200", "--format", "json"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    fast = json.loads(p.stdout)["fast_p"]
    oracle_runs.append({f"{k.split('_F')[0]} F{float(k.split('_F')[1]):g}": v for k, v in fast.items()})
per_run["oracle (ceiling)"] = oracle_runs
checked = 0
for section in re.findall(r"## fast_([\d.]+)\n\n(.*?)\n\n", text, re.S):
    p, table = section
    lines = table.splitlines()
    cols = lines[0].strip("|").split("|")
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = cells[0]
        for name, cell in zip([c.strip() for c in cols[1:]], cells[1:]):
            if not name.endswith(" sim") or name.startswith("all"):
                continue
            level = name.split()[0]
            xs = [r[f"{level} F{float(p):g}"] for r in per_run[row]]
            m = sum(xs) / len(xs)
            sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0
            assert cell == f"{m:.1f} ± {sd:.1f}", (row, name, cell, m, sd)
            checked += 1
assert checked > 0
second = suite()
assert "ran " not in second and second.count("reused") == len(runs), second
assert open(report).read() == text, "the report changed on reuse"
print(f"ok: {len(runs)} runs, {len(runs) * len(header)} per-run figures and {checked} means checked against replay score")
