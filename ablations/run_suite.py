#!/usr/bin/env python3
"""Runs vinci's ablation suite and writes its report.

    python3 ablations/run_suite.py [ablations/suite.toml] [--world open|skills|both] [--seeds N]
                                   [--rows main,abl1_noskill] [--jobs 2] [--build build]
                                   [--report ablations/report.md] [--fast-p-inclusive]

The suite runs in two sim worlds: `open` (the default world; no extra setting) and `skills` (the
positive control, where skills teach techniques: `--set sim.knowledge=skills` on every `harness
run`, `harness config` and `harness oracle` call). For every world, row and seed (seeds 1..N with
--seeds N, else the suite's) it runs `harness run CONFIG --seed S` into <out>/<world>/<row>_s<seed>/,
unless a finished run is already there whose recorded effective config equals the one it would
run and whose recorded vinci revision equals this build's (then it is reused). Every figure of the
report comes from `replay score RUN --format json` of those runs, so `replay score` re-derives each
one from the logs alone. Per world the report puts the mean and spread over seeds beside the
paper's figures, each row's effect versus the baseline row (main) with a bootstrap and a paired t
interval over seeds (ablations/stats.py), the effects the seed count can detect, and whether the
world reproduces each of the paper's ablation claims. fast_p counts speedup > p (KernelBench's
definition) unless --fast-p-inclusive asks for speedup >= p; the report's header says which.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402  (ablations/stats.py)

# Extra `replay score` and `harness oracle` arguments: ["--fast-p-inclusive"] with that option.
SCORE_ARGS = []
# The worlds, in report order, and the config overrides that select each (the open world is the
# default, so it passes nothing).
WORLDS = ("open", "skills")
WORLD_SETS = {"open": [], "skills": ["sim.knowledge=skills"]}
WORLD_TEXT = {
    "open": "the default sim world and the negative control: skills are not expected to teach the policy "
            "anything there, so a skill factor should show no effect",
    "skills": "the positive control (`--set sim.knowledge=skills`): skills teach techniques, so the "
              "skill factors should show their effects",
}
# The rows whose factor is the skills (injection, selection, joint training of their agents).
SKILL_FACTORS = ("drkernel_baseline", "abl1_noskill", "abl3_nojoint", "abl4_bm25only")


def sh(args, check=True):
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"run_suite: {' '.join(args)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p


# --- The commands a world runs -------------------------------------------------------------------

def set_args(sets):
    return [a for s in sets for a in ("--set", s)]


def row_sets(row, world):
    """The row's own overrides, then the world's."""
    return list(row.get("set", [])) + WORLD_SETS[world]


def world_out(out, world):
    return os.path.join(out, world)


def run_name(row, seed):
    return f"{row['name']}_s{seed}"


def run_dir(out, world, row, seed):
    return os.path.join(world_out(out, world), run_name(row, seed))


def config_args(build, row, seed, out, world):
    """`harness config`: the effective config that `run_args` records."""
    return ([f"{build}/bin/harness", "config", row["config"], "--set", f"run.seed={seed}",
             "--set", f"run.name={run_name(row, seed)}", "--set", f"run.out={world_out(out, world)}"]
            + set_args(row_sets(row, world)))


def run_args(build, row, seed, out, world):
    return ([f"{build}/bin/harness", "run", row["config"], "--seed", str(seed), "--out", world_out(out, world),
             "--name", run_name(row, seed)] + set_args(row_sets(row, world)))


def oracle_args(build, config, seed, budget):
    # The oracle searches the knob space with the evaluator and never consults the policy, so
    # sim.knowledge does not enter it: one oracle per seed serves every world.
    return ([f"{build}/bin/harness", "oracle", config, "--set", f"run.seed={seed}", "--budget", str(budget),
             "--format", "json"] + SCORE_ARGS)


# --- Running and scoring -------------------------------------------------------------------------

def build_revision(build):
    for line in sh([f"{build}/bin/harness", "env"]).stdout.splitlines():
        if line.startswith("git_revision: "):
            return line.split(": ", 1)[1]
    return "unknown"


def recorded_config(build, run):
    """The recorded effective config of a finished run made by this build's revision, or None."""
    if not os.path.exists(os.path.join(ROOT, run, "manifest.bin")):
        return None
    p = sh([f"{build}/bin/replay", "cat", run], check=False)
    if p.returncode != 0:
        return None
    manifest = json.loads(p.stdout.split("\n", 1)[0])["manifest"]
    if not manifest.get("completed"):
        return None
    if manifest.get("environment", {}).get("gitRevision") != build_revision(build):
        return None
    return manifest.get("configText")


