#!/usr/bin/env python3
"""The learning curve of experiments/llm_tiny.toml over seeds: for each seed a fresh `harness lm`
(its own store) and one `harness run`, then a table and an SVG plot from the runs' logs.

    python3 scripts/llm_tiny_report.py --seeds 1 2 3 --out runs/llm_tiny_report

Per seed and step it reads (with `replay cat`):
  - reward: the mean reward of the step's training turns (the `reward_mean` train metric);
  - fast_1: the share of the step's training turns that are correct, not decoys and faster than
    the reference (speedup > 1), from the turns' reward records;
  - parsed: the share of the step's policy replies that held a candidate (a reply that does not
    parse is a measurement of evaluator "reply"); in the sim world every parsed knobs answer is a
    generator plan, so parsed is also priced;
  - the updates: samples, loss, tokens; and the wall time of the run and of each update (from the
    progress lines).
Step 0's turns come from the model the cold start trained, before any RL update.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("VINCI_BUILD_DIR", os.path.join(ROOT, "build"))
HARNESS = os.path.join(BUILD, "bin", "harness")
REPLAY = os.path.join(BUILD, "bin", "replay")


def start_lm(store, port, context):
    p = subprocess.Popen([HARNESS, "lm", "--port", str(port), "--store", store, "--context", str(context)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on"):
        p.kill()
        sys.exit("harness lm did not start: %r %s" % (line, p.stderr.read()))
    return p, int(line.rsplit(":", 1)[1])


def records(run_dir):
    out = subprocess.run([REPLAY, "cat", run_dir], capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def summarise(run_dir):
    recs = records(run_dir)
    steps = {}
    for r in recs:
        if r.get("phase", "train") != "train" or r.get("step", -1) < 0:
            continue
        s = steps.setdefault(r["step"], {"turns": 0, "fast1": 0, "replies": 0, "parsed": 0, "reward": None})
        if "reward" in r and r["reward"].get("kind", "turn") == "turn":
            w = r["reward"]
            s["turns"] += 1
            if w.get("correct") and not w.get("decoy") and w.get("speedup", 0) > 1:
                s["fast1"] += 1
        if "measurement" in r and r.get("turn", -1) >= 0:
            s["replies"] += 1
            if r["measurement"].get("evaluator") != "reply":
                s["parsed"] += 1
        if "metric" in r and r["metric"]["name"] == "reward_mean" and r["metric"]["split"] == "train":
            s["reward"] = r["metric"].get("value", 0.0)
    ups = [r["modelUpdate"] for r in recs if "modelUpdate" in r]
    return steps, ups


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "llm_tiny_report"))
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--set", action="append", default=[], help="extra key=value settings for every run")
    ap.add_argument("--reuse", action="store_true",
                    help="summarise a seed's run that an earlier invocation completed instead of running it again "
                         "(its wall time is the one that invocation wrote, if any)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for seed in args.seeds:
        name = "llm_tiny_s%d" % seed
        run_dir = os.path.join(args.out, name)
        if args.reuse and subprocess.run([REPLAY, "verify", run_dir], capture_output=True).returncode == 0:
            wall, update_s = float("nan"), []
            if os.path.exists(os.path.join(run_dir, "report_wall.json")):
                with open(os.path.join(run_dir, "report_wall.json")) as f:
                    kept = json.load(f)
                wall, update_s = kept["wall_s"], kept.get("update_s", [])
            steps, ups = summarise(run_dir)
            digest = subprocess.run([REPLAY, "verify", run_dir], capture_output=True, text=True).stdout
            digest = next((l.split()[1] for l in digest.splitlines() if l.startswith("digest: ")), "")
            rows.append({"seed": seed, "wall_s": wall, "update_s": update_s, "steps": steps, "updates": ups,
                         "digest": digest})
            print("seed %d: reused %s (verified), digest %s" % (seed, run_dir, digest), flush=True)
            continue
        store = os.path.join(args.out, "store_s%d" % seed)
        shutil.rmtree(store, ignore_errors=True)
        lm, port = start_lm(store, 0, args.context)
        url = "http://127.0.0.1:%d/v1" % port
        shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
        cmd = [HARNESS, "run", "experiments/llm_tiny.toml", "--seed", str(seed), "--name", name, "--out", args.out,
               "--set", "backbone.base_url=" + url, "--set", "trainer.url=" + url]
        for s in args.set:
            cmd += ["--set", s]
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t0
        lm.terminate()
        lm.wait()
        if r.returncode != 0:
            sys.exit("seed %d failed:\n%s" % (seed, r.stderr[-3000:]))
        update_s = [float(m) for m in re.findall(r"in ([0-9.]+) s \(loss", r.stderr)]
        with open(os.path.join(run_dir, "report_wall.json"), "w") as f:
            json.dump({"wall_s": wall, "update_s": update_s}, f)
        steps, ups = summarise(run_dir)
        rows.append({"seed": seed, "wall_s": wall, "update_s": update_s, "steps": steps, "updates": ups,
                     "digest": next((l.split()[1] for l in r.stdout.splitlines() if l.startswith("digest: ")), "")})
        print("seed %d: %.0f s, digest %s" % (seed, wall, rows[-1]["digest"]), flush=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(rows, f, indent=1, sort_keys=True)
    write_markdown(rows, os.path.join(args.out, "report.md"))
    write_svg(rows, os.path.join(args.out, "reward.svg"))
    print(open(os.path.join(args.out, "report.md")).read())


def write_markdown(rows, path):
    steps = sorted({s for r in rows for s in r["steps"]})
    lines = ["| seed | step | turns | parsed | fast_1 | mean reward |", "|---|---|---|---|---|---|"]
    for r in rows:
        for s in steps:
            st = r["steps"].get(s) or r["steps"].get(str(s))
            if not st:
                continue
            parsed = st["parsed"] / st["replies"] if st["replies"] else 0
            fast1 = st["fast1"] / st["turns"] if st["turns"] else 0
            lines.append("| %d | %d | %d | %.2f | %.2f | %.3f |" % (r["seed"], s, st["turns"], parsed, fast1,
                                                                   st["reward"] or 0))
    lines += ["", "| seed | update | kind | samples | prompt tokens | completion tokens | loss | seconds |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for i, u in enumerate(r["updates"]):
            sec = r["update_s"][i] if i < len(r["update_s"]) else float("nan")
            lines.append("| %d | %d | %s | %d | %s | %s | %.4g | %.1f |" % (
                r["seed"], i, u["kind"], u.get("samples", 0), u.get("promptTokens", 0), u.get("completionTokens", 0),
                u.get("loss", 0.0), sec))
    lines += ["", "| seed | wall s | digest |", "|---|---|---|"]
    for r in rows:
        wall = "%.0f" % r["wall_s"] if r["wall_s"] == r["wall_s"] else "not kept"
        lines.append("| %d | %s | %s |" % (r["seed"], wall, r["digest"]))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_svg(rows, path):
    w, h, pad = 480, 300, 48
    steps = sorted({int(s) for r in rows for s in r["steps"]})
    if not steps:
        return
    vals = [(r["steps"].get(s) or r["steps"].get(str(s)) or {}).get("reward") or 0 for r in rows for s in steps]
    # Ticks on round values: the smallest 1-2-5 step covering [0, max] in at most six intervals.
    hi = max(max(vals), 1e-9)
    tick = next(m * 10.0 ** e for e in range(-6, 7) for m in (1, 2, 5) if math.ceil(hi / (m * 10.0 ** e)) <= 6)
    top = math.ceil(hi / tick) * tick
    x = lambda s: pad + (w - 2 * pad) * (s - steps[0]) / max(1, steps[-1] - steps[0])
    y = lambda v: h - pad - (h - 2 * pad) * v / top
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (w, h),
           '<text x="%d" y="20">llm_tiny: mean training reward per step (step 0: after the cold start)</text>' % pad,
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (pad, h - pad, w - pad, h - pad),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (pad, pad, pad, h - pad)]
    for s in steps:
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(s), h - pad + 16, s))
    decimals = max(0, -math.floor(math.log10(tick) + 1e-9))
    for k in range(int(round(top / tick)) + 1):
        v = k * tick
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.*f</text>' % (pad - 4, y(v) + 4, decimals, v))
    for i, r in enumerate(rows):
        pts = " ".join("%.1f,%.1f" % (x(s), y((r["steps"].get(s) or r["steps"].get(str(s)) or {}).get("reward") or 0))
                       for s in steps)
        c = colours[i % len(colours)]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (c, pts))
        out.append('<text x="%d" y="%d" fill="%s">seed %d</text>' % (w - pad - 50, pad + 14 * i, c, r["seed"]))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
