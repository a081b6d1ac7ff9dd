"""The ablation figures of ablations/report.md, drawn from runs with matplotlib (Agg backend):
held-out fast_p against the training step, one line per method (row) with its mean over seeds and a
band of +- one sample standard deviation.

    python3 -m vinci plot-ablations --suite ablations/suite.toml --out ablations/figures
    python3 -m vinci plot-ablations runs/ablations/open/main_s1 runs/ablations/open/main_s2 ... --out DIR

With --suite the runs are <suite.out>/<world>/<row>_s<seed> for every row and seed, as
ablations/run_suite.py lays them out (--world: open, the default, or skills; missing ones are
named and skipped); given as folders, a run's method is its folder name without the _s<seed>
suffix. Figures follow the report: fast_p from the measurement records as `replay score --turn last`
computes it (speedup > p unless --fast-p-inclusive), denominator all. One figure per threshold,
DIR/fast_p_<p>.png (and .svg), with one panel per level and one for all levels; DIR/curves.csv
holds every plotted value.
"""
import os
import re
import tomllib

import pandas as pd

from .run import open_run


def method_of(path):
    return re.sub(r"_s\d+$", "", os.path.basename(os.path.normpath(path)))


def suite_runs(suite_path, root=".", world="open"):
    """[(method, seed, run folder)] of a suite file in one sim world; folders relative to `root`."""
    with open(suite_path, "rb") as f:
        suite = tomllib.load(f)
    out = suite["suite"]["out"]
    return [(row["name"], seed, os.path.join(root, out, world, f"{row['name']}_s{seed}"))
            for row in suite["row"] for seed in suite["suite"]["seeds"]]


def curves(runs, thresholds=None, inclusive=False, turn="last"):
    """DataFrame (method, seed, run, step, level, threshold, value) of held-out fast_p."""
    parts = []
    for method, seed, path in runs:
        run = open_run(path)
        fp = run.fast_p(thresholds=thresholds or run._thresholds(None), inclusive=inclusive)
        fp = fp[(fp["phase"] == "eval") & (fp["turn_mode"] == turn) & (fp["denominator"] == "all")]
        parts.append(fp.assign(method=method, seed=seed, run=path)[
            ["method", "seed", "run", "step", "level", "threshold", "value"]])
    if not parts:
        raise SystemExit("plot-ablations: no runs to plot")
    return pd.concat(parts, ignore_index=True)


def summarize(c):
    """Mean and sample standard deviation over seeds per (method, level, threshold, step)."""
    g = c.groupby(["method", "level", "threshold", "step"], sort=False)["value"]
    s = g.agg(["mean", "std", "count"]).reset_index()
    s["std"] = s["std"].fillna(0.0)
    return s


def draw(c, out_dir, formats=("png", "svg")):
    """Writes one figure per threshold; returns the paths written."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the matplotlib package is not installed (pip install matplotlib, or "
                          "pip install './python[plots]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    os.makedirs(out_dir, exist_ok=True)
    s = summarize(c)
    methods = list(dict.fromkeys(c["method"]))
    levels = sorted(lv for lv in s["level"].unique() if lv != 0) + [0]
    written = []
    for p in sorted(s["threshold"].unique()):
        fig, axes = plt.subplots(1, len(levels), figsize=(4.2 * len(levels), 3.6), squeeze=False,
                                 sharey=True)
        for ax, level in zip(axes[0], levels):
            for i, method in enumerate(methods):
                d = s[(s["method"] == method) & (s["level"] == level) & (s["threshold"] == p)]
                d = d.sort_values("step")
                if d.empty:
                    continue
                color = f"C{i % 10}"
                x = d["step"].to_numpy()
                y = 100 * d["mean"].to_numpy()
                sd = 100 * d["std"].to_numpy()
                # Methods often share a curve (the sim world's ceiling): dashes and markers keep
                # each one visible.
                ax.plot(x, y, color=color, label=method, linewidth=1.5,
                        linestyle=("-", "--", ":", "-.")[i % 4], marker="o", markersize=3)
                ax.fill_between(x, y - sd, y + sd, color=color, alpha=0.18, linewidth=0)
            ax.set_title("all levels" if level == 0 else f"level {level}")
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(-2, 102)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"held-out fast_{p:g} (%)")
        axes[0][-1].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"held-out fast_{p:g} over training: mean over seeds, band \u00b1 1 sd")
        fig.tight_layout()
        for ext in formats:
            path = os.path.join(out_dir, f"fast_p_{p:g}.{ext}")
            fig.savefig(path, metadata={"Date": None} if ext == "svg" else None)
            written.append(path)
        plt.close(fig)
    path = os.path.join(out_dir, "curves.csv")
    s.to_csv(path, index=False)
    written.append(path)
    return written