def run_one(build, row, seed, out, world):
    run = run_dir(out, world, row, seed)
    want = sh(config_args(build, row, seed, out, world)).stdout
    if recorded_config(build, run) == want:
        return run, "reused"
    if os.path.exists(os.path.join(ROOT, run)):
        sh(["rm", "-rf", run])
    sh(run_args(build, row, seed, out, world))
    return run, "ran"


def run_all(ctx):
    """Every world x row x seed, `ctx.jobs` at a time: {(world, row name, seed): run folder}."""
    jobs = [(w, row, s) for w in ctx.worlds for row in ctx.rows for s in ctx.seeds]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=ctx.jobs) as pool:
        futures = {pool.submit(run_one, ctx.build, row, s, ctx.out, w): (w, row["name"], s) for w, row, s in jobs}
        for fut in concurrent.futures.as_completed(futures):
            run, how = fut.result()
            results[futures[fut]] = run
            print(f"{how:6s} {run}", flush=True)
    return results


def score(build, run):
    """{(level, p): value in %} of the final evaluation, last turn, all tasks."""
    p = sh([f"{build}/bin/replay", "score", run, "--format", "json", "--turn", "last"] + SCORE_ARGS)
    rows = json.loads(p.stdout.splitlines()[0])  # first line: the 'all tasks' denominator
    out = {}
    for r in rows:
        level = 0 if r["level"] == "all" else int(r["level"][1:])
        out[(level, r["threshold"])] = 100.0 * r["value"]
    return out


_ORACLES = {}
_ORACLES_LOCK = threading.Lock()


def oracle(build, config, seed, budget):
    """{(level, p): value in %} of `harness oracle`: the best plan of each held-out task's knob
    space (level 0: all tasks); computed once per (config, seed, budget) for every world."""
    key = (build, config, seed, budget)
    with _ORACLES_LOCK:
        if key in _ORACLES:
            return _ORACLES[key]
    p = sh(oracle_args(build, config, seed, budget))
    out = {}
    for k, v in json.loads(p.stdout)["fast_p"].items():
        level, p_ = k.split("_F")
        out[(0 if level == "all" else int(level[1:]), float(p_))] = v
    with _ORACLES_LOCK:
        _ORACLES[key] = out
    return out


def eval_steps(build, run):
    """Steps before which the run evaluated (from `replay score`'s error listing them)."""
    p = sh([f"{build}/bin/replay", "score", run, "--step", "-999"] + SCORE_ARGS, check=False)
    tail = p.stderr.split("(there are:", 1)
    return [int(x) for x in tail[1].strip(" )\n").split()] if len(tail) == 2 else []


def curve_point(build, run, step, p):
    out = sh([f"{build}/bin/replay", "score", run, "--step", str(step), "--format", "json",
              "--turn", "last"] + SCORE_ARGS).stdout
    for r in json.loads(out.splitlines()[0]):
        if r["level"] == "all" and r["threshold"] == p:
            return 100.0 * r["value"]
    return 0.0


def tts_scores(build, run):
    """{(mode, level, p): value in %} of the run's test-time scaling (all tasks), from
    `replay score RUN --phase tts`; empty when the run has none."""
    out = {}
    for mode in ("best", "last"):
        p = sh([f"{build}/bin/replay", "score", run, "--phase", "tts", "--format", "json",
                "--turn", mode] + SCORE_ARGS, check=False)
        if p.returncode != 0:
            return {}
        for r in json.loads(p.stdout.splitlines()[0]):  # first line: the 'all tasks' denominator
            level = 0 if r["level"] == "all" else int(r["level"][1:])
            out[(mode, level, r["threshold"])] = 100.0 * r["value"]
    return out


def coldstart_summary(build, run):
    """The coldStart record of a run (`replay cat`), or None."""
    p = sh([f"{build}/bin/replay", "cat", run, "--no-manifest"])
    for line in p.stdout.splitlines():
        if '"coldStart"' in line:
            return json.loads(line)["coldStart"]
    return None


# --- One world's figures -------------------------------------------------------------------------

mean_sd = stats.mean_sd


def key(level, p):
    return f"L{level}_F{p:g}"


