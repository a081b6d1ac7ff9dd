#!/usr/bin/env python3
"""Cross-checks vinci's task references against KernelBench's own problem modules.

For each vinci task with a KernelBench twin (the task's `kernelbench` key), at one size (small by
default, so it runs on a CPU):

  1. `harness tasks --reference ID` writes vinci's inputs (drawn after torch.manual_seed(SEED)),
     its reference output, and the values of the problem's module-level size constants.
  2. The KernelBench problem file is loaded, those constants are set, and the model is built the way
     KernelBench's evaluator builds it: manual_seed(42); get_init_inputs(); manual_seed(42);
     Model(*init_inputs). Then manual_seed(SEED); get_inputs() gives KernelBench's inputs, and the
     model runs (after manual_seed(SEED), in training mode, as KernelBench runs it) on vinci's inputs.
  3. `harness tasks --pytorch ID` writes vinci's rendering of the task, the module a model is shown
     and the evaluator builds the reference from. Two more modules are built from its
     get_init_inputs() after manual_seed(42), as vinci's evaluator builds a candidate
     (ModelNew(*get_init_inputs())), and run on vinci's inputs: the rendering's own Model, and
     the KernelBench problem's Model, standing in for a module written for the problem file. Both
     must give vinci's reference output (within 1e-5).
  4. It prints one row per task: inputs equal or their largest difference, output bit-identical,
     within 1e-5, or different (largest absolute difference, shapes), and the verdict of step 3.

Run with the torch build vinci's libtorch is (Debian's python3-torch for the Debian libtorch) to
expect bit-identical results; another build may differ in the last bits.

  python3 scripts/kernelbench_crosscheck.py --kernelbench ~/KernelBench [--level 1] [--ids L1_019,...]

Exit status: 0 when every checked task is bit-identical or within 1e-5 (and its inputs equal),
1 when some task differs or fails, 2 on bad usage. --require ID,... also fails when a listed task
could not be checked (its problem file is missing from the checkout).
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:
    sys.exit("kernelbench_crosscheck: needs torch for Python (Debian: apt-get install python3-torch)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITHIN = 1e-5


def problem_root(path):
    """Accepts a KernelBench repository or its inner KernelBench/ folder."""
    for cand in (os.path.join(path, "KernelBench"), path):
        if os.path.isdir(os.path.join(cand, "level1")) or os.path.isdir(os.path.join(cand, "level2")) or \
                os.path.isdir(os.path.join(cand, "level3")):
            return cand
    sys.exit(f"kernelbench_crosscheck: --kernelbench {path}: expected a folder holding level1/, level2/ "
             f"or level3/ (or a KernelBench checkout with KernelBench/level1/...)")


def list_tasks(harness, level, dirs):
    cmd = [harness, "tasks"] + dirs + (["--level", str(level)] if level else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kernelbench_crosscheck: {' '.join(cmd)} failed: {r.stderr.strip()}")
    out = r.stdout
    rows = [line.split("\t") for line in out.splitlines() if line]
    return [(r[0], r[4] if len(r) > 4 else "") for r in rows]


def load_problem(path):
    name = "kernelbench_problem_" + os.path.basename(path).replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def max_diff(a, b):
    if a.shape != b.shape:
        return None
    if a.numel() == 0:
        return 0.0
    return (a.double() - b.double()).abs().max().item()


def check(task_id, harness, dirs, root, size, seed, work):
    out_dir = os.path.join(work, task_id)
    r = subprocess.run([harness, "tasks"] + dirs + ["--reference", task_id, "--size", size, "--seed", str(seed),
                        "--out", out_dir], capture_output=True, text=True)
    if r.returncode != 0:
        return {"verdict": "error", "why": "harness: " + (r.stderr.strip() or r.stdout.strip())[-300:]}
    meta = json.load(open(os.path.join(out_dir, "meta.json")))
    problem = os.path.join(root, meta["kernelbench"])
    if not os.path.isfile(problem):
        return {"verdict": "missing", "why": "no " + meta["kernelbench"] + " in the checkout"}
    v_inputs = [torch.from_numpy(np.load(os.path.join(out_dir, a["file"]))) for a in meta["inputs"]]
    v_output = torch.from_numpy(np.load(os.path.join(out_dir, meta["output"]["file"])))
    try:
        mod = load_problem(problem)
        for name, value in meta["kernelbench_globals"].items():
            if not hasattr(mod, name):
                return {"verdict": "error", "why": f"kernelbench.globals: {meta['kernelbench']} has no '{name}'"}
            setattr(mod, name, tuple(value) if isinstance(value, list) else value)
        with torch.no_grad():
            torch.manual_seed(42)
            init = mod.get_init_inputs()
            torch.manual_seed(42)
            model = mod.Model(*init)
            torch.manual_seed(seed)
            kb_inputs = mod.get_inputs()
            # A Python number in get_inputs() (L1_005's scalar) is a constant of vinci's graph:
            # KernelBench's module gets its own value there and vinci's tensors elsewhere.
            tensor_at = [i for i, x in enumerate(kb_inputs) if torch.is_tensor(x)]
            args = list(v_inputs)
            if len(tensor_at) < len(kb_inputs) and len(tensor_at) == len(v_inputs):
                args = list(kb_inputs)
                for j, i in enumerate(tensor_at):
                    args[i] = v_inputs[j]
                kb_inputs = [kb_inputs[i] for i in tensor_at]
            torch.manual_seed(seed)
            kb_output = model(*args)
    except Exception as e:  # the problem module's own error, reported per task
        return {"verdict": "error", "why": f"KernelBench module: {type(e).__name__}: {e}"[:300]}
    if isinstance(kb_output, (tuple, list)):
        kb_output = kb_output[0]
    row = {"inputs": "equal"}
    kb_inputs = [x if torch.is_tensor(x) else torch.tensor(x) for x in kb_inputs]
    if len(kb_inputs) != len(v_inputs):
        row["inputs"] = f"count {len(v_inputs)} vs {len(kb_inputs)}"
    else:
        for i, (a, b) in enumerate(zip(v_inputs, kb_inputs)):
            if tuple(a.shape) != tuple(b.shape):
                row["inputs"] = f"input {i} shape {list(a.shape)} vs {list(b.shape)}"
                break
            if not torch.equal(a.to(b.dtype), b):
                row["inputs"] = f"input {i} differs by {max_diff(a, b):.3g}"
                break
    kb_output = kb_output.detach().to(v_output.dtype) if kb_output.dtype != v_output.dtype else kb_output.detach()
    d = max_diff(v_output, kb_output)
    row["max_diff"] = d
    if d is None:
        row["verdict"] = "different"
        row["why"] = f"output shape {list(v_output.shape)} vs {list(kb_output.shape)}"
    elif torch.equal(v_output, kb_output) or (d == 0.0 and not torch.isnan(v_output).any()):
        row["verdict"] = "bit-identical"
    elif d <= WITHIN:
        row["verdict"] = "within 1e-5"
    else:
        row["verdict"] = "different"
        row["why"] = f"output differs by {d:.3g}"
    if row["inputs"] != "equal" and row["verdict"] != "different":
        row["verdict"] = "different"
        row["why"] = "inputs: " + row["inputs"]
    row["built"] = built_as_vinci(task_id, harness, dirs, problem, meta, size, seed, v_inputs, args, v_output,
                                  out_dir)
    if row["built"] != "ok" and row["verdict"] != "different":
        row["verdict"] = "different"
        row["why"] = row["built"]
    return row


def run_built(mod_path, cls_name, init, inputs, seed, globals_=None):
    mod = load_problem(mod_path)
    for name, value in (globals_ or {}).items():
        setattr(mod, name, tuple(value) if isinstance(value, list) else value)
    with torch.no_grad():
        torch.manual_seed(42)
        model = getattr(mod, cls_name)(*init)
        args = list(inputs)
        torch.manual_seed(seed)
        out = model(*args)
    return out[0] if isinstance(out, (tuple, list)) else out


def built_as_vinci(task_id, harness, dirs, problem, meta, size, seed, v_inputs, kb_args, v_output, out_dir):
    """Step 3: "ok", or what went wrong. kb_args: vinci's inputs as the problem's forward takes them."""
    r = subprocess.run([harness, "tasks"] + dirs + ["--pytorch", task_id, "--size", size], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return "rendering: " + (r.stderr.strip() or r.stdout.strip())[-300:]
    rendered = os.path.join(out_dir, "rendered_" + task_id + ".py")
    with open(rendered, "w") as f:
        f.write(r.stdout)
    try:
        ref = load_problem(rendered)
        torch.manual_seed(42)
        init = ref.get_init_inputs()
    except Exception as e:
        return f"rendering: get_init_inputs(): {type(e).__name__}: {e}"[:300]
    for who, path, globals_, inputs in (("rendering", rendered, None, v_inputs),
                                        ("problem's Model", problem, meta["kernelbench_globals"], kb_args)):
        try:
            out = run_built(path, "Model", init, inputs, seed, globals_)
        except Exception as e:
            return f"{who} built from the rendering's get_init_inputs(): {type(e).__name__}: {e}"[:300]
        out = out.detach().to(v_output.dtype)
        d = max_diff(v_output, out)
        if d is None:
            return f"{who} built from the rendering's get_init_inputs(): shape {list(out.shape)} vs {list(v_output.shape)}"
        if d > WITHIN or (torch.isnan(out).any() != torch.isnan(v_output).any()):
            return f"{who} built from the rendering's get_init_inputs(): output differs by {d:.3g}"
    return "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout (or its KernelBench/ folder)")
    ap.add_argument("--harness", default=os.path.join(REPO, "build", "bin", "harness"))
    ap.add_argument("--tasks-dir", default="", help="vinci task folder (default: the build's data/tasks)")
    ap.add_argument("--level", type=int, default=0, help="only tasks of this level")
    ap.add_argument("--ids", default="", help="comma-separated task ids (default: every KernelBench task)")
    ap.add_argument("--require", default="", help="comma-separated ids that must be checked and match")
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("--seed", type=int, default=0, help="the inputs' seed (torch.manual_seed)")
    ap.add_argument("--json", default="", help="also write the rows as JSON to this file")
    args = ap.parse_args()
    if args.level not in (0, 1, 2, 3):
        ap.error(f"--level: expected 1, 2 or 3, found {args.level}")
    if args.seed < 0:
        ap.error(f"--seed: expected a non-negative integer, found {args.seed}")
    if not os.access(args.harness, os.X_OK):
        ap.error(f"--harness: {args.harness} is not an executable (build vinci first: scripts/build.sh)")
    root = problem_root(args.kernelbench)
    dirs = ["--dir", args.tasks_dir] if args.tasks_dir else []
    tasks = list_tasks(args.harness, args.level, dirs)
    known = {t for t, _ in tasks}
    ids = [t for t in args.ids.split(",") if t] if args.ids else [t for t, s in tasks if s.startswith("kernelbench")]
    required = [t for t in args.require.split(",") if t]
    for t in ids + required:
        if t not in known:
            ap.error(f"no task '{t}' in the suite")
    ids = sorted(set(ids) | set(required))
    torch.set_num_threads(1)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="vinci-crosscheck-") as work:
        for t in ids:
            rows[t] = check(t, args.harness, dirs, root, args.size, args.seed, work)
    print(f"# vinci vs KernelBench at size {args.size}, input seed {args.seed}, torch {torch.__version__}")
    print(f"{'task':<8} {'verdict':<14} {'max |diff|':>11}  inputs / why")
    counts = {}
    for t in ids:
        r = rows[t]
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        d = r.get("max_diff")
        ds = "-" if d is None else f"{d:.3g}"
        print(f"{t:<8} {r['verdict']:<14} {ds:>11}  {r.get('why', r.get('inputs', ''))}")
    print("# " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(ids)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [t for t in ids if rows[t]["verdict"] in ("different", "error")]
    bad += [t for t in required if rows[t]["verdict"] == "missing"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
