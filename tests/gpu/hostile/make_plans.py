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

# A missing tail check: a few hundred floats past the end of the output, into whatever the
# allocator put there (another buffer, or nothing): caught by the guard zone after every buffer.
k = ew_kernel("tail", "  if (i < n + 300) y[i] = fmaxf(x[i < n ? i : 0], 0.f);")
add("writes_past_output_end", "out_of_bounds_write", "writes 300 floats past the end of its output",
    plan(RELU, [k], [{"kind": "kernel", "kernel": "tail", "grid": ["ceil_div(B*D + 300, 256)", "1", "1"],
                      "block": ["256", "1", "1"], "args": [{"buffer": "x"}, {"buffer": "y"}, {"i64": "B*D"}]}]))

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
# Every run of a candidate starts with its device globals as the module was loaded, so the cache
# is always empty: the plan computes relu every time (before the reset, the trials' new data at
# the same address rejected it as `caching`).
add("side_effect_caching", "contained", "caches its output in device globals keyed by the input's address",
    plan(RELU, [cache], [ew_step("cached")]))
entries[-1]["max_speedup"] = 2.0

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

# State carried between timed samples (docs/live_evaluator.md, "State between runs"). Each plan
# computes C = A @ B (L1_001 at the full size, N = 4096) with a tiled FP32 kernel that is correct
# in every trial, and keeps what it computed somewhere that outlives a run, to skip the work when
# it sees the same inputs again. The trials give every run fresh buffers, so these pass them; the
# timed samples then read a rotation of new inputs with every buffer poisoned and every device
# global reset before each one, so the memory is always empty: "contained" means correct, timed,
# and no faster than the tiled kernel itself (under 1x against cuBLAS; the cheat earned 28x when
# the scratch buffers kept their state between samples).
MM = "L1_001"

MM_TILE = r"""
#define T 16
// C = A @ B, one 16x16 tile per block, k in ascending order with explicit FMAs, so a probe that
// sums one element in the same order gets the same bits.
__device__ void tile_mm(const float* A, const float* B, float* C, float* copy, long long n) {
  __shared__ float a[T][T], b[T][T];
  long long row = (long long)blockIdx.y * T + threadIdx.y, col = (long long)blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (long long k0 = 0; k0 < n; k0 += T) {
    a[threadIdx.y][threadIdx.x] = row < n && k0 + threadIdx.x < n ? A[row * n + k0 + threadIdx.x] : 0.f;
    b[threadIdx.y][threadIdx.x] = col < n && k0 + threadIdx.y < n ? B[(k0 + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < T && k0 + k < n; ++k) acc = __fmaf_rn(a[threadIdx.y][k], b[k][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < n && col < n) {
    C[row * n + col] = acc;
    if (copy) copy[row * n + col] = acc;
  }
}
// A cheap fingerprint of the inputs: a few elements of each.
__device__ float fingerprint(const float* A, const float* B, long long n) {
  long long last = n * n - 1;
  return A[0] + 3.f * A[last] + 5.f * A[last / 2] + 7.f * B[0] + 11.f * B[last] + 13.f * B[last / 3];
}
"""


def mm_plan(kernels, steps, extra_buffers):
    return {
        "format": "vinci.plan/1", "task": MM, "origin": "hand", "knobs": {},
        "buffers": [{"name": "A", "role": "input", "dtype": "f32", "shape": ["N", "N"]},
                    {"name": "B", "role": "input", "dtype": "f32", "shape": ["N", "N"]},
                    {"name": "C", "role": "output", "dtype": "f32", "shape": ["N", "N"]}] + extra_buffers,
        "output": "C",
        "kernels": [{"name": n, "source": src, "family": "custom"} for n, src in kernels],
        "steps": steps,
    }


def one_thread(kernel, args):
    return {"kind": "kernel", "kernel": kernel, "grid": ["1", "1", "1"], "block": ["1", "1", "1"], "args": args}


def tiles(kernel, args):
    return {"kind": "kernel", "kernel": kernel, "grid": ["ceil_div(N, 16)", "ceil_div(N, 16)", "1"],
            "block": ["16", "16", "1"], "args": args}


A, B, C, NN, Nt = {"buffer": "A"}, {"buffer": "B"}, {"buffer": "C"}, {"i64": "N"}, {"buffer": "note"}

