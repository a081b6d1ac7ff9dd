# vinci-task: L1_040
# LayerNorm over (C, H, W) in three Triton kernels: per-chunk mean/M2, per-row merge (Chan) to mean/rstd, then normalise with weight and bias.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ln_chunk_stats_kernel(x_ptr, sum_ptr, m2_ptr, D, n_chunks, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    chunk = pid % n_chunks
    cols = chunk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
    cnt = tl.minimum(D - chunk * BLOCK_SIZE, BLOCK_SIZE).to(tl.float32)
    s = tl.sum(x, axis=0)
    mean = s / cnt
    diff = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(diff * diff, axis=0)
    tl.store(sum_ptr + pid, s)
    tl.store(m2_ptr + pid, m2)


@triton.jit
def ln_finalize_kernel(sum_ptr, m2_ptr, mean_ptr, rstd_ptr, D, n_chunks, eps,
                       CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_chunks
    offs = tl.arange(0, BLOCK_C)
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, n_chunks, BLOCK_C):
        idx = start + offs
        total += tl.load(sum_ptr + base + idx, mask=idx < n_chunks, other=0.0)
    mean = tl.sum(total, axis=0) / D

    m2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    for start in range(0, n_chunks, BLOCK_C):
        idx = start + offs
        cmask = idx < n_chunks
        s = tl.load(sum_ptr + base + idx, mask=cmask, other=0.0)
        cm2 = tl.load(m2_ptr + base + idx, mask=cmask, other=0.0)
        cnt = tl.minimum(D - idx * CHUNK, CHUNK).to(tl.float32)
        cnt = tl.where(cmask, cnt, 1.0)
        delta = s / cnt - mean
        m2 += tl.where(cmask, cm2 + cnt * delta * delta, 0.0)
    var = tl.sum(m2, axis=0) / D
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def ln_apply_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, D, n_chunks, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // n_chunks).to(tl.int64)
    chunk = pid % n_chunks
    cols = chunk * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < D
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * D + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, eps=1e-05)

    def forward(self, x):
        x = x.contiguous()
        N = x.shape[0]
        D = x.numel() // N
        BLOCK_SIZE = 4096
        n_chunks = triton.cdiv(D, BLOCK_SIZE)
        part_sum = torch.empty((N, n_chunks), device=x.device, dtype=torch.float32)
        part_m2 = torch.empty_like(part_sum)
        mean = torch.empty((N,), device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        y = torch.empty_like(x)
        ln_chunk_stats_kernel[(N * n_chunks,)](x, part_sum, part_m2, D, n_chunks, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
        ln_finalize_kernel[(N,)](part_sum, part_m2, mean, rstd, D, n_chunks, self.ln.eps,
                                 CHUNK=BLOCK_SIZE, BLOCK_C=1024, num_warps=4)
        ln_apply_kernel[(N * n_chunks,)](x, self.ln.weight.contiguous(), self.ln.bias.contiguous(), y, mean, rstd,
                                         D, n_chunks, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)
        return y
