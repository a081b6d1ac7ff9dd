// Standalone probe (not part of the build): a sum over the middle dim of [B, R, N] written several
// ways and timed side by side with CUDA events, beside one contiguous pass over the same bytes
// (the floor). docs/h200_kernelbench_suite.md, "Strided rows unrolled", quotes its figures:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/strided bench/gpu/strided_sum_probe.cu && /tmp/strided
//   /tmp/strided 16 65536 256   (another shape: B R N)
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

// A block of W warps over a tile of 32 neighbouring columns of outer index o: lane l owns column
// c (clamped in bounds; `live` says whether it is written).
struct TileColumn {
  long long o, c;
  bool live;
  int w;
};
__device__ TileColumn tile_column(long long N) {
  long long tiles = (N + 31) / 32;
  long long c0 = (blockIdx.x % tiles) * 32 + (threadIdx.x & 31);
  bool live = c0 < N;
  return {(long long)(blockIdx.x / tiles), live ? c0 : N - 1, live, (int)(threadIdx.x >> 5)};
}
// Folds the W warps' partial sums of each column in warp order (fixed order); warp 0 gets them.
template <int W>
__device__ float fold_warps(float acc, float* sm) {
  sm[threadIdx.x] = acc;
  __syncthreads();
  float t = sm[threadIdx.x & 31];
  for (int k = 1; k < W; ++k) t += sm[k * 32 + (threadIdx.x & 31)];
  return t;
}
// Sums rows r0 + w, r0 + w + W, ... below r1 of column pointer xr, K loads in flight at a time.
template <int W, int K>
__device__ float sum_batched(const float* xr, long long r0, long long r1, long long N, int w) {
  float acc = 0.f;
  long long r = r0 + w;
  for (; r + (K - 1) * W < r1; r += K * W) {
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = __ldg(xr + (r + k * W) * N);
#pragma unroll
    for (int k = 0; k < K; ++k) acc += v[k];
  }
  for (; r < r1; r += W) acc += xr[r * N];
  return acc;
}

// V1: the generator's inner_tile loop: lane = column of a 32-column tile; the warps split R.
template <int W, int U>
__global__ void __launch_bounds__(W * 32) tile(const float* x, float* y, long long B, long long R, long long N) {
  __shared__ float sm[W * 32];
  TileColumn t = tile_column(N);
  const float* xr = x + t.o * R * N + t.c;
  float acc = 0.f;
#pragma unroll U
  for (long long r = t.w; r < R; r += W) acc += xr[r * N];
  float s = fold_warps<W>(acc, sm);
  if (t.w == 0 && t.live) y[t.o * N + t.c] = s;
}

// V2: K loads into registers before adding (explicit memory-level parallelism).
template <int W, int K>
__global__ void __launch_bounds__(W * 32) tile_batch(const float* x, float* y, long long B, long long R, long long N) {
  __shared__ float sm[W * 32];
  TileColumn t = tile_column(N);
  float s = fold_warps<W>(sum_batched<W, K>(x + t.o * R * N + t.c, 0, R, N, t.w), sm);
  if (t.w == 0 && t.live) y[t.o * N + t.c] = s;
}

// V3: wide tile: lane owns C columns spaced 32 apart (block covers 32*C columns), K-batched.
template <int W, int C, int K>
__global__ void __launch_bounds__(W * 32) wide(const float* x, float* y, long long B, long long R, long long N) {
  __shared__ float sm[W * 32 * C];
  long long tiles = (N + 32 * C - 1) / (32 * C);
  long long o = blockIdx.x / tiles, cb = (blockIdx.x % tiles) * 32 * C + (threadIdx.x & 31);
  int w = threadIdx.x >> 5;
  const float* xo = x + o * R * N;
  long long cc[C];
#pragma unroll
  for (int j = 0; j < C; ++j) { long long c = cb + 32 * j; cc[j] = c < N ? c : N - 1; }
  float acc[C];
#pragma unroll
  for (int j = 0; j < C; ++j) acc[j] = 0.f;
  long long r = w;
  for (; r + (K - 1) * W < R; r += K * W) {
    float v[K][C];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int j = 0; j < C; ++j) v[k][j] = __ldg(xo + (r + k * W) * N + cc[j]);
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int j = 0; j < C; ++j) acc[j] += v[k][j];
  }
  for (; r < R; r += W)
#pragma unroll
    for (int j = 0; j < C; ++j) acc[j] += xo[r * N + cc[j]];
#pragma unroll
  for (int j = 0; j < C; ++j) sm[(j * W + w) * 32 + (threadIdx.x & 31)] = acc[j];
  __syncthreads();
  if (w == 0)
#pragma unroll
    for (int j = 0; j < C; ++j) {
      float t = sm[(j * W) * 32 + threadIdx.x];
      for (int k = 1; k < W; ++k) t += sm[(j * W + k) * 32 + threadIdx.x];
      long long c = cb + 32 * j;
      if (c < N) y[o * N + c] = t;
    }
}

