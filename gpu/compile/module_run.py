#!/usr/bin/env python3
"""vinci's runner of a KernelBench module: the one process where a candidate's Python runs on the GPU.

The evaluator's worker (gpu/compile/module_runner.cc, driven by gpu/live/live_eval.cc) starts this
script in the module sandbox with the GPU's device nodes (docs/kernelbench_format.md, "Live
evaluation") and talks to it over a Unix socket in the sandbox's folder. The worker keeps the
reference, the inputs' originals and every verdict; this process only builds ModelNew, runs it on
the inputs it is sent, returns its outputs and times it. Nothing here decides whether a module is
right: a module that tampers with this process can only spoil its own answers.

Messages, both ways: a 4-byte little-endian length and a JSON header of that many bytes. A tensor's
bytes do not cross the socket: "run" comes with two file descriptors beside its length (SCM_RIGHTS),
the worker's sealed memfds of the inputs ("input_region" bytes; each tensor of "tensors",
{"dtype", "shape", "bytes", "offset"}, at its offset) and of the output ("output_region" bytes),
and the answer's output is written at the start of the latter ("in_region": true; an output larger
than the region is only described, and the worker refuses it).

  worker -> runner                                      runner -> worker
  {"cmd": "load", module, reference, backend,           {"ready": true, torch, device, threads} before the
   seed, device}                                         module runs, then {"ok": true, ...} or a failure
  {"cmd": "run", "slot": K, "reuse": B, tensors,        {"ok": true, "ms", "threads", "slots",
   input_region, output_region} + 2 fds                  tensors: [output], "in_region"}
  {"cmd": "time", "slot": K, "samples": N,              {"ok": true, "device_us", "stream_us", "host_us",
   "warmups": W, "flush_bytes": F}                       "overhead_us", "threads"}
  (each timed sample reads new U[0, 1) draws in slot K's float inputs, from the runner's own
   generator seeded with the load request's "timing_seed")
  {"cmd": "profile", "slot": K}                         {"ok": true, "kernels": [[name, us, count], ...]}

A failure is {"ok": false, "kind": KIND, "error": TEXT}: the machine's (no_torch, no_cuda,
no_triton, bad_request: only before "ready") or the candidate's (import_error, no_model_new,
construct_error, runtime_error, out_of_memory, wrong_type, writes_input, output_aliases_input).
"run" keeps its inputs in slot K; "reuse" writes new data into slot K's tensors (the same
addresses) instead of new ones. The runner exits when the worker closes the socket.
"""
import ctypes
import importlib.util
import json
import mmap
import os
import socket
import struct
import sys
import time
import traceback
import warnings

_perf_ns = time.perf_counter_ns  # the runner's own references, taken before any module runs
_uniform = None
_sock = None

DTYPES = {}  # name -> torch dtype, filled once torch is imported


def send(header):
    body = json.dumps(header, sort_keys=True).encode()
    _sock.sendall(struct.pack("<I", len(body)) + body)


def recv_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = _sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k
    return buf


def receive():
    """The next message: (header, the file descriptors sent beside it); None at the end."""
    try:
        head, fds = b"", []
        while len(head) < 4:
            data, got, _, _ = socket.recv_fds(_sock, 4 - len(head), 4)
            fds += got
            if not data:
                raise EOFError
            head += data
        (n,) = struct.unpack("<I", head)
        header = json.loads(recv_exact(n).decode())
    except EOFError:
        return None, []
    return header, fds


_maps = {}  # role -> (the memfd's (st_dev, st_ino), its mapping): a region sent again is not mapped again


PIN_REGIONS = False  # the load request's "pin_regions": page-lock the mappings (a GPU worker)