def level_name(level):
    return "all" if level == 0 else f"L{level}"


def effect_key(world, row, level, p):
    """The bootstrap generator's key of one effect: the report is byte-identical on a rerun."""
    return f"{world}/{row}/{level_name(level)}/{p:g}"


class World:
    """One world's runs and figures: scores per (row, seed), mean and sd per (row, level, p), and
    each factor row's effect versus the baseline per (row, level, p)."""

    def __init__(self, ctx, name, results):
        self.name = name
        self.results = {(r, s): run for (w, r, s), run in results.items() if w == name}
        self.names = [r["name"] for r in ctx.rows]
        self.scores = {k: score(ctx.build, run) for k, run in self.results.items()}
        with concurrent.futures.ThreadPoolExecutor(max_workers=ctx.jobs) as pool:
            done = {s: pool.submit(oracle, ctx.build, ctx.oracle_config, s, ctx.oracle_budget)
                    for s in ctx.seeds}
            for s in ctx.seeds:
                self.scores[("oracle", s)] = done[s].result()
        self.summary = {}
        for n in self.names + ["oracle"]:
            for level in ctx.levels + [0]:
                for p in ctx.thresholds:
                    xs = self.values(ctx, n, level, p)
                    self.summary[(n, level, p)] = mean_sd(xs) + (xs,)
        self.factors = [n for n in self.names if n != ctx.baseline] if ctx.baseline in self.names else []
        self.effects = {}
        for n in self.factors:
            for level in ctx.levels + [0]:
                for p in ctx.thresholds:
                    self.effects[(n, level, p)] = stats.Effect(
                        self.values(ctx, n, level, p), self.values(ctx, ctx.baseline, level, p),
                        effect_key(name, n, level, p))

    def values(self, ctx, row, level, p):
        """One value per seed, in seed order."""
        return [self.scores[(row, s)].get((level, p), 0.0) for s in ctx.seeds]

    def m(self, row, level, p):
        return self.summary[(row, level, p)][0]

    def sd(self, row, level, p):
        return self.summary[(row, level, p)][1]


# --- The report ----------------------------------------------------------------------------------

def header_lines(ctx, suite_path, compare):
    n = len(ctx.seeds)
    return ["# Ablation suite: the sim world beside the paper", "",
            f"Suite: `{os.path.relpath(suite_path, ROOT)}`; worlds {', '.join(ctx.worlds)}; seeds {ctx.seeds}; "
            "every figure is `replay score RUN --format json --turn last` (final evaluation, last turn, all "
            "held-out tasks) of the runs listed at the end of each world's section, as mean ± sample "
            "standard deviation over seeds, in %. Paper: daVinci-kernel-8B on KernelBench (docs/method.md, "
            "Published results).", "",
            f"Comparison: {compare}.", "",
            "The sim world is not the paper's setting: its backbone is a small network choosing "
            "schedule knobs for vinci's code generator and its GPU is an analytic H200 model; the "
            "paper's is a 14B/8B LLM writing Triton, timed on real GPUs. Compare directions, not "
            "values.", "",
            "Worlds: " + "; ".join(f"`{w}`, {WORLD_TEXT[w]}" for w in ctx.worlds) + ".", "",
            f"Row `oracle` is the ceiling of each world: `harness oracle {ctx.oracle_config} --set "
            f"run.seed=S --budget {ctx.oracle_budget}`, the best plan of each held-out task's knob space "
            "(every plan the policy can write once it knows every technique) found by search, evaluated as the "
            "final evaluation is. The search never consults the policy, so it is the same in both worlds. A "
            "method at the oracle's figure has nothing left to gain.", "",
            f"Effects: a row's effect is the mean over seeds of the paired difference row - "
            f"{ctx.baseline} (a seed runs every row with the same held-out tasks and keys), in "
            "percentage points, with two 95% intervals over seeds: a percentile bootstrap of the paired "
            f"differences ({stats.RESAMPLES} resamples of the seeds with replacement, from a generator "
            "keyed by world, row, level and threshold) and a paired t interval (mean ± t(0.975, n-1) · "
            f"sd / √n). With {n} seed{'s' if n != 1 else ''} the bootstrap has at most "
            f"{stats.distinct_resample_means(n)} distinct resample means, so its interval is too narrow; "
            "an effect is therefore **detected** only when both intervals exclude 0, and \"no effect "
            "detected\" otherwise. Power: the minimal detectable effect (MDE) of a two-sided paired t "
            "test at α = 0.05 with power 0.8 is (t(0.975, n-1) + t(0.8, n-1)) · sd / √n, from the "
            "seed-to-seed sd of the paired differences (ablations/stats.py; docs/method.md, Ablation "
            "statistics).", ""]


