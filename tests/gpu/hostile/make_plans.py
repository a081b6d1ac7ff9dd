#!/usr/bin/env python3
"""Writes hostile_plans.json: deliberately broken or cheating plans for the live evaluator.

Each entry names the plan, what it does, and the tag the evaluator must reject it with (its
record's flags carry "rejected: TAG"). Run it again after editing a kernel here; the JSON is
committed so tests need no Python.
"""
import json
import os

RELU = "L1_019"  # y = relu(x), x [B, D]


def plan(task, kernels, steps, extra_buffers=()):
    buffers = [
        {"name": "x", "role": "input", "dtype": "f32", "shape": ["B", "D"]},
        {"name": "y", "role": "output", "dtype": "f32", "shape": ["B", "D"]},
    ] + list(extra_buffers)
    return {
        "format": "vinci.plan/1", "task": task, "origin": "hand", "knobs": {},
        "buffers": buffers, "output": "y",
        "kernels": [{"name": n, "source": src, "family": "custom"} for n, src in kernels],
        "steps": steps,
    }


def ew_step(kernel, block=256, args=None):
    return {"kind": "kernel", "kernel": kernel,
            "grid": ["ceil_div(B*D, %d)" % block, "1", "1"], "block": [str(block), "1", "1"],
            "args": args or [{"buffer": "x"}, {"buffer": "y"}, {"i64": "B*D"}]}


def ew_kernel(name, body):
    return name, ('extern "C" __global__ void %s(float* x, float* y, long long n) {\n'
                  '  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n'
                  '%s\n}\n') % (name, body)


entries = []


def add(name, expect, what, p, size="small"):
    entries.append({"name": name, "expect": expect, "what": what, "size": size, "plan": p})


k = ew_kernel("oob", "  if (i < n) y[i + (1LL << 36)] = fmaxf(x[i], 0.f);")
add("out_of_bounds_write", "illegal_access", "writes 256 GiB past the end of its output",
    plan(RELU, [k], [ew_step("oob")]))

# An empty loop may be deleted by the compiler (C++ forward progress); a sleep in it may not.
k = ew_kernel("spin", "  for (;;) __nanosleep(1000);")
add("infinite_loop", "hang", "never returns", plan(RELU, [k], [ew_step("spin")]))

k = ew_kernel("trap", "  if (i == 0) __trap();\n  if (i < n) y[i] = fmaxf(x[i], 0.f);")
add("trap", "trap", "executes a trap instruction", plan(RELU, [k], [ew_step("trap")]))

zero = ew_kernel("zero", "  if (i < n) y[i] = 0.f;")
race = ("race", '''extern "C" __global__ void race(float* x, float* y, long long n) {
  // Every block adds its share of relu(x) to every output with float atomics: the sum is
  // right to rounding, but the order of the additions (and so the last bits) depends on timing.
  const float w = (float)(1 + blockIdx.x % 7);
  for (long long i = threadIdx.x; i < n; i += blockDim.x)
    atomicAdd(&y[i], fmaxf(x[i], 0.f) * w / 1024.f);
}
''')
add("race", "nondeterministic", "float atomics from 256 blocks per element: right to rounding, order-dependent bits",
    plan(RELU, [zero, race], [ew_step("zero"),
                               {"kind": "kernel", "kernel": "race", "grid": ["256", "1", "1"],
                                "block": ["256", "1", "1"],
                                "args": [{"buffer": "x"}, {"buffer": "y"}, {"i64": "B*D"}]}]))

k = ew_kernel("twice", "  if (i < n) y[i] = 2.f * x[i];")
add("wrong_result", "wrong_result", "computes 2x instead of relu(x)", plan(RELU, [k], [ew_step("twice")]))

add("zero_output", "wrong_result", "writes zeros", plan(RELU, [zero], [ew_step("zero")]))

