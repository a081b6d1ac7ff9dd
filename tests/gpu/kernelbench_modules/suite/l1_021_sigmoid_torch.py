# vinci-task: L1_021
# Decoy: sigmoid through PyTorch's own torch.sigmoid, no kernel of its own.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)
