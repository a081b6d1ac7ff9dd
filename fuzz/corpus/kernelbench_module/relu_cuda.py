import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

relu_declaration = "torch::Tensor relu_forward(torch::Tensor x);"

relu = load_inline(
    name="vinci_relu",
    cpp_sources=relu_declaration,
    cuda_sources=relu_source,
    functions=["relu_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu.relu_forward(x.contiguous())