def fast_p_lines(ctx, w, rows):
    lines = []
    for p in ctx.thresholds:
        lines += [f"### fast_{p:g}", "",
                  "| row | " + " | ".join(f"L{l} sim | L{l} paper" for l in ctx.levels) + " | all sim |",
                  "|---|" + "---|---|" * len(ctx.levels) + "---|"]
        for r in rows + [{"name": "oracle"}]:
            cells = []
            for l in ctx.levels:
                paper = r.get("paper", {}).get(key(l, p))
                cells += [f"{w.m(r['name'], l, p):.1f} ± {w.sd(r['name'], l, p):.1f}",
                          "-" if paper is None else f"{paper:.1f}"]
            label = "oracle (ceiling)" if r["name"] == "oracle" else r["name"]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {w.m(r['name'], 0, p):.1f} ± "
                         f"{w.sd(r['name'], 0, p):.1f} |")
        lines.append("")
    finals = {tuple(round(w.m(n, l, p), 6) for l in ctx.levels + [0] for p in ctx.thresholds) for n in w.names}
    if len(w.names) > 1 and len(finals) == 1:
        lines += ["**Every row ends at the same fast_p.** In the sim world all methods reach one ceiling "
                  "within about 20 steps (see the curve below). The ceiling is the code generator's "
                  "coverage: held-out tasks made of ops it has no kernels for (convolution, pooling, "
                  "losses, scans) run only as library steps, at speedup 1.0, and its knob spaces (a few "
                  "thousand settings per task at most) are small enough for TRLOO alone to find the best "
                  "setting. Skills can then only speed up early learning. A sim world that separates the "
                  "methods needs a larger action space than today's generator offers (more families, "
                  "interacting knobs) or a smaller training budget.", ""]
    return lines


def cells(ctx):
    """The report's (level, p) cells, level 0 (all levels) last: columns 'L1 F1', ..., 'all F2'."""
    return [(l, p) for l in ctx.levels + [0] for p in ctx.thresholds]


def cell_name(level, p):
    return f"{level_name(level)} F{p:g}"


def num(x):
    """One decimal with a sign; never '-0.0'."""
    return f"{round(x, 1) + 0.0:+.1f}"


def interval_text(iv):
    return "-" if iv is None else f"[{num(iv[0])}, {num(iv[1])}]"


def effect_cell(e):
    """'effect [bootstrap] t[paired t] (n)', and 'detected' when both intervals exclude 0."""
    text = f"{num(e.effect)} {interval_text(e.boot)} t{interval_text(e.t)} ({e.n})"
    return text + " detected" if e.detected else text


def detection_summary(w):
    """How many row x cell intervals exclude 0; in a control world, how many of the skill factors'."""
    es = list(w.effects.values())
    boot = sum(stats.excludes_zero(e.boot) for e in es)
    t = sum(stats.excludes_zero(e.t) for e in es)
    detected = sum(e.detected for e in es)
    text = (f"No effect detected in {len(es) - detected} of {len(es)} row x cell comparisons; {detected} detected. "
            f"Intervals that exclude 0: bootstrap {boot}, paired t {t}, both {detected}.")
    skill = [e for (row, _, _), e in w.effects.items() if row in SKILL_FACTORS]
    names = ", ".join(f for f in SKILL_FACTORS if f in w.factors)
    if skill and w.name == "open":
        text += (f" The `open` world is the negative control: {sum(e.detected for e in skill)} of the skill "
                 f"factors' ({names}) {len(skill)} row x cell intervals exclude 0 (both intervals), each a false "
                 "positive or an effect that does not go through skills.")
    elif skill and w.name == "skills":
        text += (f" The `skills` world is the positive control: {sum(e.detected for e in skill)} of the skill "
                 f"factors' ({names}) {len(skill)} row x cell intervals exclude 0 (both intervals).")
    return text