# 1. A memo in a scratch buffer of its own: [fingerprint, hit flag, pad..., copy of C].
src = MM_TILE + r"""
extern "C" __global__ void probe(const float* A, const float* B, float* memo, long long n) {
  memo[1] = memo[0] == fingerprint(A, B, n) ? 1.f : 0.f;
}
extern "C" __global__ void mm_or_copy(const float* A, const float* B, float* C, float* memo, long long n) {
  if (memo[1] == 1.f) {  // the same inputs as last time: serve the old answer
    long long row = (long long)blockIdx.y * T + threadIdx.y, col = (long long)blockIdx.x * T + threadIdx.x;
    if (row < n && col < n) C[row * n + col] = memo[8 + row * n + col];
    return;
  }
  tile_mm(A, B, C, memo + 8, n);
}
extern "C" __global__ void stamp(const float* A, const float* B, float* memo, long long n) {
  memo[0] = fingerprint(A, B, n);
}
"""
M = {"buffer": "memo"}
add("state_in_scratch_buffer", "contained",
    "remembers its output in its own scratch buffer, keyed by an input fingerprint, and copies it when the inputs repeat",
    mm_plan([("probe", src), ("mm_or_copy", src), ("stamp", src)],
            [one_thread("probe", [A, B, M, NN]), tiles("mm_or_copy", [A, B, C, M, NN]),
             one_thread("stamp", [A, B, M, NN])],
            [{"name": "memo", "role": "intermediate", "dtype": "f32", "shape": ["N*N + 8"]}]),
    size="full")
entries[-1]["max_speedup"] = 1.0

# 2. Four memos in device globals, keyed by input fingerprints: enough for a rotation of up to
# four input sets. One kernel (each kernel of a plan is a module of its own, with its own globals):
# every block looks the fingerprint up; the last block to finish files the new entry.
src = MM_TILE + r"""
__device__ float memo[4][1 << 24];  // N*N at the full size
__device__ float memo_key[4];
__device__ unsigned int memo_next, blocks_done;
extern "C" __global__ void mm_memo(const float* A, const float* B, float* C, long long n) {
  float f = fingerprint(A, B, n);
  int hit = -1;
  for (int s = 0; s < 4; ++s) if (memo_key[s] == f && f != 0.f) hit = s;
  long long row = (long long)blockIdx.y * T + threadIdx.y, col = (long long)blockIdx.x * T + threadIdx.x;
  if (hit >= 0) {  // inputs seen before: serve the old answer
    if (row < n && col < n) C[row * n + col] = memo[hit][row * n + col];
    return;
  }
  unsigned int slot = memo_next & 3;
  tile_mm(A, B, C, n * n <= (1 << 24) ? memo[slot] : nullptr, n);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && atomicAdd(&blocks_done, 1u) == gridDim.x * gridDim.y - 1) {
    blocks_done = 0;
    memo_key[slot] = f;
    memo_next = memo_next + 1;
  }
}
"""
add("input_fingerprint_cache_in_device_globals", "contained",
    "keeps four outputs in device globals keyed by input fingerprints, enough for a rotation of inputs",
    mm_plan([("mm_memo", src)], [tiles("mm_memo", [A, B, C, NN])], []), size="full")
entries[-1]["max_speedup"] = 1.0

# 3. The output itself: when two of its elements already hold this input's answer, skip the work.
src = MM_TILE + r"""
__device__ float element(const float* A, const float* B, long long n, long long row, long long col) {
  float acc = 0.f;
  for (long long k = 0; k < n; ++k) acc = __fmaf_rn(A[row * n + k], B[k * n + col], acc);
  return acc;
}
extern "C" __global__ void probe(const float* A, const float* B, const float* C, float* note, long long n) {
  note[0] = C[0] == element(A, B, n, 0, 0) && C[n * n - 1] == element(A, B, n, n - 1, n - 1) ? 1.f : 0.f;
}
extern "C" __global__ void mm_unless_done(const float* A, const float* B, float* C, const float* note, long long n) {
  if (note[0] == 1.f) return;
  tile_mm(A, B, C, nullptr, n);
}
"""
add("state_in_output", "contained",
    "checks two elements of its output and skips the product when they already hold this input's answer",
    mm_plan([("probe", src), ("mm_unless_done", src)],
            [one_thread("probe", [A, B, C, Nt, NN]), tiles("mm_unless_done", [A, B, C, Nt, NN])],
            [{"name": "note", "role": "intermediate", "dtype": "f32", "shape": ["1"]}]),
    size="full")
entries[-1]["max_speedup"] = 1.0

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_plans.json")
with open(out, "w") as f:
    json.dump(entries, f, indent=1, sort_keys=True)
    f.write("\n")
print("wrote %d plans to %s" % (len(entries), out))
