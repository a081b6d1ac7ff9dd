# vinci-task: L3_043
# minGPT causal self-attention in Triton: a linear kernel for c_attn and c_proj, and a causal flash-attention kernel reading q/k/v straight out of the qkv buffer.
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_ym,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def causal_attention_kernel(
    qkv_ptr, o_ptr,
    T, C, n_head, head_dim, sm_scale,
    stride_qkv_b, stride_qkv_t, stride_o_b, stride_o_t,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_head
    h = bh % n_head

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < head_dim

    base = qkv_ptr + b.to(tl.int64) * stride_qkv_b + h * head_dim
    q = tl.load(base + offs_m[:, None] * stride_qkv_t + offs_d[None, :],
                mask=(offs_m[:, None] < T) & d_mask[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    hi = tl.minimum((pid_m + 1) * BLOCK_M, T)  # causal: keys up to the last query row of the tile
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(base + C + cols[None, :] * stride_qkv_t + offs_d[:, None],
                    mask=(cols[None, :] < T) & d_mask[:, None], other=0.0)  # [BLOCK_D, BLOCK_N]
        s = tl.dot(q, k) * sm_scale
        s = tl.where((offs_m[:, None] >= cols[None, :]) & (cols[None, :] < T), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(base + 2 * C + cols[:, None] * stride_qkv_t + offs_d[None, :],
                    mask=(cols[:, None] < T) & d_mask[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new

    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + b.to(tl.int64) * stride_o_b + offs_m[:, None] * stride_o_t + h * head_dim + offs_d[None, :]
    tl.store(o_ptrs, acc, mask=(offs_m[:, None] < T) & d_mask[None, :])


def _linear(x2d, layer):
    w = layer.weight.contiguous()
    M, K = x2d.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x2d.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    linear_kernel[grid](
        x2d, w, layer.bias, y, M, N, K, x2d.stride(0), w.stride(0), y.stride(0),
        BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.head_dim = n_embd // n_head

    def forward(self, x):
        x = x.contiguous()
        B, T, C = x.shape
        qkv = _linear(x.view(B * T, C), self.c_attn).view(B, T, 3 * C)
        o = torch.empty((B, T, C), device=x.device, dtype=torch.float32)
        BLOCK_M, BLOCK_N = 64, 64
        BLOCK_D = triton.next_power_of_2(self.head_dim)
        grid = (triton.cdiv(T, BLOCK_M), B * self.n_head)
        causal_attention_kernel[grid](
            qkv, o, T, C, self.n_head, self.head_dim, 1.0 / math.sqrt(self.head_dim),
            qkv.stride(0), qkv.stride(1), o.stride(0), o.stride(1),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, num_warps=4, num_stages=2,
        )
        return _linear(o.view(B * T, C), self.c_proj).view(B, T, C)