def effects_lines(ctx, w):
    lines = [f"### Effects versus {ctx.baseline}", ""]
    if not w.factors:
        return lines + [f"No effects: the baseline row `{ctx.baseline}` and at least one other row must both "
                        "be run (--rows).", ""]
    lines += [f"Each cell: the effect (row - {ctx.baseline}, fast_p points, mean over seeds), its 95% "
              "bootstrap interval, `t` and the 95% paired t interval, (the number of seeds); "
              "`detected` where both intervals exclude 0.", "",
              "| row | " + " | ".join(cell_name(l, p) for l, p in cells(ctx)) + " |",
              "|---|" + "---|" * len(cells(ctx))]
    for n in w.factors:
        lines.append(f"| {n} | " + " | ".join(effect_cell(w.effects[(n, l, p)]) for l, p in cells(ctx)) + " |")
    lines += ["", detection_summary(w)]
    return lines + [""]


def power_cell(e):
    """'MDE / seeds the measured effect needs' (- for a zero effect, > 1000 past the search)."""
    mde = e.mde()
    if mde is None:
        return "-"
    need = e.seeds_needed()
    return f"{mde:.1f} / " + ("-" if e.effect == 0 else "> 1000" if need is None else str(need))


def power_lines(ctx, w):
    if not w.factors:
        return []
    n = len(ctx.seeds)
    lines = [f"### Power at {n} seed{'s' if n != 1 else ''}", "",
             f"Each cell: the minimal detectable effect in fast_p points at {n} seeds (paired t test, α = 0.05 "
             "two-sided, power 0.8, from that cell's seed-to-seed sd of the paired differences), then the "
             "seeds the measured effect would need to be detected with power 0.8 at that sd (`-`: the "
             "measured effect is 0; `> 1000`: more than a thousand).", "",
             "| row | " + " | ".join(cell_name(l, p) for l, p in cells(ctx)) + " |",
             "|---|" + "---|" * len(cells(ctx))]
    if n < 2:
        return lines[:2] + ["An MDE needs at least 2 seeds (--seeds).", ""]
    for f in w.factors:
        lines.append(f"| {f} | " + " | ".join(power_cell(w.effects[(f, l, p)]) for l, p in cells(ctx)) + " |")
    return lines + [""]


def effect_figure(e, label):
    return f"{label} {num(e.effect)} {interval_text(e.boot)} t{interval_text(e.t)}" + (" detected" if e.detected else "")


def claims_of(ctx, w):
    """[(claim, reproduced, figures)] of the paper's four claims that this world's rows test, read
    from the effects versus the baseline (row - main: a loss is negative)."""
    E = lambda row, l, p: w.effects[(row, l, p)]
    lost = lambda e: e.detected and e.effect < 0
    claims = []
    if ctx.baseline == "main" and "drkernel_baseline" in w.factors:
        es = {l: E("drkernel_baseline", l, 1.2) for l in ctx.levels}
        wins = [l for l in ctx.levels if lost(es[l])]
        claims.append(("daVinci-kernel beats Dr.Kernel's TRLOO alone on fast_1.2 on at least one level (a detected "
                       "loss of drkernel_baseline - main)", bool(wins),
                       f"levels where it does: {wins or 'none'}; " +
                       ", ".join(effect_figure(es[l], f"L{l}") for l in ctx.levels)))
    if ctx.baseline == "main" and "abl1_noskill" in w.factors:
        es = [E("abl1_noskill", l, 1.0) for l in ctx.levels]
        drops = [-e.effect for e in es]
        claims.append(("Abl.1: skills help most on harder levels (a detected fast_1 loss without skills on every "
                       "level, growing with the level)",
                       all(lost(e) for e in es) and all(b >= a for a, b in zip(drops, drops[1:])),
                       ", ".join(effect_figure(e, f"L{l}") for l, e in zip(ctx.levels, es))))
    if ctx.baseline == "main" and "abl3_nojoint" in w.factors:
        hi = [l for l in ctx.levels if l >= 2]
        claims.append(("Abl.3: without joint training high thresholds collapse (a detected fast_2 loss on every "
                       "level from L2)", bool(hi) and all(lost(E("abl3_nojoint", l, 2.0)) for l in hi),
                       ", ".join(effect_figure(E("abl3_nojoint", l, 2.0), f"L{l} fast_2") for l in hi)))
    if ctx.baseline == "main" and "abl4_bm25only" in w.factors:
        above = [p for p in ctx.thresholds if p > 1.0]
        holds = not any(E("abl4_bm25only", l, 1.0).detected for l in ctx.levels)
        loses = bool(above) and all(lost(E("abl4_bm25only", 0, p)) for p in above)
        claims.append(("Abl.4: BM25-only holds fast_1 (no effect detected on any level) but loses fast_1.2 and "
                       "above (a detected loss over all levels at every threshold above 1)", holds and loses,
                       "fast_1 " + ", ".join(effect_figure(E("abl4_bm25only", l, 1.0), f"L{l}") for l in ctx.levels)
                       + "; all levels " + ", ".join(effect_figure(E("abl4_bm25only", 0, p), f"fast_{p:g}")
                                                     for p in above)))
    return claims


