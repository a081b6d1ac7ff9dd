#!/usr/bin/env python3
"""vinci's Triton compile step: one request on stdin, one answer on stdout (JSON both).

vinci compiles a plan's Triton kernels here and launches the cubin itself, through the driver API,
in the CUDA worker (gpu/live/live_eval.cc); Triton's own launcher and caches are never used. The harness
(gpu/compile/triton.cc) starts this script in a sandbox of its own (docs/live_evaluator.md, "Compile
sandbox"): an allowlisted environment, a fresh temporary folder as home, Triton's cache and working
folder (the only place it may write), no network, its own processes only, and limits on time, CPU,
memory, file size and processes. No GPU is needed: the target is given (GPUTarget("cuda", arch, 32)).

The module's own output goes to stderr: stdout carries the answer alone.

  request:  {"source": MODULE TEXT, "kernel": NAME, "signature": ["*fp32", "*i64", "i64", ...],
             "constexprs": {"BLOCK": 1024, "EPS": 1e-5, "FLAG": true}, "num_warps": 4,
             "num_stages": 3, "arch": 90}
  answer:   {"ok": true, "meta": {...launch metadata...}, "cubin": BASE64}
          | {"ok": false, "kind": "compile_error" | "bad_request" | "no_triton", "error": TEXT}

`--version` prints the installed Triton's version (from the package metadata, without importing
it) and exits; 1 with a message when Triton is not installed.

The signature lists the kernel's parameters that are not tl.constexpr, in order; pointers are
marked 16-byte divisible (vinci's buffers are 256-byte aligned), integers are not specialised (so
the cubin does not depend on the sizes passed). Constexprs not given take the function's defaults.
"""
import base64
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import traceback

# Compile options vinci fixes; recorded in every measurement of a Triton plan.
FIXED_OPTIONS = {"num_ctas": 1, "enable_fp_fusion": True, "debug": False}


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


def version():
    try:
        from importlib.metadata import version as v, PackageNotFoundError
        try:
            print(v("triton"))
            return 0
        except PackageNotFoundError:
            pass
    except Exception:  # noqa: BLE001
        pass
    print("triton is not installed for " + sys.executable + " (pip install triton)", file=sys.stderr)
    return 1


def short_error(e):
    """Triton's own message (with its source excerpt) for compile errors; the last frames otherwise."""
    text = str(e).strip()
    name = type(e).__name__
    if not text:
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return name + ": " + text


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--version":
        return version()
    try:
        req = json.loads(sys.stdin.read())
        source = req["source"]
        kernel = req["kernel"]
        signature = list(req["signature"])
        constexprs = dict(req.get("constexprs", {}))
        num_warps = int(req["num_warps"])
        num_stages = int(req["num_stages"])
        arch = int(req.get("arch", 90))
    except Exception as e:  # noqa: BLE001
        fail("bad_request", "the compile request is malformed: " + short_error(e))

    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except Exception as e:  # noqa: BLE001
        fail("no_triton", "Triton cannot be imported by " + sys.executable + ": " + short_error(e))

    divert_stdout()
    work = tempfile.mkdtemp(prefix="vinci_triton_")
    path = os.path.join(work, "vinci_kernel.py")
    with open(path, "w") as f:
        f.write(source)
    try:
        spec = importlib.util.spec_from_file_location("vinci_kernel", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["vinci_kernel"] = module
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        tb = traceback.extract_tb(e.__traceback__)
        where = ""
        for frame in tb:
            if frame.filename == path:
                where = "line %d of the module: " % frame.lineno
        if isinstance(e, SyntaxError) and e.lineno:
            where = "line %d of the module: " % e.lineno
        fail("compile_error", "the triton block does not load as a Python module: " + where + short_error(e))

    fn = getattr(module, kernel, None)
    # @triton.autotune and @triton.heuristics wrap the JIT function: vinci launches it with the
    # launch line's constexprs and options, so the wrapper's configs are not used.
    while fn is not None and not hasattr(fn, "params") and hasattr(fn, "fn"):
        fn = fn.fn
    if fn is None or not hasattr(fn, "params") or not hasattr(fn, "arg_names"):
        fail("compile_error", "the module defines no @triton.jit function '%s'" % kernel)

    sig = {}
    consts = {}
    given = list(signature)
    for p in fn.params:
        if p.is_constexpr:
            sig[p.name] = "constexpr"
            if p.name in constexprs:
                consts[p.name] = constexprs.pop(p.name)
            elif p.default is not inspect.Parameter.empty:
                consts[p.name] = p.default
            else:
                fail("compile_error", "%s: constexpr parameter '%s' has no value: pass %s=... in the launch"
                     % (kernel, p.name, p.name))
        else:
            if not given:
                fail("compile_error", "%s: parameter '%s' has no argument: the launch passes %d"
                     % (kernel, p.name, len(signature)))
            sig[p.name] = given.pop(0)
    if given:
        fail("compile_error", "%s takes %d arguments that are not tl.constexpr, the launch passes %d"
             % (kernel, len(signature) - len(given), len(signature)))
    if constexprs:
        fail("compile_error", "%s has no tl.constexpr parameter %s" % (kernel, ", ".join(sorted(constexprs))))

    attrs = {}
    for i, name in enumerate(fn.arg_names):
        if sig.get(name, "").startswith("*"):
            attrs[(i, )] = [["tt.divisibility", 16]]
    options = dict(FIXED_OPTIONS)
    options["num_warps"] = num_warps
    options["num_stages"] = num_stages
    try:
        from triton.compiler.errors import CompilationError
    except Exception:  # noqa: BLE001
        CompilationError = SyntaxError  # noqa: N806
    pointers = "divisible_by_16"
    try:
        src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except CompilationError as e:
        fail("compile_error", short_error(e))
    except Exception:  # noqa: BLE001
        # A Triton whose ASTSource takes attributes in another form: compile without the pointer
        # hints (slower vector access at worst), and say so in the recorded options.
        try:
            src = ASTSource(fn, sig, constexprs=consts)
            k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
            pointers = "unspecialised"
        except Exception as e:  # noqa: BLE001
            fail("compile_error", short_error(e))

    md = k.metadata
    get = (lambda n, d=None: getattr(md, n, d))
    meta = {
        "name": get("name"),
        "shared": int(get("shared", 0) or 0),
        "num_warps": int(get("num_warps", num_warps)),
        "num_stages": int(get("num_stages", num_stages)),
        "num_ctas": int(get("num_ctas", 1) or 1),
        "global_scratch_size": int(get("global_scratch_size", 0) or 0),
        "global_scratch_align": int(get("global_scratch_align", 1) or 1),
        "profile_scratch_size": int(get("profile_scratch_size", 0) or 0),
        "profile_scratch_align": int(get("profile_scratch_align", 1) or 1),
        "launch_cooperative_grid": bool(get("launch_cooperative_grid", False)),
        "launch_pdl": bool(get("launch_pdl", False)),
        "tmem_size": int(get("tmem_size", 0) or 0),
        "params": signature,
        "triton_version": triton.__version__,
        "options": "arch=sm_%d num_ctas=1 enable_fp_fusion=%s debug=false default_dot_input_precision=%s "
                   "pointers=%s integers=unspecialised" % (
                       arch, "true" if get("enable_fp_fusion", True) else "false",
                       get("default_dot_input_precision", "tf32"), pointers),
    }
    answer({"ok": True, "meta": meta, "cubin": base64.b64encode(k.asm["cubin"]).decode("ascii")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
