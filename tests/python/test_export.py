"""`replay export --format parquet|jsonl|tensorboard` (the real binary, which runs the package) and
the ablation plots: the files load back with pandas and TensorBoard's EventAccumulator, and hold what the run's tables hold."""
import json
import os
import subprocess

import pandas as pd
import pytest

import vinci
from conftest import run_cmd


@pytest.fixture(scope="module")
def tables(golden):
    return vinci.open_run(golden).tables()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_loads_in_pandas(replay, golden, tables, tmp_path, fmt):
    out = str(tmp_path / fmt)
    p = run_cmd([replay, "export", golden, "--format", fmt, "--out", out])
    assert "measurements=" in p.stderr
    for name in vinci.TABLES:
        path = os.path.join(out, f"{name}.{fmt}")
        df = pd.read_parquet(path) if fmt == "parquet" else pd.read_json(path, lines=True, dtype=False, precise_float=True)
        assert len(df) == len(tables[name]) > 0, name
        assert list(df.columns) == list(tables[name].columns), name
    m = pd.read_parquet(os.path.join(out, "measurements.parquet")) if fmt == "parquet" else \
        pd.read_json(os.path.join(out, "measurements.jsonl"), lines=True, dtype=False, precise_float=True)
    assert list(m["speedup"]) == list(tables["measurements"]["speedup"])  # exact, not rounded
    assert list(m["plan"]) == list(tables["measurements"]["plan"])
    t = pd.read_parquet(os.path.join(out, "trials.parquet")) if fmt == "parquet" else \
        pd.read_json(os.path.join(out, "trials.jsonl"), lines=True, dtype=False, precise_float=True)
    assert [int(x) for x in t["seed"]] == [int(x) for x in tables["trials"]["seed"]]
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["run_digest"] == vinci.open_run(golden).manifest["run_digest"]
    assert manifest["tables"]["fast_p"] == len(tables["fast_p"])


def test_export_keeps_model_calls_as_default(replay, golden):
    # The default format is still the trainer's JSON lines of model calls: a sim run has none.
    p = run_cmd([replay, "export", golden], check=False)
    assert p.returncode == 2 and "has no model calls" in p.stderr