def pin(region, size, writable):
    """Page-locks a mapping for the device's copies (cudaHostRegister); its address, or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.frombuffer warns about a read-only buffer
            ptr = torch.frombuffer(region, dtype=torch.uint8, count=1).data_ptr()
        # cudaHostRegisterReadOnly (8) for the inputs' mapping, which is not writable here.
        rc = torch.cuda.cudart().cudaHostRegister(ptr, size, 0 if writable else 8)
        return ptr if int(getattr(rc, "value", rc)) == 0 else None
    except Exception:  # noqa: BLE001 - unpinned is slower, not wrong
        return None


def unpin(ptr):
    if ptr is not None:
        try:
            torch.cuda.cudart().cudaHostUnregister(ptr)
        except Exception:  # noqa: BLE001
            pass


def mapped(role, fd, size, writable):
    """The memfd fd mapped (size bytes, read-only unless writable), fd closed."""
    try:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, size)
        if role in _maps and _maps[role][0] == key:
            return _maps[role][1]
        old = _maps.pop(role, None)
        if old is not None:
            unpin(old[2])
        # The inputs' pages exist (the worker wrote them) and are mapped at once; the output's
        # region is twice the reference's output, mapped page by page as the output is written
        # (unless it is pinned, which touches every page once).
        flags = mmap.MAP_SHARED | (0 if writable else getattr(mmap, "MAP_POPULATE", 0))
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        region = mmap.mmap(fd, size, flags=flags, prot=prot)
        _maps[role] = (key, region, pin(region, size, writable) if PIN_REGIONS else None)
        return region
    finally:
        os.close(fd)


def region_tensors(header, region):
    """The inputs: CPU tensors over the inputs' region (views: copy them before the next command)."""
    tensors = []
    for meta in header.get("tensors", []):
        dtype = DTYPES[meta["dtype"]]
        shape = [int(d) for d in meta["shape"]]
        count = int(meta["bytes"]) // (torch.tensor([], dtype=dtype).element_size())
        if count == 0:
            tensors.append(torch.empty(shape, dtype=dtype))
        else:
            tensors.append(torch.frombuffer(region, dtype=dtype, count=count,
                                            offset=int(meta["offset"])).reshape(shape))
    return tensors


# Inputs up to this many bytes in all keep a pristine copy on the device, to see whether the module
# wrote them; larger ones are compared with the inputs' region instead, a chunk at a time, so that
# the runner does not hold each of the largest tasks' inputs (7 GiB and more) twice per slot. The
# load request's "pristine_on_device_bytes" sets it (ModuleRunOptions).
PRISTINE_ON_DEVICE_BYTES = 1 << 30
COMPARE_CHUNK_BYTES = 256 << 20


def tensor_bytes(t):
    return t.numel() * t.element_size()


def equal_to_host(x, host):
    """Whether device tensor x holds exactly host's values (same NaN rules as torch.equal)."""
    a, b = x.reshape(-1), host.reshape(-1)
    step = max(1, COMPARE_CHUNK_BYTES // max(1, x.element_size()))
    for i in range(0, a.numel(), step):
        if not torch.equal(a[i:i + step], b[i:i + step].to(a.device)):
            return False
    return True


def dtype_name(d):
    for k, v in DTYPES.items():
        if v == d:
            return k
    return str(d)


def fail(kind, error):
    send({"ok": False, "kind": kind, "error": error})
    sys.exit(0)


def candidate_error(e, path):
    """The exception and the candidate's own frames (the last 4), which is what its author can fix."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    lines = ["  line %d: %s" % (f.lineno, (f.line or "").strip()) for f in frames[-4:]]
    head = "".join(traceback.format_exception_only(type(e), e)).strip()
    if len(head) > 4000:
        head = head[:4000] + " ..."
    return head + ("\n" + "\n".join(lines) if lines else "")


class Driver:
    """The CUDA driver API through ctypes, bound before the module runs: the timing does not go
    through torch's Python objects, which a module can patch."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        self.sync_ctx = lib.cuCtxSynchronize
        self.event_create = lib.cuEventCreate
        self.event_record = lib.cuEventRecord
        self.event_sync = lib.cuEventSynchronize
        # CUDA 13 names it cuEventElapsedTime_v2; the older name stays exported.
        self.elapsed = getattr(lib, "cuEventElapsedTime_v2", None) or lib.cuEventElapsedTime
        self.memset = lib.cuMemsetD32Async
        self.event_record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.event_sync.argtypes = [ctypes.c_void_p]
        self.elapsed.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        self.memset.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]

    def check(self, r, what):
        if r != 0:
            raise RuntimeError("CUDA driver error %d in %s" % (r, what))

    def event(self):
        e = ctypes.c_void_p()
        self.check(self.event_create(ctypes.byref(e), 0), "cuEventCreate")
        return e

    def ms(self, a, b):
        out = ctypes.c_float()
        self.check(self.elapsed(ctypes.byref(out), a, b), "cuEventElapsedTime")
        return out.value


