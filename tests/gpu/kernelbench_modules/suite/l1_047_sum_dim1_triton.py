# vinci-task: L1_047
# Sum over dim 1 (keepdim) of [B, D1, D2] in Triton: each program accumulates a strip of D2 columns down all D1 rows.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, y_ptr, D1, D2, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    blocks_per_batch = tl.cdiv(D2, BLOCK_SIZE)
    b = (pid // blocks_per_batch).to(tl.int64)
    cols = (pid % blocks_per_batch) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < D2
    x_base = x_ptr + b * D1 * D2
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for r in range(0, D1):
        acc += tl.load(x_base + r * D2 + cols, mask=mask, other=0.0)
    tl.store(y_ptr + b * D2 + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        y = torch.empty((B, 1, D2), device=x.device, dtype=x.dtype)
        BLOCK_SIZE = 512
        grid = (B * triton.cdiv(D2, BLOCK_SIZE),)
        sum_dim1_kernel[grid](x, y, D1, D2, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return y
