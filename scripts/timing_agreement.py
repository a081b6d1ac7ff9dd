#!/usr/bin/env python3
"""The fast_p verdicts of two or more timing protocols on the same plans, side by side.

    python3 scripts/timing_agreement.py NAME=DIR [NAME=DIR ...]

Each DIR is a `harness measure` output folder (its measurements.jsonl), or such a file, of the same sweep: the
same tasks, plans, seed and GPU, timed by one protocol (for example `fixed` twice and `adaptive`
once). Rows are matched by task, label and plan address; a plan counts where every sweep has it.

Prints, as Markdown:
  - per pair of sweeps, how often their verdicts agree on each fast_p threshold (correct, and the
    speedup above 1, 1.2, 1.5, 2), over the plans both call correct or not, and the largest ratio
    of their speedups;
  - per sweep, the timing samples each timed plan used (median, p90), why sampling stopped, and
    the sweep's candidates per hour from its own wall times (each row's wall time, summed).

Standard library only.
"""
import itertools
import json
import os
import statistics
import sys
from collections import Counter

THRESHOLDS = (1.0, 1.2, 1.5, 2.0)


def load(path):
    rows = {}
    if not path.endswith(".jsonl"):
        path = os.path.join(path, "measurements.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"timing_agreement: {path}: no such file (expected a `harness measure` folder or its "
                 "measurements.jsonl)")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}, line {n}: not JSON ({e})")
            rows[(r["task"], r["label"], r["plan_address"])] = r
    return rows


def verdict(row, p):
    live = row["live"]
    return bool(live["correct"]) and live["speedup"] > p


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def main(argv):
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        sys.exit(__doc__)
    sweeps = []
    for arg in argv[1:]:
        name, path = arg.split("=", 1)
        sweeps.append((name, load(path)))
    common = set.intersection(*(set(rows) for _, rows in sweeps))
    if not common:
        sys.exit("no plan is in every sweep: are they the same sweep?")
    keys = sorted(common)
    print(f"{len(keys)} plans in every sweep ({', '.join(f'{n}: {len(r)}' for n, r in sweeps)} rows).\n")

    print("| pair | correct agrees | " + " | ".join(f"fast_{p:g} agrees" for p in THRESHOLDS) +
          " | median speedup ratio | largest speedup ratio |")
    print("|---|---:|" + "---:|" * len(THRESHOLDS) + "---:|---:|")
    for (na, ra), (nb, rb) in itertools.combinations(sweeps, 2):
        same_correct = sum(ra[k]["live"]["correct"] == rb[k]["live"]["correct"] for k in keys)
        cells = [f"{same_correct}/{len(keys)}"]
        for p in THRESHOLDS:
            agree = sum(verdict(ra[k], p) == verdict(rb[k], p) for k in keys)
            cells.append(f"{agree}/{len(keys)} ({100.0 * agree / len(keys):.1f}%)")
        ratios = [max(ra[k]["live"]["speedup"], rb[k]["live"]["speedup"]) /
                  min(ra[k]["live"]["speedup"], rb[k]["live"]["speedup"])
                  for k in keys
                  if ra[k]["live"]["correct"] and rb[k]["live"]["correct"] and
                  min(ra[k]["live"]["speedup"], rb[k]["live"]["speedup"]) > 0]
        med = f"{statistics.median(ratios):.4f}" if ratios else "-"
        top = f"{max(ratios):.4f}" if ratios else "-"
        print(f"| {na} vs {nb} | " + " | ".join(cells) + f" | {med} | {top} |")

    print("\n| sweep | timed plans | samples each side, median | p90 | stopped by | wall s | candidates per hour |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for name, rows in sweeps:
        timed = [rows[k] for k in keys if rows[k]["live"]["kernel_times_us"]]
        used = [len(r["live"]["kernel_times_us"]) for r in timed]
        why = Counter(r["live"].get("timing_stopped_by", "fixed") for r in timed)
        wall_s = sum(rows[k]["wall_ms"] for k in keys) / 1000
        per_hour = len(keys) / wall_s * 3600 if wall_s > 0 else float("nan")
        print(f"| {name} | {len(timed)} | {percentile(used, 0.5):.0f} | {percentile(used, 0.9):.0f} | " +
              ", ".join(f"{k} {v}" for k, v in sorted(why.items())) + f" | {wall_s:.1f} | {per_hour:.0f} |")


if __name__ == "__main__":
    main(sys.argv)
