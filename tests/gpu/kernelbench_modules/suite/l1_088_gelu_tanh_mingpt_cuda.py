# vinci-task: L1_088
# minGPT tanh GELU as one fused CUDA kernel (grid-stride loop) built with load_inline.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_tanh_source = r"""
#include <torch/extension.h>

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float v = x[i];
        float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

torch::Tensor gelu_tanh_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    const int threads = 256;
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 16) blocks = 65535L * 16;
    if (blocks < 1) blocks = 1;
    gelu_tanh_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

gelu_tanh_declaration = "torch::Tensor gelu_tanh_forward(torch::Tensor x);"

gelu_tanh = load_inline(
    name="vinci_suite_gelu_tanh_l1_088",
    cpp_sources=gelu_tanh_declaration,
    cuda_sources=gelu_tanh_source,
    functions=["gelu_tanh_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_tanh.gelu_tanh_forward(x)