def claims_lines(ctx, w):
    claims = claims_of(ctx, w)
    if not claims:
        return []
    lines = [f"### The paper's claims in the `{w.name}` world", "",
             f"Read from the effects versus {ctx.baseline} above (bootstrap interval, `t` paired t interval; "
             "`detected`: both exclude 0).", "",
             "| claim | reproduced | figures |", "|---|---|---|"]
    for text, ok, detail in claims:
        lines.append(f"| {text} | {'yes' if ok else 'no'} | {detail} |")
    return lines + [""]


def coldstart_cells(cs):
    """Skills added, SFT examples, examples dropped and cross-entropy of the coldStart records."""
    if not all(cs):
        return ["-", "-", "-", "-"]
    added = [len(c.get("added", [])) for c in cs]
    ex = [c.get("examples", [0, 0, 0]) for c in cs]
    dr = [c.get("examplesDropped", [0, 0, 0]) for c in cs]
    b = [c.get("crossEntropyBefore", [0, 0, 0]) for c in cs]
    a = [c.get("crossEntropyAfter", [0, 0, 0]) for c in cs]
    avg = lambda vs, i: sum(v[i] for v in vs) / len(vs)
    return [f"{sum(added) / len(added):.1f}",
            ", ".join(f"{avg(ex, i):.0f}" for i in range(3)),
            ", ".join(f"{avg(dr, i):.0f}" for i in range(3)),
            ", ".join(f"{avg(b, i):.2f}" for i in range(3)) + " -> " + ", ".join(f"{avg(a, i):.2f}" for i in range(3))]


