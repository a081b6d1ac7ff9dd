# vinci-task: L2_086
# cuBLAS GEMM via torch.matmul, then one Triton kernel fusing bias add, divide by 10 and exact GELU (own kernel is only the epilogue).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_div_gelu_kernel(h_ptr, b_ptr, y_ptr, n_elements, N, inv_divisor, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    h = tl.load(h_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(b_ptr + offsets % N, mask=mask, other=0.0)
    d = (h + b) * inv_divisor
    y = 0.5 * d * (1.0 + tl.erf(d * 0.7071067811865476))
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        h = torch.matmul(x, self.linear.weight.t()).contiguous()
        y = torch.empty_like(h)
        n = h.numel()
        N = h.shape[-1]
        BLOCK_SIZE = 1024
        bias_div_gelu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](
            h, self.linear.bias, y, n, N, 1.0 / self.divisor, BLOCK_SIZE=BLOCK_SIZE, num_warps=4
        )
        return y
