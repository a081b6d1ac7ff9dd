# vinci-task: L1_036
# RMS norm over the channel dim of [N, C, H, W] in Triton: each program owns a strip of H*W positions of one sample and loops over C twice.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, y_ptr, C, HW, eps, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    blocks_per_sample = tl.cdiv(HW, BLOCK_SIZE)
    n = (pid // blocks_per_sample).to(tl.int64)
    hw = (pid % blocks_per_sample) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = hw < HW
    base = n * C * HW

    sq_sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for c in range(0, C):
        x = tl.load(x_ptr + base + c * HW + hw, mask=mask, other=0.0)
        sq_sum += x * x
    denom = tl.sqrt(sq_sum / C + eps)

    for c in range(0, C):
        x = tl.load(x_ptr + base + c * HW + hw, mask=mask, other=0.0)
        tl.store(y_ptr + base + c * HW + hw, x / denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        N, C = x.shape[0], x.shape[1]
        HW = x.numel() // (N * C)
        y = torch.empty_like(x)
        BLOCK_SIZE = 1024
        grid = (N * triton.cdiv(HW, BLOCK_SIZE),)
        rms_norm_kernel[grid](x, y, C, HW, self.eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
        return y
