# vinci-task: L2_070
# Decoy: Linear, then sigmoid(h) * 2 + h with in-place PyTorch ops; no kernel of its own.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, In, Out):
        super().__init__()
        self.gemm = nn.Linear(In, Out)
        self.scaling_factor = 2.0

    def forward(self, x):
        h = self.gemm(x)
        return torch.sigmoid(h).mul_(self.scaling_factor).add_(h)
