# vinci-task: L2_070
# Decoy: Linear, then sigmoid(h) * 2 + h with in-place PyTorch ops; no kernel of its own.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        h = self.gemm(x)
        return torch.sigmoid(h).mul_(self.scaling_factor).add_(h)
