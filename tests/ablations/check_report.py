#!/usr/bin/env python3
"""Runs the smoke ablation suite twice and checks its report against `replay score`.

    check_report.py BUILD_DIR OUT_DIR

The suite runs in the open world (`--world open`; the skills world's setting is not on main's
config schema yet, tests/python/test_ablation_stats.py checks the arguments it adds).

1. Every per-run figure in the report's Runs table equals `replay score RUN --format csv --turn
   last` of that run (all-tasks denominator), to the report's one decimal.
2. Every mean ± sd in the fast_p tables equals the mean and sample sd of those per-run figures;
   the oracle row's, those of `harness oracle` at each seed.
3. Every cell of the effects table is the paired effect (row - baseline) of those per-run figures
   with its bootstrap and t intervals (ablations/stats.py, the report's keys).
4. A second invocation reuses every run (nothing re-runs) and writes the same report, byte for byte.
"""
import csv
import io
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "ablations"))
import run_suite  # noqa: E402
import stats  # noqa: E402

build, out = sys.argv[1], sys.argv[2]
report = os.path.join(out, "report.md")
WORLD = "open"


def suite():
    p = subprocess.run([sys.executable, "ablations/run_suite.py", "ablations/smoke_suite.toml", "--world", WORLD,
                        "--build", build, "--out", out, "--report", report],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def replay_scores(run):
    p = subprocess.run([os.path.join(build, "bin", "replay"), "score", run, "--format", "csv",
                        "--turn", "last"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    scored = {}
    for r in csv.DictReader(io.StringIO(p.stdout)):
        if r.get("denominator") == "all":
            scored[f"{r['level']} F{float(r['threshold']):g}"] = 100 * float(r["value"])
    return scored


def oracle_scores(seed):
    """`harness oracle CONFIG --set run.seed=S --budget 200` of the first row's config."""
    p = subprocess.run([os.path.join(build, "bin", "harness"), "oracle", "experiments/smoke.toml", "--set",
                        f"run.seed={seed}", "--budget", "200", "--format", "json"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    fast = json.loads(p.stdout)["fast_p"]
    return {f"{k.split('_F')[0]} F{float(k.split('_F')[1]):g}": v for k, v in fast.items()}


def check_runs(section):
    """Checks the Runs table; returns ({row: [scores of each seed]}, seeds, the number of runs)."""
    runs = re.findall(r"^\| (\S+) \| (\d+) \| `([^`]+)` \| (.*) \|$", section, re.M)
    assert runs, "no runs table in the report"
    header = re.search(r"^\| row \| seed \| run \| (.*) \|$", section, re.M).group(1).split(" | ")
    per_run, seeds = {}, []
    for row, seed, run, cells in runs:
        assert run.startswith(os.path.join(out, WORLD) + "/"), run
        values = [float(c) for c in cells.split(" | ")]
        scored = replay_scores(run)
        for name, v in zip(header, values):
            assert f"{scored[name]:.1f}" == f"{v:.1f}", (run, name, scored[name], v)
        per_run.setdefault(row, []).append(scored)
        if int(seed) not in seeds:
            seeds.append(int(seed))
    return per_run, seeds, len(runs) * len(header), len(runs)


def check_means(section, per_run):
    checked = 0
    for p, table in re.findall(r"### fast_([\d.]+)\n\n(.*?)\n\n", section, re.S):
        lines = table.splitlines()
        cols = lines[0].strip("|").split("|")
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            row = cells[0]
            for name, cell in zip([c.strip() for c in cols[1:]], cells[1:]):
                if not name.endswith(" sim"):
                    continue
                level = name.split()[0]
                xs = [r[f"{level} F{float(p):g}"] for r in per_run[row]]
                m = sum(xs) / len(xs)
                sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0
                assert cell == f"{m:.1f} ± {sd:.1f}", (row, name, cell, m, sd)
                checked += 1
    assert checked > 0
    return checked


def check_effects(section, per_run, baseline):
    table = re.search(r"### Effects versus (\S+)\n\n.*?\n\n(\| row \|.*?)\n\n", section, re.S)
    assert table and table.group(1) == baseline, section
    lines = table.group(2).splitlines()
    cols = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    checked = 0
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = cells[0]
        for name, cell in zip(cols, cells[1:]):
            level, p = name.split()
            xs = [r[f"{level} {p}"] for r in per_run[row]]
            base = [r[f"{level} {p}"] for r in per_run[baseline]]
            key = f"{WORLD}/{row}/{level}/{float(p[1:]):g}"
            assert cell == run_suite.effect_cell(stats.Effect(xs, base, key)), (row, name, cell)
            checked += 1
    assert checked > 0
    return checked


first = suite()
text = open(report).read()
assert "an effect is therefore **detected** only when both intervals exclude 0" in text
sections = re.split(r"^## World `(\w+)`\n", text, flags=re.M)
worlds = dict(zip(sections[1::2], sections[2::2]))
assert list(worlds) == [WORLD], list(worlds)
section = worlds[WORLD]
per_run, seeds, figures, nruns = check_runs(section)
per_run["oracle (ceiling)"] = [oracle_scores(s) for s in seeds]
means = check_means(section, per_run)
effects = check_effects(section, per_run, "smoke")
assert re.search(r"No effect detected in \d+ of \d+ row x cell comparisons", section)
assert "### Power at 2 seeds" in section
second = suite()
assert "ran " not in second and second.count("reused") == nruns, second
assert open(report).read() == text, "the report changed on reuse"
print(f"ok: {nruns} runs, {figures} per-run figures, {means} means and {effects} effects checked against "
      "replay score")