def coldstart_lines(ctx, w):
    """Cold start: final and step-0 fast_p with and without it, and without the diversity filter."""
    cold_rows = [n for n in ("main", "main_nocoldstart", "main_coldstart_nodiversity") if n in w.names]
    if len(cold_rows) < 2:
        return []
    lines = ["### Cold start (Step 1) and its diversity filter", "",
             "fast_p of the held-out tasks before any RL (step 0: the cold-started backbone and "
             "library, or fresh parameters and the seed library) and after the last step, all "
             "levels, last turn, mean ± sd over seeds, in %.", "",
             "| row | step 0 fast_1 | step 0 fast_1.2 | step 0 fast_1.5 | final fast_1 | final fast_1.2 | final fast_1.5 | skills added | SFT examples (sel, pol, sum) | dropped by the filter | cross-entropy before -> after (sel, pol, sum) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in cold_rows:
        row = []
        for p in (1.0, 1.2, 1.5):
            mm, ss = mean_sd([curve_point(ctx.build, w.results[(n, s)], 0, p) for s in ctx.seeds])
            row.append(f"{mm:.1f} ± {ss:.1f}")
        for p in (1.0, 1.2, 1.5):
            row.append(f"{w.m(n, 0, p):.1f} ± {w.sd(n, 0, p):.1f}")
        row += coldstart_cells([coldstart_summary(ctx.build, w.results[(n, s)]) for s in ctx.seeds])
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return lines + [""]


def tts_lines(ctx, w):
    """Test-time scaling: best-turn and last-turn fast_p of the rows that ran it."""
    tts = {k: tts_scores(ctx.build, run) for k, run in w.results.items()}
    tts_rows = [n for n in w.names if all(tts[(n, s)] for s in ctx.seeds)]
    if not tts_rows:
        return []
    lines = ["### Test-time scaling (Step 3)", "",
             "After the final evaluation: I iterations x T turns per held-out task, each iteration "
             "continuing from the best window of W turns by reward (the rows' configs: 10 x 5, "
             "window 4, sampled). fast_p over all levels, mean ± sd over seeds, in %; the plain "
             "3-turn evaluation's last turn beside it.", "",
             "| row | " + " | ".join(f"eval last F{p:g} | TTS best F{p:g} | TTS last F{p:g}" for p in ctx.thresholds)
             + " |", "|---|" + "---|---|---|" * len(ctx.thresholds)]
    for n in tts_rows:
        row = []
        for p in ctx.thresholds:
            row.append(f"{w.m(n, 0, p):.1f} ± {w.sd(n, 0, p):.1f}")
            for mode in ("best", "last"):
                mm, ss = mean_sd([tts[(n, s)].get((mode, 0, p), 0.0) for s in ctx.seeds])
                row.append(f"{mm:.1f} ± {ss:.1f}")
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return lines + [""]


def curve_lines(ctx, w):
    """Learning curves: held-out fast_1.2 (all levels, last turn) at every evaluation."""
    curve_p = 1.2 if 1.2 in ctx.thresholds else ctx.thresholds[0]
    steps = eval_steps(ctx.build, w.results[(w.names[0], ctx.seeds[0])])
    if not steps:
        return []
    lines = [f"### Held-out fast_{curve_p:g} over training (all levels, last turn, mean ± sd over seeds)", "",
             "| row | " + " | ".join(f"step {st}" for st in steps) + " |", "|---|" + "---|" * len(steps)]
    for n in w.names:
        row = []
        for st in steps:
            mm, ss = mean_sd([curve_point(ctx.build, w.results[(n, s)], st, curve_p) for s in ctx.seeds])
            row.append(f"{mm:.1f} ± {ss:.1f}")
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    return lines + [""]


def runs_lines(ctx, w):
    lines = ["### Runs", "",
             "| row | seed | run | " + " | ".join(f"L{l} F{p:g}" for l in ctx.levels for p in ctx.thresholds) + " |",
             "|---|---|---|" + "---|" * (len(ctx.levels) * len(ctx.thresholds))]
    for n in w.names:
        for s in ctx.seeds:
            sc = w.scores[(n, s)]
            lines.append(f"| {n} | {s} | `{w.results[(n, s)]}` | " +
                         " | ".join(f"{sc.get((l, p), 0.0):.1f}" for l in ctx.levels for p in ctx.thresholds) + " |")
    return lines + [""]


def world_lines(ctx, w):
    """A world's section: every table of the report for that world's runs."""
    lines = [f"## World `{w.name}`", "", f"{WORLD_TEXT[w.name][0].upper()}{WORLD_TEXT[w.name][1:]}.", ""]
    for part in (fast_p_lines(ctx, w, ctx.rows), effects_lines(ctx, w), power_lines(ctx, w),
                 claims_lines(ctx, w), coldstart_lines(ctx, w), tts_lines(ctx, w), curve_lines(ctx, w),
                 runs_lines(ctx, w)):
        lines += part
    return lines


def svg_bars(title, groups, series, values, errors):
    W, H, L, R, T, B = 760, 420, 60, 230, 40, 50
    ymax = max([v + e for row, erow in zip(values, errors) for v, e in zip(row, erow)] + [1]) * 1.1
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    gw = (W - L - R) / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series))
    y = lambda v: H - B - v / ymax * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="15">{title}</text>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{W - R}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="8" y="{y(v) + 4:.1f}">{v:.0f}</text>')
    for g, name in enumerate(groups):
        for s in range(len(series)):
            v, e = values[g][s], errors[g][s]
            x = L + gw * g + gw * 0.1 + bw * s
            out.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bw:.1f}" height="{y(0) - y(v):.1f}" fill="{colors[s % 6]}"/>')
            cx = x + bw / 2
            out.append(f'<line x1="{cx:.1f}" y1="{y(max(0, v - e)):.1f}" x2="{cx:.1f}" y2="{y(v + e):.1f}" stroke="black"/>')
        out.append(f'<text x="{L + gw * g + gw * 0.4:.1f}" y="{H - B + 16}">{name}</text>')
    for s, name in enumerate(series):
        out.append(f'<rect x="{W - R + 10}" y="{T + 18 * s - 9}" width="12" height="12" fill="{colors[s % 6]}"/>')
        out.append(f'<text x="{W - R + 28}" y="{T + 18 * s + 2}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(ctx, w, folder):
    """fast_p.svg for the open world, fast_p_<world>.svg for another; returns the path."""
    plot = os.path.join(folder, "fast_p.svg" if w.name == "open" else f"fast_p_{w.name}.svg")
    groups = [f"L{l} F{p:g}" for l in ctx.levels for p in ctx.thresholds if p in (1.0, 1.2)] + ["all F1.2"]
    vals, errs = [], []
    for g in groups:
        l = 0 if g.startswith("all") else int(g[1])
        p = float(g.split("F")[1])
        vals.append([w.m(n, l, p) for n in w.names])
        errs.append([w.sd(n, l, p) for n in w.names])
    with open(plot, "w") as f:
        f.write(svg_bars(f"fast_p in the sim world `{w.name}` (mean and sd over seeds)", groups, w.names, vals, errs))
    return plot


# --- The command line ----------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", nargs="?", default="ablations/suite.toml")
    ap.add_argument("--world", choices=("open", "skills", "both"), default="both",
                    help="which sim world to run: open (the default world), skills (--set sim.knowledge=skills) "
                         "or both (default)")
    ap.add_argument("--seeds", type=int, default=None, help="run seeds 1..N (default: the suite's seeds)")
    ap.add_argument("--rows", default=None, help="comma-separated row names (default: every row)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (each run is single-threaded)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--report", default=None, help="default: report.md beside the suite file")
    ap.add_argument("--out", default=None, help="runs root (default: the suite's `out`); runs go to OUT/WORLD/")
    ap.add_argument("--fast-p-inclusive", action="store_true",
                    help="count speedup >= p instead of KernelBench's speedup > p")
    args = ap.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        ap.error(f"--seeds: expected a positive number of seeds, found {args.seeds}")
    if args.jobs < 1:
        ap.error(f"--jobs: expected at least 1, found {args.jobs}")
    return args


def worlds_of(choice):
    return list(WORLDS) if choice == "both" else [choice]


def seeds_of(n, suite_seeds):
    return list(range(1, n + 1)) if n is not None else list(suite_seeds)


def select_rows(rows, names):
    """The suite's rows named in `names` (comma-separated; None: all), in the suite's order."""
    if names is None:
        return rows
    want = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in want if n not in {r["name"] for r in rows}]
    if unknown or not want:
        sys.exit(f"run_suite: --rows: unknown row(s) {', '.join(unknown) or '(none given)'}; the suite has "
                 f"{', '.join(r['name'] for r in rows)}")
    return [r for r in rows if r["name"] in want]