k = ew_kernel("half", "  if (i < n / 2) y[i] = fmaxf(x[i], 0.f);")
add("stale_memory", "not_written",
    "writes half its output and leaves the rest to whatever the memory held (a reference's output, say)",
    plan(RELU, [k], [ew_step("half")]))

k = ew_kernel("inplace", "  if (i < n) { x[i] = fmaxf(x[i], 0.f); y[i] = x[i]; }")
add("writes_input", "writes_input", "applies relu in place on its input", plan(RELU, [k], [ew_step("inplace")]))

cache = ("cached", '''__device__ float cache[1 << 14];
__device__ unsigned long long cached_for;  // the input address the cache holds
__device__ unsigned int blocks_done;
extern "C" __global__ void cached(float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (*(volatile unsigned long long*)&cached_for == (unsigned long long)x) {
    if (i < n) y[i] = cache[i];  // same input address: serve the old answer
    return;
  }
  if (i < n) {
    float v = fmaxf(x[i], 0.f);
    y[i] = v;
    cache[i] = v;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&blocks_done, 1u) == gridDim.x - 1) {
    blocks_done = 0;
    cached_for = (unsigned long long)x;
  }
}
''')
add("side_effect_caching", "caching", "caches its output in device globals keyed by the input's address",
    plan(RELU, [cache], [ew_step("cached")]))

k = ew_kernel("relu_big", "  if (i < n) y[i] = fmaxf(x[i], 0.f);")
add("out_of_memory", "out_of_memory", "asks for a 160 GB scratch buffer",
    plan(RELU, [k], [ew_step("relu_big", args=[{"buffer": "x"}, {"buffer": "scratch"}, {"i64": "B*D"}]),
                     ew_step("relu_big")],
         extra_buffers=[{"name": "scratch", "role": "intermediate", "dtype": "f32", "shape": ["40000000000"]}]))

k = ew_kernel("idle", "  (void)x; (void)y; (void)n; (void)i;")
add("idle_kernel_library_output", "kernel_idle",
    "launches a kernel that does nothing and computes the output with a library op",
    plan(RELU, [k], [{"kind": "library", "op": "relu", "in": ["x"], "out": ["y"]},
                     ew_step("idle")]))

# Launch dimensions past CUDA's limits: checked on their 64-bit values, so 2^32 blocks is not
# launched as 0 blocks, nor 2^32 + 1 as one.
relu = ew_kernel("relu_dims", "  if (i < n) y[i] = fmaxf(x[i], 0.f);")
for name, grid, block, what in [
        ("grid_x_2pow32", ["4294967296", "1", "1"], ["256", "1", "1"], "a grid of 2^32 blocks (0 when narrowed)"),
        ("grid_x_2pow32_plus_1", ["4294967297", "1", "1"], ["256", "1", "1"],
         "a grid of 2^32 + 1 blocks (1 when narrowed)"),
        ("grid_y_65536", ["ceil_div(B*D, 256)", "65536", "1"], ["256", "1", "1"], "grid y past 65535"),
        ("block_z_65", ["ceil_div(B*D, 256)", "1", "1"], ["1", "1", "65"], "block z past 64"),
        ("block_2048_threads", ["ceil_div(B*D, 256)", "1", "1"], ["1024", "2", "1"], "2048 threads per block"),
        ("grid_overflows_64_bits", ["B*D*B*D*B*D*B*D*B*D", "1", "1"], ["256", "1", "1"],
         "a grid size past 64 bits")]:
    # A size expression that cannot be evaluated is refused with the plan, before any compile.
    add(name, "invalid_plan" if name == "grid_overflows_64_bits" else "launch_refused", what,
        plan(RELU, [relu], [{"kind": "kernel", "kernel": "relu_dims", "grid": grid, "block": block,
                             "args": [{"buffer": "x"}, {"buffer": "y"}, {"i64": "B*D"}]}]))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_plans.json")
with open(out, "w") as f:
    json.dump(entries, f, indent=1, sort_keys=True)
    f.write("\n")
print("wrote %d plans to %s" % (len(entries), out))
