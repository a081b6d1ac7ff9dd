#!/usr/bin/env python3
"""Cross-checks `harness skills search` against rank_bm25 on the benchmark's synthetic library.

    build-agents/bin/synthetic_library 3000 /tmp/syn
    python3 tests/agents/compare_synthetic_with_rank_bm25.py build-agents/bin/harness /tmp/syn

For each of the 8 task prompts (long queries with repeated tokens), the top 20 of harness must be
rank_bm25's top 20 in the same order (ties by library order, as vinci documents), with scores
equal to 1e-12 relative. Exit 0 when all match, 1 otherwise. Needs `pip install rank_bm25`.
"""
import json
import string
import subprocess
import sys

from rank_bm25 import BM25Okapi


def tokenize(text):
    text = text.lower()
    for ch in "_-/":
        text = text.replace(ch, " ")
    return text.translate(str.maketrans("", "", string.punctuation)).split()


def main():
    harness, folder = sys.argv[1], sys.argv[2]
    skills = [json.loads(line) for line in open(f"{folder}/library.jsonl")]
    corpus = [tokenize(" ".join([s["name"], s["description"], " ".join(s["tags"]), s["content"]]))
              for s in skills]
    bm25 = BM25Okapi(corpus)
    failures = 0
    worst = 0.0
    for q in range(8):
        prompt = open(f"{folder}/prompt_{q}.txt").read()
        scores = bm25.get_scores(tokenize(prompt))
        want = sorted((i for i in range(len(skills)) if scores[i] > 0),
                      key=lambda i: (-scores[i], i))[:20]
        out = subprocess.run([harness, "skills", "search", f"{folder}/library.jsonl", prompt,
                              "--top", "20"], capture_output=True, text=True, check=True).stdout
        got = [line.split("\t") for line in out.splitlines()]
        if [g[1] for g in got] != [skills[i]["name"] for i in want]:
            print(f"prompt {q}: ranking differs", file=sys.stderr)
            failures += 1
            continue
        for g, i in zip(got, want):
            rel = abs(float(g[2]) - scores[i]) / abs(scores[i])
            worst = max(worst, rel)
            if rel > 1e-12:
                print(f"prompt {q}: {g[1]} scores {g[2]}, rank_bm25 {scores[i]!r}", file=sys.stderr)
                failures += 1
    print(f"{len(skills)} skills, 8 prompts: {failures} failures, "
          f"largest relative difference {worst:.3g}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