class Context:
    """What every world shares: the build, the rows and seeds run, the report's cells."""

    def __init__(self, args, cfg, all_rows):
        self.build, self.jobs = args.build, args.jobs
        self.out = args.out or cfg["out"]
        self.worlds = worlds_of(args.world)
        self.seeds = seeds_of(args.seeds, cfg["seeds"])
        self.rows = select_rows(all_rows, args.rows)
        self.levels, self.thresholds = cfg["levels"], cfg["thresholds"]
        # The row every other is compared with: `baseline` in [suite], else main, else the first row.
        names = [r["name"] for r in all_rows]
        self.baseline = cfg.get("baseline", "main" if "main" in names else names[0])
        ocfg = cfg.get("oracle", {})
        self.oracle_config = ocfg.get("config", next((r["config"] for r in all_rows if r["name"] == "main"),
                                                     all_rows[0]["config"]))
        self.oracle_budget = int(ocfg.get("budget", 4000))


def main(argv=None):
    args = parse_args(argv)
    if args.fast_p_inclusive:
        SCORE_ARGS.append("--fast-p-inclusive")
    compare = ("fast_p counts speedup >= p (inclusive; KernelBench's definition is speedup > p)"
               if args.fast_p_inclusive else "fast_p counts speedup > p (KernelBench's definition)")
    suite_path = os.path.join(ROOT, args.suite) if not os.path.isabs(args.suite) else args.suite
    with open(suite_path, "rb") as f:
        suite = tomllib.load(f)
    ctx = Context(args, suite["suite"], suite["row"])
    report = args.report or os.path.join(os.path.dirname(suite_path), "report.md")

    results = run_all(ctx)
    worlds = [World(ctx, name, results) for name in ctx.worlds]
    lines = header_lines(ctx, suite_path, compare)
    for w in worlds:
        lines += world_lines(ctx, w)
    with open(report, "w") as f:
        f.write("\n".join(lines))
    plots = [write_svg(ctx, w, os.path.dirname(report)) for w in worlds]
    print(f"wrote {os.path.relpath(report, ROOT)} and " + ", ".join(os.path.relpath(p, ROOT) for p in plots))


if __name__ == "__main__":
    main()
