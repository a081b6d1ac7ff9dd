"""`harness measure --remeasure` and scripts/replace_measurements.py, with the real binary (sim
device): a sweep row whose code the generator no longer writes is measured again, and the new row
takes its place in the file, every other line untouched."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, binary, run_cmd

SUITE = os.path.join(ROOT, "data", "measurements", "suite_2026-12-02")
SWEEP = os.path.join(ROOT, "data", "measurements", "h200_full_l1.jsonl")
SCRIPT = os.path.join(ROOT, "scripts", "replace_measurements.py")


@pytest.fixture
def sweep(tmp_path):
    """Six rows of a committed sweep (two tasks); the third's plan address is not the generator's."""
    with open(SWEEP, encoding="utf-8") as f:
        rows = f.read().splitlines()
    lines = [l for l in rows if '"task":"L1_019"' in l][:3] + [l for l in rows if '"task":"L1_047"' in l][:3]
    assert len(lines) == 6
    stale = json.loads(lines[2])
    stale["plan_address"] = "0" * 32
    lines[2] = json.dumps(stale, separators=(",", ":"), sort_keys=True)
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines, stale


def measure(args, tmp_path, check=True):
    return run_cmd([binary("harness"), "measure", "--device", "sim", "--size", "full", "--tasks", SUITE,
                    "--no-calibrate", "--out", str(tmp_path / "out")] + args, check=check)


def test_stale_row_is_remeasured_and_put_in_place(sweep, tmp_path):
    path, lines, stale = sweep
    p = measure(["--remeasure", str(path), "--stale-only"], tmp_path)
    assert "6 row(s) of the selected tasks, 5 still current" in p.stderr
    new = (tmp_path / "out" / "measurements.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(new) == 1
    row = json.loads(new[0])
    assert (row["task"], row["label"]) == (stale["task"], stale["label"])
    assert row["plan_address"] != stale["plan_address"]

    p = run_cmd([sys.executable, SCRIPT, str(tmp_path / "out" / "measurements.jsonl"), str(path)])
    assert "1 row(s) replaced" in p.stdout
    after = path.read_text(encoding="utf-8").splitlines()
    assert after[:2] + after[3:] == lines[:2] + lines[3:]
    assert after[2] == new[0]
    # Every row names its plan now: nothing is stale, nothing measured.
    p = measure(["--remeasure", str(path), "--stale-only"], tmp_path)
    assert "6 row(s) of the selected tasks, 6 still current" in p.stderr


def test_every_row_is_remeasured_without_stale_only(sweep, tmp_path):
    path, lines, _ = sweep
    measure(["--remeasure", str(path)], tmp_path)
    new = [json.loads(l) for l in (tmp_path / "out" / "measurements.jsonl").read_text().splitlines()]
    old = [json.loads(l) for l in lines]
    assert sorted((r["task"], r["label"]) for r in new) == sorted((r["task"], r["label"]) for r in old)


def test_a_row_with_nothing_to_replace_changes_no_file(sweep, tmp_path):
    path, lines, stale = sweep
    other = dict(stale, label="g99")
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps(other) + "\n", encoding="utf-8")
    p = subprocess.run([sys.executable, SCRIPT, str(new), str(path)], capture_output=True, text=True)
    assert p.returncode != 0
    assert f"new.jsonl:1 ({stale['task']} g99): no row left to replace" in p.stderr
    assert path.read_text(encoding="utf-8").splitlines() == lines


def test_remeasure_refuses_plans_and_variants(sweep, tmp_path):
    path, _, _ = sweep
    p = measure(["--remeasure", str(path), "--plans", "2"], tmp_path, check=False)
    assert p.returncode == 2
    assert "--remeasure takes its plans from its files: drop --plans and --variant" in p.stderr
    p = measure(["--stale-only"], tmp_path, check=False)
    assert p.returncode == 2 and "--stale-only needs --remeasure" in p.stderr
