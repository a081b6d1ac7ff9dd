#!/usr/bin/env python3
"""vinci's import check of a KernelBench module: one request on stdin, one answer on stdout (JSON).

A KernelBench candidate is a Python module defining `class ModelNew(nn.Module)` (docs/kernelbench_format.md).
Importing it runs model-written Python (and, for a CUDA module, load_inline's compile), so the
harness (gpu/compile/module_check.cc) starts this script in the sandbox Triton compiles run in
(docs/live_evaluator.md, "Compile sandbox"): an allowlisted environment, a fresh temporary folder
as home and torch's extension folder (the only place it may write), no network, its own processes
only, and limits on time, CPU, memory, file size and processes.

It imports the module as KernelBench's evaluator does (written to a file of its own and imported
from there), checks that it defines ModelNew as an nn.Module, and builds it the way KernelBench
builds a candidate: torch.manual_seed(SEED); init = get_init_inputs(); torch.manual_seed(SEED);
ModelNew(*init), with get_init_inputs from the task's reference module (vinci's rendering of the
task, the module a model is shown). Nothing is run on a GPU here.

The module's own output goes to stderr: stdout carries the answer alone.

  request:  {"module": TEXT, "reference": TEXT, "backend": "cuda" | "triton" | "torch", "seed": 42}
            (without "module": only whether this python has what a module of that backend needs)
  answer:   {"ok": true, "torch": VERSION, "parameters": N, "buffers": N, "init_inputs": N}
          | {"ok": false, "kind": KIND, "error": TEXT}

KIND is the candidate's failure (import_error, no_model_new, construct_error) or the machine's
(no_torch, no_cuda, no_triton: the module needs what this python lacks; bad_request).
"""
import importlib.util
import json
import os
import sys
import traceback

# The answer's channel: the process's stdout, kept on a descriptor of its own before the module
# runs; fd 1 and sys.stdout then go to stderr, so a module that prints does not break the answer.
_answer_out = sys.stdout


def answer(obj):
    _answer_out.write(json.dumps(obj, sort_keys=True))
    _answer_out.flush()


def divert_stdout():
    global _answer_out
    _answer_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def fail(kind, error):
    answer({"ok": False, "kind": kind, "error": error})
    sys.exit(0)


def candidate_error(e, path):
    """The exception and the candidate's own frames (the last 4), which is what its author can fix."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    lines = ["  line %d: %s" % (f.lineno, (f.line or "").strip()) for f in frames[-4:]]
    head = "".join(traceback.format_exception_only(type(e), e)).strip()
    if len(head) > 4000:
        head = head[:4000] + " ..."
    return head + ("\n" + "\n".join(lines) if lines else "")


def main():
    divert_stdout()
    try:
        req = json.loads(sys.stdin.read())
        module, reference = req.get("module"), req.get("reference")
        backend, seed = req.get("backend", "torch"), int(req.get("seed", 42))
        if module is not None and (not isinstance(module, str) or not isinstance(reference, str)):
            raise TypeError("module and reference must be strings")
    except Exception as e:  # noqa: BLE001
        fail("bad_request", "the request is not what the harness sends: %s" % e)
    try:
        import torch
        import torch.nn as nn
    except Exception as e:  # noqa: BLE001
        fail("no_torch", "PyTorch is not installed for %s (%s): a KernelBench module needs it "
             "(set VINCI_MODULE_PYTHON to a python with torch)" % (sys.executable, type(e).__name__))
    if backend == "cuda" and torch.version.cuda is None:
        fail("no_cuda", "the module compiles CUDA through load_inline, and the torch %s of %s is built without "
             "CUDA: check it where torch has CUDA (set VINCI_MODULE_PYTHON)" % (torch.__version__, sys.executable))
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        fail("no_triton", "the module's kernels are Triton's, and Triton is not installed for %s "
             "(set VINCI_MODULE_PYTHON to a python with triton)" % sys.executable)

    if module is None:  # the machine's probe: no module, nothing of a candidate runs
        answer({"ok": True, "torch": torch.__version__})
        return

    ref = {"__name__": "vinci_reference"}
    try:
        exec(compile(reference, "reference.py", "exec"), ref)
        get_init_inputs = ref["get_init_inputs"]
    except Exception as e:  # noqa: BLE001
        fail("bad_request", "the task's reference module does not load: %s" % e)

    path = os.path.join(os.getcwd(), "candidate.py")
    with open(path, "w") as f:
        f.write(module)
    try:
        spec = importlib.util.spec_from_file_location("vinci_candidate", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["vinci_candidate"] = mod
        spec.loader.exec_module(mod)
    except BaseException as e:  # noqa: BLE001  (SystemExit and KeyboardInterrupt from the module too)
        fail("import_error", "importing the module failed: " + candidate_error(e, path))
    model_new = getattr(mod, "ModelNew", None)
    if not isinstance(model_new, type) or not issubclass(model_new, nn.Module):
        found = "nothing" if model_new is None else repr(type(model_new).__name__)
        fail("no_model_new", "the module defines no class ModelNew deriving from torch.nn.Module (ModelNew is %s)"
             % found)
    try:
        torch.manual_seed(seed)
        init = get_init_inputs()
        torch.manual_seed(seed)
        m = model_new(*init)
    except BaseException as e:  # noqa: BLE001
        fail("construct_error", "ModelNew(*get_init_inputs()) failed: " + candidate_error(e, path))
    if not isinstance(m, nn.Module):
        fail("construct_error", "ModelNew(*get_init_inputs()) is not an nn.Module")
    answer({"ok": True, "torch": torch.__version__, "init_inputs": len(init),
            "parameters": sum(p.numel() for p in m.parameters()),
            "buffers": sum(b.numel() for b in m.buffers())})


if __name__ == "__main__":
    main()
