"""scripts/timing_agreement.py on the committed H100 sweeps of adaptive timing: the tables
docs/live_evaluator.md ("Adaptive timing", "Measured") quotes are what the script prints from the
rows in data/measurements/h100_timing_2026-12-07/, and a bad input names the file and line."""
import os
import subprocess
import sys

from conftest import ROOT

DATA = os.path.join(ROOT, "data", "measurements", "h100_timing_2026-12-07")
SCRIPT = os.path.join(ROOT, "scripts", "timing_agreement.py")


def agreement(*pairs):
    p = subprocess.run([sys.executable, SCRIPT] + [f"{n}={os.path.join(DATA, f)}" for n, f in pairs],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def row(text, start):
    hits = [line for line in text.splitlines() if line.startswith(start)]
    assert len(hits) == 1, (start, text)
    return [c.strip() for c in hits[0].strip("|").split("|")]


def test_level_2_tables_are_the_documented_ones():
    out = agreement(("fixedA", "l2_fixed_a.jsonl"), ("fixedB", "l2_fixed_b.jsonl"), ("adaptive", "l2_adaptive.jsonl"))
    assert out.startswith("43 plans in every sweep")
    assert row(out, "| fixedA vs fixedB")[1:6] == ["43/43", "41/43 (95.3%)", "42/43 (97.7%)", "43/43 (100.0%)",
                                                   "43/43 (100.0%)"]
    assert row(out, "| fixedA vs adaptive")[2] == "42/43 (97.7%)"
    assert row(out, "| fixedA |")[-1] == "1710"
    assert row(out, "| adaptive |")[1:5] == ["42", "33", "63", "budget 1, cap 1, width 40"]
    assert row(out, "| adaptive |")[-1] == "2825"


def test_level_3_flips_only_where_fixed_flips_too():
    out = agreement(("fixedA", "l3_fixed_a.jsonl"), ("fixedB", "l3_fixed_b.jsonl"), ("adaptive", "l3_adaptive.jsonl"))
    assert row(out, "| fixedA vs fixedB")[2] == "26/33 (78.8%)"
    assert row(out, "| fixedA vs adaptive")[2] == "26/33 (78.8%)"
    assert row(out, "| fixedB vs adaptive")[2] == "27/33 (81.8%)"
    assert row(out, "| fixedA vs fixedB")[-1] == "1.6164"


def test_level_1_candidates_per_hour():
    out = agreement(("fixedA", "l1_fixed_a.jsonl"), ("fixedB", "l1_fixed_b.jsonl"), ("adaptive", "l1_adaptive.jsonl"))
    assert [row(out, f"| {n} |")[-1] for n in ("fixedA", "fixedB", "adaptive")] == ["1969", "2001", "2959"]
    out = agreement(("fixed", "l1_plans2_fixed.jsonl"), ("adaptive", "l1_plans2_adaptive.jsonl"))
    assert row(out, "| fixed vs adaptive")[2] == "67/72 (93.1%)"
    assert [row(out, f"| {n} |")[-1] for n in ("fixed", "adaptive")] == ["3345", "5258"]


def test_bad_input_names_the_file_and_line(tmp_path):
    bad = tmp_path / "measurements.jsonl"
    with open(os.path.join(DATA, "l2_fixed_a.jsonl")) as f:
        first = f.readline()
    bad.write_text(first + "{not json\n")
    p = subprocess.run([sys.executable, SCRIPT, f"a={bad}", f"b={tmp_path}"], capture_output=True, text=True)
    assert p.returncode != 0
    assert f"{bad}, line 2: not JSON" in p.stderr
    p = subprocess.run([sys.executable, SCRIPT, f"a={tmp_path / 'none'}", f"b={bad}"], capture_output=True, text=True)
    assert p.returncode != 0 and "no such file" in p.stderr
