#!/usr/bin/env python3
"""KernelBench's own evaluator and vinci's on the same module files, on one GPU, side by side.

For each KernelBench module (a .py defining ModelNew; its vinci task named by a line
`# vinci-task: ID`, default L1_019) this runs

  - KernelBench's `eval_kernel_against_ref` from the user's checkout (src/kernelbench/eval.py), in a
    process of its own per module, on the task's KernelBench problem file at the sizes vinci
    evaluates (`harness tasks --reference ID --size SIZE` names the file and its size constants),
    with measure_performance and its excessive-speedup check;
  - `harness eval ID --plan FILE --device cuda --size SIZE`.

KernelBench's own example answers (model_new_ex_*.py of its prompts folder) are evaluated against
the problem file beside them (model_ex_*.py) and, in vinci, the tasks of
tests/gpu/kernelbench_modules/examples. With --again both sides evaluate each module a second time
from their builds (load_inline's extension folder; vinci's --module-cache).

It prints one row per module: each side's verdict, speedup and medians (KernelBench reports means),
vinci's time coverage and flags, and each side's wall-clock seconds. Where the verdicts differ
the row says why as far as the records tell (vinci's rejection, KernelBench's error).
docs/kernelbench_format.md, "Beside KernelBench's evaluator", explains the differences.

  python3 scripts/kernelbench_sidebyside.py --kernelbench ~/KernelBench --harness build-gpu/bin/harness \\
      [--size full] [--perf-trials 100] [--correct-trials 5] [--again] [--out FILE.md] MODULE.py ...

KernelBench's evaluator imports packages it never calls while evaluating (dotenv, tqdm, openai,
litellm; pydantic and requests); --stand-ins gives it empty stand-ins for those that are missing
(the GPU machine has torch and little else). Exit status: 0 when both ran for every module.
"""
import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time

STAND_INS = r'''
import sys, types
def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m
for name in ("dotenv", "tqdm", "openai", "litellm", "pydantic", "requests"):
    try:
        __import__(name)
        continue
    except Exception:
        pass
    if name == "dotenv":
        _module(name, load_dotenv=lambda *a, **k: None)
    elif name == "tqdm":
        _module(name, tqdm=lambda x=None, *a, **k: x)
    elif name == "openai":
        _module(name, OpenAI=object)
    elif name == "litellm":
        _module(name, completion=None)
    elif name == "requests":
        _module(name)
    elif name == "pydantic":
        class BaseModel:
            def __init__(self, **kw):
                for k, v in type(self).__dict__.items():
                    if not k.startswith("_") and not callable(v):
                        setattr(self, k, type(v)() if isinstance(v, (dict, list)) else v)
                for k, v in kw.items():
                    setattr(self, k, v)
        _module(name, BaseModel=BaseModel)
'''

# One KernelBench evaluation, in a process of its own: argv[1] the JSON request, the answer on the
# last line of stdout.
KB_ONE = r'''
import json, sys, time
req = json.loads(sys.argv[1])
if req["stand_ins"]:
    exec(STAND_INS)
sys.path.insert(0, req["src"])
import torch
from kernelbench.eval import eval_kernel_against_ref
t0 = time.time()
try:
    r = eval_kernel_against_ref(req["reference"], req["module"], seed_num=42,
                                num_correct_trials=req["correct_trials"], num_perf_trials=req["perf_trials"],
                                measure_performance=True, timing_method="cuda_event", device=0,
                                backend=req["backend"], check_for_excessive_speedup=True)
    out = {"compiled": bool(getattr(r, "compiled", False)), "correct": bool(getattr(r, "correctness", False)),
           "runtime_ms": getattr(r, "runtime", -1), "ref_runtime_ms": getattr(r, "ref_runtime", -1),
           "metadata": {k: str(v)[:300] for k, v in (getattr(r, "metadata", {}) or {}).items()}}
except Exception as e:
    out = {"compiled": False, "correct": False, "error": "%s: %s" % (type(e).__name__, str(e)[:300])}
out["wall_s"] = time.time() - t0
print()
print(json.dumps(out))
'''


EXAMPLE_TASKS = {"model_new_ex_add.py": "KB_ADD", "model_new_ex_add_triton.py": "KB_ADD",
                 "model_new_ex_fuse_gelu.py": "KB_FUSE_GELU", "model_new_ex_tiled_matmul.py": "KB_TILED_MATMUL",
                 "model_new_ex_flash_attn.py": "KB_FLASH_ATTN", "model_new_ex_mnist2.py": "KB_MNIST2"}
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "kernelbench_modules",
                        "examples")