def test_export_format_errors(replay, golden, tmp_path):
    p = run_cmd([replay, "export", golden, "--format", "parquet"], check=False)
    assert p.returncode == 2 and "--out DIR is required" in p.stderr
    p = run_cmd([replay, "export", golden, "--format", "csv", "--out", str(tmp_path)], check=False)
    assert p.returncode == 2 and "expected calls, parquet, jsonl or tensorboard" in p.stderr
    p = run_cmd([replay, "export", golden, "--format", "jsonl", "--role", "policy", "--out",
                 str(tmp_path)], check=False)
    assert p.returncode == 2 and "--format calls only" in p.stderr
    # An interpreter without the package: a clear error naming the way to install it.
    env = dict(os.environ, VINCI_PYTHON="/bin/false")
    p = subprocess.run([replay, "export", golden, "--format", "parquet", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "pip install ./python" in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "x")


def test_tensorboard_reads_back(replay, golden, smoke_runs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = str(tmp_path / "tb")
    run_cmd([replay, "export", golden, "--format", "tensorboard", "--out", out])
    # Several runs side by side, one subfolder each; the golden run's again: replaced, not added.
    run_cmd(["python3", "-m", "vinci", "tensorboard", smoke_runs["smoke_s8"],
             smoke_runs["smoke_noskill_s8"], golden, "--out", out])
    assert sorted(os.listdir(out)) == ["smoke", "smoke_noskill_s8", "smoke_s8"]
    assert len(os.listdir(os.path.join(out, "smoke"))) == 1

    acc = EventAccumulator(os.path.join(out, "smoke"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    run = vinci.open_run(golden)
    for tag in ("train/reward_mean", "train/library_size", "library/size", "evaluator/measurements",
                "fast_p/last/all/p1.2", "fast_p/best/L1/p1", "fast_p/last/L2/p2", "tts_fast_p/last/all/p1.2"):
        assert tag in tags, (tag, sorted(tags))
    reward = {e.step: e.value for e in acc.Scalars("train/reward_mean")}
    met = run.metrics().query("name == 'reward_mean'")
    assert reward == pytest.approx(dict(zip(met["step"], met["value"])), rel=1e-6)
    fp = {e.step: e.value for e in acc.Scalars("fast_p/last/all/p1.2")}
    final = json.loads(run_cmd([replay, "score", golden, "--format", "json", "--turn", "last"]).stdout.split("\n")[0])
    want = [r["value"] for r in final if r["level"] == "all" and r["threshold"] == 1.2][0]
    assert fp[max(fp)] == pytest.approx(want, rel=1e-6)
    assert sorted(fp) == sorted(run.fast_p().query("phase == 'eval'")["step"].unique())
    n = {e.step: e.value for e in acc.Scalars("evaluator/measurements")}
    m = run.measurements()
    assert n[0] == len(m[m["step"] == 0])


def test_ablation_plots(smoke_runs, tmp_path):
    out = str(tmp_path / "fig")
    p = run_cmd(["python3", "-m", "vinci", "plot-ablations", *smoke_runs.values(), "--out", out,
                 "--thresholds", "1,1.2"])
    written = p.stdout.split()
    for name in ("fast_p_1.png", "fast_p_1.2.png", "fast_p_1.svg", "curves.csv"):
        assert os.path.join(out, name) in written
        assert os.path.getsize(os.path.join(out, name)) > 1000
    assert open(os.path.join(out, "fast_p_1.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    curves = pd.read_csv(os.path.join(out, "curves.csv"))
    assert set(curves["method"]) == {"smoke", "smoke_noskill"}
    assert set(curves["count"]) == {2}  # two seeds per point
    # Mean over the seeds' own fast_p, level all, p = 1.2, at the final step.
    runs = [vinci.open_run(smoke_runs[f"smoke_s{s}"]) for s in (7, 8)]
    finals = []
    for r in runs:
        fp = r.fast_p(thresholds=[1.2])
        fp = fp[(fp["phase"] == "eval") & (fp["turn_mode"] == "last") & (fp["denominator"] == "all") &
                (fp["level"] == 0)]
        finals.append(fp.sort_values("step")["value"].iloc[-1])
    row = curves[(curves["method"] == "smoke") & (curves["level"] == 0) & (curves["threshold"] == 1.2)]
    assert row.sort_values("step")["mean"].iloc[-1] == pytest.approx(sum(finals) / 2)


def test_ablation_plots_from_a_suite(smoke_runs, tmp_path):
    # The suite's runs are <out>/<world>/<row>_s<seed>: the open world is the smoke runs' root.
    out = tmp_path / "suite_runs"
    out.mkdir()
    os.symlink(os.path.dirname(next(iter(smoke_runs.values()))), out / "open")
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[suite]\nseeds = [7, 8, 9]\nout = "{out}"\n\n'
                     '[[row]]\nname = "smoke"\nconfig = "experiments/smoke.toml"\n')
    p = run_cmd(["python3", "-m", "vinci", "plot-ablations", "--suite", str(suite), "--out",
                 str(tmp_path / "fig"), "--thresholds", "1.2"])
    assert "smoke_s9: no run there, skipped" in p.stderr
    assert os.path.exists(tmp_path / "fig" / "fast_p_1.2.png")


def test_export_of_a_model_run_with_turns_without_a_kernel(replay, tmp_path):
    # A language-model run whose first replies hold no kernel (prose only) has turns without a
    # candidate: their measurement names no plan (the zero address), which is not an object to
    # read. Every export reads every run `replay verify` accepts.
    from conftest import Child, binary
    serve = Child([binary("harness"), "serve", "--port", "0", "--faults", ",".join(["no_tool_call"] * 8)])
    try:
        # Waits for the server's own word (or its exit), not a deadline.
        port = serve.wait_for(r"listening on [^:\s]+:(\d+)\n").group(1)
        root = str(tmp_path / "runs")
        run_cmd([binary("harness"), "run", "experiments/llm_smoke.toml", "--out", root, "--name", "kernelless",
                 "--set", f"backbone.base_url=http://127.0.0.1:{port}/v1", "--set", "tts.enabled=false",
                 "--set", "backbone.retries=1", "--set", "backbone.concurrency=1", "--threads", "1"])
    finally:
        serve.stop()
    run = os.path.join(root, "kernelless")
    run_cmd([replay, "verify", run])
    measurements = vinci.open_run(run).measurements()
    assert (measurements["plan"] == "0" * 32).any(), "the faults made no turn without a kernel"
    for fmt in ("parquet", "jsonl"):
        out = str(tmp_path / fmt)
        run_cmd([replay, "export", run, "--format", fmt, "--out", out])
        assert os.path.exists(os.path.join(out, f"measurements.{fmt}"))
