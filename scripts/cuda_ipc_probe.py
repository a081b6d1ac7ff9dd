#!/usr/bin/env python3
"""Can a process in the module sandbox's namespaces open a CUDA IPC handle of the worker's memory?

For the inputs' and output's trip of a KernelBench module (docs/kernelbench_format.md, "The
tensors' trip"): this process makes a float32 tensor of N elements (default 1e8) on the GPU, exports
its allocation with the driver's legacy IPC (cuIpcGetMemHandle), and starts a child under bwrap
with each set of the sandbox's unshare flags (none, pid, ipc, pid+ipc+net+uts, and with a user
namespace); the child opens the handle (cuIpcOpenMemHandle) and sums the tensor. Then it times the
copies the shared memory path makes instead: device to host and back, pageable and pinned.

  BWRAP=$(command -v bwrap) N=1e8 python3 scripts/cuda_ipc_probe.py

Needs torch with CUDA and a GPU; prints one line per case.
"""
import ctypes
import glob
import json
import os
import subprocess
import sys
import time


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def child(handle_hex, n):
    import torch
    torch.zeros(1, device="cuda")  # the context
    cu = ctypes.CDLL("libcuda.so.1")
    handle = Handle()
    ctypes.memmove(ctypes.byref(handle), bytes.fromhex(handle_hex), 64)
    ptr = ctypes.c_uint64()
    t0 = time.perf_counter()
    rc = cu.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), handle, ctypes.c_uint(1))  # lazy peer access
    t1 = time.perf_counter()
    if rc != 0:
        print(json.dumps({"open_rc": rc}))
        return

    class View:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr.value, False), "version": 3}

    t = torch.as_tensor(View(), device="cuda")
    print(json.dumps({"open_rc": 0, "open_ms": (t1 - t0) * 1e3, "sum": float(t.sum().item())}))


def main():
    import torch
    n = int(float(os.environ.get("N", "1e8")))
    t = torch.ones(n, device="cuda")
    torch.cuda.synchronize()
    cu = ctypes.CDLL("libcuda.so.1")
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(t.data_ptr()))
    handle = Handle()
    rc = cu.cuIpcGetMemHandle(ctypes.byref(handle), base)
    print("cuIpcGetMemHandle:", rc, "(the tensor starts its allocation: %s)" % (base.value == t.data_ptr()))
    handle_hex = ctypes.string_at(ctypes.byref(handle), 64).hex()
    nodes = []
    for d in sorted(glob.glob("/dev/nvidia*")):
        nodes += ["--dev-bind", d, d]
    bwrap = [os.environ.get("BWRAP", "bwrap"), "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
             "--dev", "/dev"] + nodes + ["--ro-bind", "/sys", "/sys"]
    net = ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"]
    for label, flags in [("none", []), ("pid", ["--unshare-pid"]), ("ipc", ["--unshare-ipc"]),
                         ("pid+ipc+net+uts", net), ("pid+ipc+net+uts+user", net + ["--unshare-user"])]:
        t0 = time.perf_counter()
        r = subprocess.run(bwrap + flags + [sys.executable, __file__, "child", handle_hex, str(n)],
                           capture_output=True, text=True)
        print("%-22s rc %d %s %s %.1f s" % (label, r.returncode, r.stdout.strip()[-300:], r.stderr.strip()[-300:],
                                           time.perf_counter() - t0))
    for pinned in (False, True):
        host = torch.empty(n, pin_memory=pinned)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        host.copy_(t)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        host.to("cuda")
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print("copies, %s host memory, %.1f MB: to the host %.1f ms, back %.1f ms"
              % ("pinned" if pinned else "pageable", n * 4 / 1e6, (t1 - t0) * 1e3, (t2 - t1) * 1e3))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
