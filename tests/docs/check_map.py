#!/usr/bin/env python3
"""docs/ARCHITECTURE.md stays a map: at most LIMIT lines.

    python3 tests/docs/check_map.py [ROOT]

The map names the layers, the path of one rollout and where each record kind is written, and
points to the pages that hold the details; a page that grows past the limit has taken in details
that belong in those pages. Prints the file, the limit and its line count; exits 1 when over.
"""
import os
import sys

LIMIT = 170
ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    path = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
    with open(path, encoding="utf-8") as f:
        count = sum(1 for _ in f)
    name = os.path.relpath(path, ROOT)
    if count > LIMIT:
        print(f"check_map: {name} has {count} lines, over the limit of {LIMIT}: move details to the pages "
              f"it points to")
        return 1
    print(f"check_map: {name} has {count} lines (limit {LIMIT})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