// V4: split R over S blocks (grid.y), partials to a buffer, a second kernel folds them in order.
template <int W, int K>
__global__ void __launch_bounds__(W * 32) split1(const float* x, float* part, long long B, long long R, long long N, int S) {
  __shared__ float sm[W * 32];
  TileColumn t = tile_column(N);
  long long chunk = (R + S - 1) / S, r0 = blockIdx.y * chunk, r1 = min(R, r0 + chunk);
  float s = fold_warps<W>(sum_batched<W, K>(x + t.o * R * N + t.c, r0, r1, N, t.w), sm);
  if (t.w == 0 && t.live) part[(blockIdx.y * B + t.o) * N + t.c] = s;
}
__global__ void split2(const float* part, float* y, long long BN, int S) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= BN) return;
  float t = 0.f;
  for (int s = 0; s < S; ++s) t += part[s * BN + i];
  y[i] = t;
}

// Floor: read every element once, contiguously (float4), sum per block (bandwidth reference).
__global__ void readall(const float4* x, long long n4, float* out) {
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x[i]; acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.f) out[0] = acc;
}
__global__ void fill(float* x, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = (float)((i * 2654435761ull) % 1000) / 1000.f - 0.5f;
}

template <class F> void timeit(const char* name, F launch, const float* y, const std::vector<float>& want, long long BN) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  launch(); CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) { cudaEventRecord(a); launch(); cudaEventRecord(b); cudaEventSynchronize(b); float t; cudaEventElapsedTime(&t, a, b); ms.push_back(t); }
  CK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  double err = 0;
  if (BN) { std::vector<float> h(BN); cudaMemcpy(h.data(), y, BN * 4, cudaMemcpyDeviceToHost); for (long long i = 0; i < BN; ++i) err = std::max(err, (double)fabs(h[i] - want[i])); }
  printf("%-28s median %8.1f us  min %8.1f  maxerr %.3g\n", name, ms[7] * 1000, ms[0] * 1000, err);
}

int main(int argc, char** argv) {
  long long B = 128, R = 4096, N = 4095;
  if (argc > 3) { B = atoll(argv[1]); R = atoll(argv[2]); N = atoll(argv[3]); }
  long long n = B * R * N, BN = B * N;
  printf("shape [%lld, %lld, %lld]: %.2f GB\n", B, R, N, n * 4 / 1e9);
  float *x, *y, *part; CK(cudaMalloc(&x, n * 4 + 16)); CK(cudaMalloc(&y, BN * 4)); CK(cudaMalloc(&part, 64 * BN * 4));
  fill<<<4096, 256>>>(x, n); CK(cudaDeviceSynchronize());
  std::vector<float> want(BN);
  // Reference: the simple tile kernel (checked only for agreement across variants).
  tile<8, 4><<<B * ((N + 31) / 32), 256>>>(x, y, B, R, N); cudaMemcpy(want.data(), y, BN * 4, cudaMemcpyDeviceToHost);
  long long t32 = B * ((N + 31) / 32);
  timeit("readall (floor)", [&] { readall<<<132 * 16, 512>>>((const float4*)x, n / 4, y); }, y, want, 0);
  timeit("tile W8 U4 (generator, unrolled)", [&] { tile<8, 4><<<t32, 256>>>(x, y, B, R, N); }, y, want, BN);
  timeit("tile W16 U4", [&] { tile<16, 4><<<t32, 512>>>(x, y, B, R, N); }, y, want, BN);
  timeit("tile_batch W8 K8", [&] { tile_batch<8, 8><<<t32, 256>>>(x, y, B, R, N); }, y, want, BN);
  timeit("tile_batch W8 K16", [&] { tile_batch<8, 16><<<t32, 256>>>(x, y, B, R, N); }, y, want, BN);
  timeit("tile_batch W4 K16", [&] { tile_batch<4, 16><<<t32, 128>>>(x, y, B, R, N); }, y, want, BN);
  timeit("tile_batch W16 K8", [&] { tile_batch<16, 8><<<t32, 512>>>(x, y, B, R, N); }, y, want, BN);
  for (int C : {2, 4}) {
    long long tc = B * ((N + 32 * C - 1) / (32 * C));
    if (C == 2) {
      timeit("wide W8 C2 K4", [&] { wide<8, 2, 4><<<tc, 256>>>(x, y, B, R, N); }, y, want, BN);
      timeit("wide W8 C2 K8", [&] { wide<8, 2, 8><<<tc, 256>>>(x, y, B, R, N); }, y, want, BN);
      timeit("wide W4 C2 K8", [&] { wide<4, 2, 8><<<tc, 128>>>(x, y, B, R, N); }, y, want, BN);
    } else {
      timeit("wide W8 C4 K4", [&] { wide<8, 4, 4><<<tc, 256>>>(x, y, B, R, N); }, y, want, BN);
      timeit("wide W4 C4 K4", [&] { wide<4, 4, 4><<<tc, 128>>>(x, y, B, R, N); }, y, want, BN);
      timeit("wide W4 C4 K8", [&] { wide<4, 4, 8><<<tc, 128>>>(x, y, B, R, N); }, y, want, BN);
    }
  }
  for (int S : {2, 4, 8, 16}) {
    char nm[64]; snprintf(nm, 64, "split S%d W8 K8", S);
    timeit(nm, [&] { split1<8, 8><<<dim3(t32, S), 256>>>(x, part, B, R, N, S); split2<<<(BN + 255) / 256, 256>>>(part, y, BN, S); }, y, want, BN);
  }
  return 0;
}
