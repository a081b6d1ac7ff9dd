"""TensorBoard event files of runs: `python3 -m vinci tensorboard RUN... --out DIR`.

One subfolder per run (DIR/<run name>), so `tensorboard --logdir DIR` shows several runs side by
side. Scalars, each at its training step:

  train/<name>                 the run's train metric records: reward_mean, correct_rate,
                               best_speedup_mean, library_size, skills_accepted
  fast_p/<turn>/<level>/p<p>   held-out fast_p (phase eval), KernelBench's speedup > p unless the
                               run's eval.fast_p_inclusive, denominator all; level L1, L2, .. or all
  tts_fast_p/<turn>/<level>/p<p>  the test-time-scaling pass, at the final evaluation's step
  library/size                 skills in the library the step sees (library snapshot records)
  evaluator/measurements       candidates the evaluator measured for that step (every phase)
  evaluator/timing_samples     kernel timing samples it took
  evaluator/kernel_time_us     the sum of those samples (device time spent timing candidates)

The log has no wall clock (docs/log_format.md), so the evaluator's throughput is counted per
training step, not per second. The event files come from tensorboardX.
"""
import os


def _level_name(level):
    return "all" if level == 0 else f"L{level}"


def scalars(run):
    """[(tag, step, value)] of a run, in tag then step order."""
    out = []
    met = run.metrics()
    train = met[(met["split"] == "train") & (met["phase"] == "train")]
    for row in train.itertuples(index=False):
        out.append((f"train/{row.name}", int(row.step), float(row.value)))
    fp = run.fast_p()
    fp = fp[fp["denominator"] == "all"]
    for row in fp.itertuples(index=False):
        prefix = "fast_p" if row.phase == "eval" else "tts_fast_p"
        out.append((f"{prefix}/{row.turn_mode}/{_level_name(row.level)}/p{row.threshold:g}",
                    int(row.step), float(row.value)))
    lib = run.library()
    for row in lib.itertuples(index=False):
        out.append(("library/size", int(row.for_step), float(row.size)))
    m = run.measurements()
    m = m[m["step"] >= 0]
    if len(m):
        t = run.timings()
        k = t[t["side"] == "kernel"].groupby("seq")["time_us"].sum()
        per = m[["seq", "step", "kernel_samples"]].assign(
            kernel_time=m["seq"].map(k).fillna(0.0).to_numpy())
        by_step = per.groupby("step").agg(n=("seq", "size"), samples=("kernel_samples", "sum"),
                                          time=("kernel_time", "sum"))
        for step, row in by_step.iterrows():
            out.append(("evaluator/measurements", int(step), float(row["n"])))
            out.append(("evaluator/timing_samples", int(step), float(row["samples"])))
            out.append(("evaluator/kernel_time_us", int(step), float(row["time"])))
    # One value per (tag, step): a later record of the same step replaces an earlier one.
    last = {}
    for tag, step, value in out:
        last[(tag, step)] = value
    return sorted(((t, s, v) for (t, s), v in last.items()))


def write_tensorboard(runs, out_dir):
    """Writes each run's scalars under out_dir/<run name>; returns {subfolder: scalars written}."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError("the tensorboardX package is not installed (pip install tensorboardX, "
                          "or pip install './python[tensorboard]')") from None
    written = {}
    names = [run.name or os.path.basename(run.path) for run in runs]
    for run, name in zip(runs, names):
        sub = name if names.count(name) == 1 else os.path.basename(run.path)
        folder = os.path.join(out_dir, sub)
        values = scalars(run)
        # The folder holds this run's curves only: event files of an earlier export go.
        if os.path.isdir(folder):
            for f in os.listdir(folder):
                if f.startswith("events.out.tfevents."):
                    os.unlink(os.path.join(folder, f))
        with SummaryWriter(logdir=folder, flush_secs=3600) as w:
            for tag, step, value in values:
                w.add_scalar(tag, value, global_step=step, walltime=float(max(step, 0)))
        written[sub] = len(values)
    return written