def span(t):
    """[first, last) byte addresses of the storage behind tensor t."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def threads_now():
    """The process's threads, by name (/proc/self/task): native threads a module starts count too."""
    names = []
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open("/proc/self/task/%s/comm" % tid) as f:
                    names.append(f.read().strip())
            except OSError:
                pass
    except OSError:
        pass
    return sorted(names)


def main():
    global _sock, torch, PRISTINE_ON_DEVICE_BYTES, PIN_REGIONS
    _sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _sock.connect(sys.argv[1])
    # The module's prints go to stderr; stdout is not the answer's channel here, but is kept quiet.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        (n,) = struct.unpack("<I", recv_exact(4))
        req = json.loads(recv_exact(n).decode())
        module, reference = req["module"], req["reference"]
        backend, seed, device = req.get("backend", "torch"), int(req.get("seed", 42)), req.get("device", "cuda")
        if not isinstance(module, str) or not isinstance(reference, str) or device not in ("cuda", "cpu"):
            raise TypeError("module and reference must be strings, device cuda or cpu")
        PRISTINE_ON_DEVICE_BYTES = int(req.get("pristine_on_device_bytes", PRISTINE_ON_DEVICE_BYTES))
        PIN_REGIONS = bool(req.get("pin_regions", False)) and device == "cuda"
    except Exception as e:  # noqa: BLE001
        fail("bad_request", "the request is not what the harness sends: %s" % e)
    try:
        import torch
        import torch.nn as nn
    except Exception as e:  # noqa: BLE001
        fail("no_torch", "PyTorch is not installed for %s (%s): a KernelBench module needs it "
             "(set VINCI_MODULE_PYTHON to a python with torch)" % (sys.executable, type(e).__name__))
    # The inputs' region is mapped read-only: torch.frombuffer warns about that, and the views are
    # only ever copied from.
    warnings.filterwarnings("ignore", message="The given buffer is not writable")
    for name in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        DTYPES[name] = getattr(torch, name)
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        fail("no_triton", "the module's kernels are Triton's, and Triton is not installed for %s "
             "(set VINCI_MODULE_PYTHON to a python with triton)" % sys.executable)
    driver = None
    # What PyTorch starts on first use (thread pools; on the GPU cuBLAS and cuDNN handles and
    # their threads) is started now, so that the census below counts only what the module starts.
    a = torch.randn(64, 64)
    (a @ a).sum().item()
    torch.nn.functional.conv2d(a.view(1, 1, 64, 64), a[:3, :3].reshape(1, 1, 3, 3)).sum().item()
    if device == "cuda":
        if not torch.cuda.is_available():
            fail("no_cuda", "torch %s of %s sees no CUDA device here" % (torch.__version__, sys.executable))
        torch.cuda.init()
        a = torch.randn(64, 64, device="cuda")
        (a @ a).sum().item()
        torch.nn.functional.conv2d(a.view(1, 1, 64, 64), a[:3, :3].reshape(1, 1, 3, 3)).sum().item()
        torch.cuda.synchronize()
        try:
            driver = Driver()
        except Exception as e:  # noqa: BLE001
            fail("no_cuda", "the CUDA driver library cannot be used from Python: %s" % e)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(req.get("timing_seed", 0)))
    global _uniform
    _uniform = torch.Tensor.uniform_
    baseline = threads_now()
    send({"ready": True, "torch": torch.__version__, "device": device,
          "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu", "threads": len(baseline)})

    # From here on the module's code runs: every failure is the candidate's.
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
    except BaseException as e:  # noqa: BLE001
        fail("import_error", "importing the module failed: " + candidate_error(e, path))
    model_new = getattr(mod, "ModelNew", None)
    if not isinstance(model_new, type) or not issubclass(model_new, nn.Module):
        found = "nothing" if model_new is None else repr(type(model_new).__name__)
        fail("no_model_new", "the module defines no class ModelNew deriving from torch.nn.Module (ModelNew is %s)"
             % found)
    try:
        # As KernelBench builds a candidate: on the CPU under the seed, then moved to the device.
        torch.manual_seed(seed)
        init = get_init_inputs()
        torch.manual_seed(seed)
        model = model_new(*init)
        if not isinstance(model, nn.Module):
            raise TypeError("ModelNew(*get_init_inputs()) is not an nn.Module")
        model = model.to(device)
    except BaseException as e:  # noqa: BLE001
        fail("construct_error", "ModelNew(*get_init_inputs()) failed: " + candidate_error(e, path))
    send({"ok": True, "parameters": sum(p.numel() for p in model.parameters()),
          "threads": len(threads_now())})

    slots = {}      # slot -> (inputs on the device, their pristine copies)
    flush = None
    no_grad = torch.no_grad

    def sync():
        if driver is not None:
            driver.check(driver.sync_ctx(), "cuCtxSynchronize")

    def forward(inputs):
        with no_grad():
            return model(*inputs)

    def extra_threads():
        now = threads_now()
        extra = list(now)
        for name in baseline:
            if name in extra:
                extra.remove(name)
        return extra

    while True:
        header, fds = receive()
        if header is None:
            return
        cmd = header.get("cmd")
        slot = int(header.get("slot", 0))
        if cmd != "run" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if cmd == "run":
                fail("bad_request", "a run came with %d file descriptors, not 2" % len(fds))
        try:
            if cmd == "run":
                in_map = mapped("inputs", fds[0], int(header["input_region"]), writable=False)
                out_map = mapped("output", fds[1], int(header["output_region"]), writable=True)
                tensors = region_tensors(header, in_map)
                if header.get("reuse") and slot in slots:
                    inputs, pristine = slots[slot]
                    for x, t in zip(inputs, tensors):
                        x.copy_(t)
                    for p, t in zip(pristine or [], tensors):
                        p.copy_(t)
                else:
                    # A fresh slot: every other one but slot 0 (trial 0's, whose addresses later
                    # trials reuse) is dropped first, so the runner holds two sets of inputs at
                    # most, and their copies only where they are small.
                    for key in [k for k in slots if k not in (0,)]:
                        del slots[key]
                    inputs = [t.to(device, copy=True) for t in tensors]
                    small = sum(tensor_bytes(x) for x in inputs) <= PRISTINE_ON_DEVICE_BYTES
                    pristine = [x.clone() for x in inputs] if small else None
                    slots[slot] = (inputs, pristine)
                sync()
                t0 = _perf_ns()
                out = forward(inputs)
                sync()
                ms = (_perf_ns() - t0) / 1e6
                if not isinstance(out, torch.Tensor):
                    fail("wrong_type", "forward returned %s, not a tensor" % type(out).__name__)
                for i, x in enumerate(inputs):
                    # Against the copy on the device, or the region the inputs came from (the
                    # worker's, mapped read-only here): the bytes this run was sent.
                    same = torch.equal(x, pristine[i]) if pristine is not None else equal_to_host(x, tensors[i])
                    if not same:
                        fail("writes_input", "the module modified its input %d" % i)
                del tensors
                for i, x in enumerate(inputs):
                    (a0, a1), (b0, b1) = span(out), span(x)
                    if out.numel() and x.numel() and a0 < b1 and b0 < a1:
                        fail("output_aliases_input", "the output shares memory with input %d" % i)
                # The output's bytes go straight from the device into the worker's memory.
                out = out.detach()
                meta = {"dtype": dtype_name(out.dtype), "shape": list(out.shape),
                        "bytes": out.numel() * out.element_size()}
                in_region = meta["bytes"] <= len(out_map)
                if in_region and out.numel():
                    dst = torch.frombuffer(out_map, dtype=out.dtype, count=out.numel())
                    dst.copy_(out.reshape(-1))
                    del dst
                del out, in_map, out_map
                send({"ok": True, "ms": ms, "threads": extra_threads(), "slots": len(slots),
                      "tensors": [meta], "in_region": in_region})
            elif cmd == "time":
                inputs = slots[slot][0]
                samples, warmups = int(header["samples"]), int(header.get("warmups", 3))
                if driver is not None and flush is None and int(header.get("flush_bytes", 0)) > 0:
                    flush = torch.empty(int(header["flush_bytes"]) // 4, dtype=torch.int32, device=device)
                # Every timed sample reads inputs drawn for it alone (U[0, 1), as KernelBench draws
                # them), from a generator of the runner's own and through a method taken before the
                # module ran: no output kept from an earlier sample, by address or by content, is
                # the right one. Integer inputs (indices) keep their values.
                fresh = [x for x in inputs if x.is_floating_point()]
                for _ in range(warmups):
                    forward(inputs)
                sync()
                dev, stream, host, over = [], [], [], []
                if driver is not None:
                    start, mid, end = driver.event(), driver.event(), driver.event()

                def handshake(work):
                    """The worker's clock brackets work: 'r' (ready), the worker's 'g', work, 'd'."""
                    _sock.sendall(b"r")
                    if recv_exact(1) != b"g":
                        raise EOFError
                    work()
                    _sock.sendall(b"d")

                for _ in range(int(header.get("pings", 0))):  # the bracket's own cost, for the worker
                    sync()
                    handshake(sync)
                for s in range(samples):
                    for x in fresh:
                        _uniform(x, 0.0, 1.0, generator=gen)
                    if driver is None:
                        t = []
                        handshake(lambda: (t.append(_perf_ns()), forward(inputs), t.append(_perf_ns())))
                        host.append((t[1] - t[0]) / 1e3)
                        dev.append(host[-1])
                        stream.append(host[-1])
                        over.append(0.0)
                        continue
                    if flush is not None:
                        driver.check(driver.memset(flush.data_ptr(), s, flush.numel(), None), "cuMemsetD32Async")
                    sync()
                    # The overhead of the device-wide bracket alone: two synchronizations.
                    driver.check(driver.event_record(start, None), "cuEventRecord")
                    sync()
                    driver.check(driver.event_record(end, None), "cuEventRecord")
                    driver.check(driver.event_sync(end), "cuEventSynchronize")
                    over.append(driver.ms(start, end) * 1000)
                    t = []

                    def sample():
                        t.append(_perf_ns())
                        driver.check(driver.event_record(start, None), "cuEventRecord")
                        forward(inputs)
                        driver.check(driver.event_record(mid, None), "cuEventRecord")
                        sync()
                        driver.check(driver.event_record(end, None), "cuEventRecord")
                        driver.check(driver.event_sync(end), "cuEventSynchronize")
                        t.append(_perf_ns())

                    handshake(sample)
                    host.append((t[1] - t[0]) / 1e3)
                    stream.append(driver.ms(start, mid) * 1000)
                    dev.append(driver.ms(start, end) * 1000)
                send({"ok": True, "device_us": dev, "stream_us": stream, "host_us": host, "overhead_us": over,
                      "threads": extra_threads()})
            elif cmd == "profile":
                inputs = slots[slot][0]
                kernels = {}
                if device == "cuda":
                    from torch.profiler import ProfilerActivity, profile
                    sync()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        forward(inputs)
                        sync()
                    for e in prof.events():
                        if str(getattr(e, "device_type", "")).endswith("CUDA"):
                            us = e.time_range.elapsed_us()
                            k = kernels.setdefault(e.name, [0.0, 0])
                            k[0] += us
                            k[1] += 1
                send({"ok": True, "kernels": [[n, v[0], v[1]] for n, v in sorted(kernels.items())]})
            else:
                fail("bad_request", "unknown command %r" % cmd)
        except SystemExit:
            raise
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "CUDA out of memory" in str(e):
                fail("out_of_memory", "%s: the device's memory ran out: %s" % (
                    "forward" if cmd != "profile" else "the profiled forward", str(e).split("\n")[0][:400]))
            fail("runtime_error", "%s failed: %s" % ("forward" if cmd != "profile" else "the profiled forward",
                                                      candidate_error(e, path)))


if __name__ == "__main__":
    main()
