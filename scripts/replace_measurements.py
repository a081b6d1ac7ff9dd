#!/usr/bin/env python3
"""Puts re-measured rows in place of the rows they measure again, in committed measurement files.

    python3 scripts/replace_measurements.py NEW.jsonl FILE.jsonl [FILE.jsonl ...]

NEW.jsonl is `harness measure --remeasure FILE ... --out DIR`'s DIR/measurements.jsonl; give the
FILEs in the order given to --remeasure. Each new row replaces the first row of the FILEs not yet
replaced with the same task and label whose knobs it repeats (a knob the old row lacks was added
to the generator since): a plan that several sweeps measured was measured again once for each.
Every other line stays as it was, in its place. A new row that finds no row to replace is an
error and no file is changed; each FILE is rewritten whole through a temporary file and a rename.
"""
import json
import os
import sys


def rows(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            out.append((line, None))
            continue
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"{path}:{n}: not JSON: {e}")
        if not isinstance(j, dict) or not all(k in j for k in ("task", "label", "knobs")):
            sys.exit(f"{path}:{n}: expected a measurement row with task, label and knobs")
        out.append((line, j))
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip())
    new_path, files = argv[1], argv[2:]
    new = [(line, j) for line, j in rows(new_path) if j is not None]
    old = {path: rows(path) for path in files}
    taken = {}  # (path, index) -> new row
    for k, (text, n) in enumerate(new):
        hits = [(path, i) for path, lines in old.items() for i, (_, j) in enumerate(lines)
                if j is not None and j["task"] == n["task"] and j["label"] == n["label"]
                and all(n["knobs"].get(key) == value for key, value in j["knobs"].items())
                and (path, i) not in taken]
        if not hits:
            sys.exit(f"{new_path}:{k + 1} ({n['task']} {n['label']}): no row left to replace")
        taken[hits[0]] = text
    for path, lines in old.items():
        mine = {i: n for (p, i), n in taken.items() if p == path}
        if not mine:
            continue
        text = "\n".join(mine[i] if i in mine else line
                         for i, (line, _) in enumerate(lines)) + "\n"
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"{path}: {len(mine)} row(s) replaced")


if __name__ == "__main__":
    main(sys.argv)
