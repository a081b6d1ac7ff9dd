#!/usr/bin/env python3
"""Every path of the repository that the docs and the README name exists.

    python3 tests/docs/check_paths.py [ROOT]

A path is a word in backquotes, or a bare word, that starts with one of the repository's top-level
folders (`gpu/sim/sim_model.h`, `data/measurements/`, `docs/tasks.md`); words with a wildcard, an
ellipsis or a placeholder in capitals or angle brackets (`data/measurements/FILE`, `runs/<name>`),
and what a command is told to write (`--out ablations/figures`), are left alone; runs/ and the
build folders are not top-level folders of the repository. Prints
each missing path with the file and line that names it; exits 1 if there is one.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOP = ["ablations", "agents", "bench", "core", "data", "docs", "experiments", "fuzz", "gpu", "harness", "lm", "prompts",
       "python", "queue", "recorder", "replay", "scripts", "tests"]
WORD = re.compile(r"(?<![\w./$-])((?:%s)/[\w./-]*)" % "|".join(TOP))


def docs(root):
    yield os.path.join(root, "README.md")
    for name in sorted(os.listdir(os.path.join(root, "docs"))):
        if name.endswith(".md"):
            yield os.path.join(root, "docs", name)


def main():
    missing = []
    for path in docs(ROOT):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in WORD.finditer(line):
                    word = m.group(1).rstrip(".,;:")
                    rest = line[m.end():m.end() + 1]
                    if rest in ("*", "<", "{") or "..." in word or re.search(r"/[A-Z][A-Z_]*\b", word):
                        continue
                    if line[:m.start()].rstrip().endswith("--out"):  # what a command writes
                        continue
                    if not os.path.exists(os.path.join(ROOT, word)):
                        missing.append(f"{os.path.relpath(path, ROOT)}:{n}: {word}")
    for m in missing:
        print(m)
    print(f"check_paths: {len(missing)} missing path(s)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
