# vinci-task: L3_033
# One Elman RNN step in Triton: the i2h GEMM reads x and h0 as two K segments (no torch.cat) with bias + tanh fused, then a Triton GEMM + bias for h2o.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_f32(x):
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x >= 0, r, -r)


@triton.jit
def rnn_i2h_tanh_kernel(
    x_ptr, h_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K_X, K_H,
    stride_xm, stride_hm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_mask = rm < M
    n_mask = rn < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # columns [0, K_X) of W multiply x
    for k0 in range(0, K_X, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K_X), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K_X), other=0.0)
        acc += tl.dot(a, b)
    # columns [K_X, K_X + K_H) of W multiply the hidden state
    for k0 in range(0, K_H, BLOCK_K):
        kk = k0 + rk
        a = tl.load(h_ptr + rm[:, None] * stride_hm + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K_H), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + K_X + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K_H), other=0.0)
        acc += tl.dot(a, b)

    acc += tl.load(b_ptr + rn, mask=n_mask, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], tanh_f32(acc), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def linear_bias_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_mask = rm < M
    n_mask = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    acc += tl.load(b_ptr + rn, mask=n_mask, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc, mask=m_mask[:, None] & n_mask[None, :])


# The problem's batch size, which its constructor reads as KernelBench's Model does: the hidden
# state's draw (h0 overwrites it) comes before the Linear weights', so it must be as large as the
# reference's for the weights to agree. KernelBench's size, vinci's `full`.
batch_size = 256


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0):
        x = x.contiguous()
        h0 = h0.contiguous()
        w1 = self.i2h.weight.contiguous()
        w2 = self.h2o.weight.contiguous()
        M, K_X = x.shape
        K_H = h0.shape[1]
        N = w1.shape[0]
        BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
        h = torch.empty((M, N), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(N, BLOCK_N), triton.cdiv(M, BLOCK_M))
        rnn_i2h_tanh_kernel[grid](
            x, h0, w1, self.i2h.bias, h, M, N, K_X, K_H,
            x.stride(0), h0.stride(0), w1.stride(0), h.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=3,
        )
        N_out = w2.shape[0]
        y = torch.empty((M, N_out), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(N_out, BLOCK_N), triton.cdiv(M, BLOCK_M))
        linear_bias_kernel[grid](
            h, w2, self.h2o.bias, y, M, N_out, N,
            h.stride(0), w2.stride(0), y.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=3,
        )
        return y
