#!/usr/bin/env python3
"""Where a CUDA module's cold load_inline build spends its time, and what a precompiled header buys.

For each module file (a KernelBench module that calls torch.utils.cpp_extension.load_inline) this
imports the module in a fresh process with a fresh TORCH_EXTENSIONS_DIR, outside any sandbox, the
way KernelBench's evaluator builds it, and prints the import's wall-clock seconds and each ninja
step's (main.cpp, cuda.cu, the link) from the build folder's .ninja_log. Variants:

  cold      a fresh extension folder (what vinci's build cache misses cost)
  again     the same folder again (load_inline finds its build: what KernelBench's reuse costs)
  pch       a fresh folder, load_inline(use_pch=True) where this torch has it: the C++ side's
            torch/extension.h from a precompiled header (the first such build also makes the header)

  python3 scripts/module_compile_probe.py [--variants cold,again,pch] MODULE.py ...

Prints one JSON line per build and a table at the end.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

IMPORT_ONE = r'''
import importlib.util, inspect, json, sys, time
req = json.loads(sys.argv[1])
import torch
import torch.utils.cpp_extension as ce
has_pch = "use_pch" in inspect.signature(ce.load_inline).parameters
if req["pch"]:
    if not has_pch:
        print(); print(json.dumps({"error": "this torch's load_inline has no use_pch"})); sys.exit(0)
    original = ce.load_inline
    def with_pch(*a, **k):
        k["use_pch"] = True
        return original(*a, **k)
    ce.load_inline = with_pch
t0 = time.time()
spec = importlib.util.spec_from_file_location("probe_module", req["module"])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
print(); print(json.dumps({"import_s": time.time() - t0, "torch": torch.__version__, "has_pch": has_pch}))
'''


def ninja_steps(folder):
    """{target: seconds} from every .ninja_log under folder (the last entry of each target)."""
    steps = {}
    for root, _, files in os.walk(folder):
        if ".ninja_log" in files:
            for line in open(os.path.join(root, ".ninja_log")):
                if line.startswith("#"):
                    continue
                parts = line.split("\t")
                if len(parts) >= 4:
                    steps[os.path.basename(parts[3])] = (int(parts[1]) - int(parts[0])) / 1000.0
    return steps


def build(module, folder, pch):
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=folder)
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", IMPORT_ONE, json.dumps({"module": module, "pch": pch})],
                       capture_output=True, text=True, env=env)
    wall = time.time() - t0
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:
        out = {"error": (r.stderr.strip() or r.stdout.strip())[-400:]}
    out["process_s"] = wall
    out["steps"] = ninja_steps(folder)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="cold,again,pch")
    ap.add_argument("modules", nargs="+")
    args = ap.parse_args()
    variants = args.variants.split(",")
    rows = []
    for path in args.modules:
        path = os.path.abspath(path)
        with tempfile.TemporaryDirectory() as work:
            folder = os.path.join(work, "ext")
            for v in variants:
                if v == "again":
                    out = build(path, folder, False)
                else:
                    folder = os.path.join(work, "ext_" + v)
                    out = build(path, folder, v == "pch")
                out.update(module=os.path.basename(path), variant=v)
                print(json.dumps(out), flush=True)
                rows.append(out)
    print()
    print("| module | variant | process s | import s | ninja steps (s) |")
    print("|---|---|---|---|---|")
    for r in rows:
        steps = ", ".join("%s %.1f" % (k, v) for k, v in sorted(r["steps"].items()))
        imp = "%.1f" % r["import_s"] if "import_s" in r else r.get("error", "?")[:120].replace("|", "/")
        print("| %s | %s | %.1f | %s | %s |" % (r["module"], r["variant"], r["process_s"], imp, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