def task_of(path):
    """The module's vinci task, and the --tasks folder it is in (None: vinci's own tasks)."""
    for line in open(path):
        if line.startswith("# vinci-task:"):
            return line.split(":", 1)[1].strip(), None
    base = os.path.basename(path)
    if base in EXAMPLE_TASKS:  # KernelBench's own example answers: their problems are model_ex_*.py
        return EXAMPLE_TASKS[base], EXAMPLES
    return "L1_019", None


def example_problem(path):
    """KernelBench's problem file beside one of its example answers."""
    base = os.path.basename(path).replace("model_new_ex_", "model_ex_").replace("_triton.py", ".py")
    return os.path.join(os.path.dirname(path), base)


def backend_of(text):
    if "load_inline" in text:
        return "cuda"
    if "triton" in text:
        return "triton"
    return "cuda"


def reference_source(harness, task, tasks, size, kb_root, work, module_path):
    if tasks:  # KernelBench's example problem, whose sizes are the only ones its answer handles
        return open(example_problem(module_path)).read()
    out = os.path.join(work, task)
    r = subprocess.run([harness, "tasks", "--reference", task, "--size", size, "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("kernelbench_sidebyside: harness tasks --reference %s: %s" % (task, r.stderr.strip()[-300:]))
    meta = json.load(open(os.path.join(out, "meta.json")))
    path = os.path.join(kb_root, meta["kernelbench"])
    src = open(path).read()
    sizes = "".join("%s = %r\n" % (k, tuple(v) if isinstance(v, list) else v)
                    for k, v in meta.get("kernelbench_globals", {}).items())
    return src + "\n\n# the sizes vinci evaluates at\n" + sizes


def kernelbench_eval(args, module, reference, backend, extensions, name):
    req = {"src": os.path.join(args.kernelbench, "src"), "module": module, "reference": reference,
           "backend": backend, "correct_trials": args.correct_trials, "perf_trials": args.perf_trials,
           "stand_ins": args.stand_ins}
    t0 = time.time()
    # load_inline builds into TORCH_EXTENSIONS_DIR: a fresh folder per module (a cold build), the
    # same one again with --again (load_inline finds its build there).
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=extensions)
    r = subprocess.run([sys.executable, "-c", "STAND_INS = %r\n" % STAND_INS + KB_ONE, json.dumps(req)],
                       capture_output=True, text=True, timeout=args.timeout, env=env)
    wall = time.time() - t0
    keep(args, name, "kb.out", r.stdout)
    keep(args, name, "kb.err", r.stderr)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:
        out = {"compiled": False, "correct": False,
               "error": "KernelBench's evaluation ended without an answer (exit %d): %s"
                        % (r.returncode, (r.stderr.strip() or r.stdout.strip())[-300:])}
    out["process_s"] = wall
    return out


def keep(args, name, what, text):
    """With --keep DIR: the side's whole output, for reading later."""
    if args.keep:
        with open(os.path.join(args.keep, name.replace("/", "_") + "." + what), "w") as f:
            f.write(text)


def vinci_eval(args, path, task, tasks, name):
    cmd = [args.harness, "eval", task, "--plan", path, "--device", "cuda", "--size", args.size] + args.vinci_arg
    if tasks:
        cmd += ["--tasks", tasks]
    if args.module_cache:
        cmd += ["--module-cache", args.module_cache]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.time() - t0
    keep(args, name, "vinci.out", r.stdout)
    keep(args, name, "vinci.err", r.stderr)
    try:
        rec = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:
        return {"error": (r.stderr.strip() or r.stdout.strip())[-300:], "wall_s": wall}
    rec["wall_s"] = wall
    return rec


def row(name, task, kb, v, again):
    if kb.get("correct"):
        kb_speed = kb["ref_runtime_ms"] / kb["runtime_ms"] if kb.get("runtime_ms", -1) > 0 else float("nan")
        kb_text = "correct | %.3g | %.1f / %.1f" % (kb_speed, kb["runtime_ms"] * 1000, kb["ref_runtime_ms"] * 1000)
        if kb.get("metadata", {}).get("excessive_speedup"):
            kb_text += " (excessive speedup)"
    else:
        why = kb.get("error") or "; ".join("%s: %s" % (k, v2) for k, v2 in kb.get("metadata", {}).items()
                                           if k not in ("hardware", "device"))
        why = " ".join(why.split())  # one line: a traceback's last words say the most
        md = kb.get("metadata", {})
        if md.get("correctness_issue") and md.get("max_difference"):
            # An output mismatch: the trials passed and the largest difference over them.
            try:
                diffs = [float(x) for x in ast.literal_eval(md["max_difference"])]
                why = "%s, %s trials, max difference %.3g" % (md["correctness_issue"],
                                                              md.get("correctness_trials", "?"), max(diffs))
            except (ValueError, SyntaxError, TypeError):
                pass
        kb_text = "%s | | %s" % ("wrong" if kb.get("compiled") else "failed", why[-160:].replace("|", "/"))
    if "flags" not in v:
        v_text = "no record | | | | %s" % " ".join(v.get("error", "").split())[-160:].replace("|", "/")
    else:
        flags = [f for f in v["flags"] if not f.startswith("static:")]
        rejected = [f[len("rejected: "):] for f in flags if f.startswith("rejected: ")]
        verdict = "correct" if v.get("correct") else "rejected: " + (rejected[0] if rejected else "?")
        other = "; ".join(f[:80] for f in flags if not f.startswith("rejected: "))
        if not v.get("correct"):
            other = (v.get("error", "")[:120] + ("; " + other if other else "")).replace("|", "/")
        v_text = "%s | %.3g | %.1f / %.1f | %.2f | %s" % (
            verdict, v.get("speedup") or 0, v.get("kernelUs") or 0, v.get("referenceUs") or 0,
            v.get("timeCoverage") or 0, other.replace("\n", " "))
    text = "| %s | %s | %s | %s | %.1f / %.1f |" % (name, task, kb_text, v_text, kb.get("process_s", 0),
                                                    v.get("wall_s", 0))
    if again:
        text += " %.1f / %.1f |" % (again[0].get("process_s", 0), again[1].get("wall_s", 0))
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout")
    ap.add_argument("--harness", default="build-gpu/bin/harness")
    ap.add_argument("--size", default="full", choices=["full", "small"])
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--correct-trials", type=int, default=5)
    ap.add_argument("--module-cache", default="", help="vinci's build cache (harness eval --module-cache)")
    ap.add_argument("--stand-ins", action="store_true", help="stand-ins for KernelBench's unused imports")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="", help="also write the table here")
    ap.add_argument("--keep", default="", help="a folder to keep each side's output in (NAME.kb.out, NAME.vinci.err, ...)")
    ap.add_argument("--vinci-arg", action="append", default=[],
                    help="one more argument of each `harness eval` (e.g. --vinci-arg=--profile-phases)")
    ap.add_argument("--again", action="store_true",
                    help="evaluate each module a second time on both sides, from each side's build (KernelBench: the "
                         "same extension folder; vinci: the same --module-cache)")
    ap.add_argument("modules", nargs="+")
    args = ap.parse_args()
    args.kernelbench = os.path.abspath(os.path.expanduser(args.kernelbench))
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    kb_root = os.path.join(args.kernelbench, "KernelBench")
    if not os.path.isdir(os.path.join(args.kernelbench, "src", "kernelbench")) or not os.path.isdir(kb_root):
        sys.exit("kernelbench_sidebyside: --kernelbench %s: expected a checkout holding src/kernelbench and "
                 "KernelBench/level1" % args.kernelbench)
    lines = ["| module | task | KernelBench | speedup | us (module / ref, means) | vinci | speedup | "
             "us (module / ref, medians) | coverage | vinci flags | wall s (KB / vinci) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    if args.again:
        lines[0] += " again: wall s (KB / vinci) |"
        lines[1] += "---|"
    ok = True
    with tempfile.TemporaryDirectory() as work:
        if args.again and not args.module_cache:
            args.module_cache = os.path.join(work, "vinci_module_cache")
            os.makedirs(args.module_cache)
        for path in args.modules:
            name = os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path)[:-3]
            task, tasks = task_of(path)
            module = open(path).read()
            reference = reference_source(args.harness, task, tasks, args.size, kb_root, work, path)
            extensions = tempfile.mkdtemp(dir=work)
            kb = kernelbench_eval(args, module, reference, backend_of(module), extensions, name)
            v = vinci_eval(args, path, task, tasks, name)
            ok = ok and "flags" in v and "error" not in kb
            again = None
            if args.again:
                again = (kernelbench_eval(args, module, reference, backend_of(module), extensions, name + ".again"),
                         vinci_eval(args, path, task, tasks, name + ".again"))
            lines.append(row(name, task, kb, v, again))
            print(lines[-1], flush=True)
    table = "\n".join(lines)
    print()
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
