# vinci-task: L1_094
# Decoy: MSE loss written out in PyTorch ops (subtract, square, mean), no kernel of its own.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        diff = predictions - targets
        return torch.mean(diff * diff)
