# vinci-task: L3_034
# Elman RNN over a sequence in Triton: per step one fused kernel (x_t and h_{t-1} as two K segments, bias, tanh) writing h_t into the stacked output, then one Triton GEMM for h2o over all steps.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    r = (1.0 - t) / (1.0 + t)
    return tl.where(x >= 0, r, -r)


@triton.jit
def rnn_step_kernel(
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
    for k0 in range(0, K_X, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K_X), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K_X), other=0.0)
        acc += tl.dot(a, w)
    for k0 in range(0, K_H, BLOCK_K):
        kk = k0 + rk
        a = tl.load(h_ptr + rm[:, None] * stride_hm + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K_H), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + K_X + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K_H), other=0.0)
        acc += tl.dot(a, w)
    acc += tl.load(b_ptr + rn, mask=n_mask, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], _tanh(acc), mask=m_mask[:, None] & n_mask[None, :])


@triton.jit
def linear_kernel(
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
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=n_mask[None, :] & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, w)
    acc += tl.load(b_ptr + rn, mask=n_mask, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], acc, mask=m_mask[:, None] & n_mask[None, :])


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0):
        x = x.contiguous()
        T, B, In = x.shape
        w_ih = self.i2h.weight.contiguous()
        w_ho = self.h2o.weight.contiguous()
        H = w_ih.shape[0]
        hs = torch.empty((T, B, H), device=x.device, dtype=torch.float32)
        h_prev = h0.contiguous()
        BLOCK_M, BLOCK_N, BLOCK_K = 16, 64, 64
        grid = (triton.cdiv(H, BLOCK_N), triton.cdiv(B, BLOCK_M))
        for t in range(T):
            x_t = x[t]
            h_t = hs[t]
            rnn_step_kernel[grid](
                x_t, h_prev, w_ih, self.i2h.bias, h_t, B, H, In, H,
                x_t.stride(0), h_prev.stride(0), w_ih.stride(0), h_t.stride(0),
                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=2,
            )
            h_prev = h_t

        flat = hs.view(T * B, H)
        Out = w_ho.shape[0]
        y = torch.empty((T * B, Out), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(Out, 64), triton.cdiv(T * B, 64))
        linear_kernel[grid](
            flat, w_ho, self.h2o.bias, y, T * B, Out, H,
            flat.stride(0), w_ho.stride(0), y.stride(0),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3,
        )
        return y.view(T, B, Out)
