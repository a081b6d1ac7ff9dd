# Computes a leaky ReLU where vinci's L1_019 computes a ReLU: the cross-check must report it.
import torch
import torch.nn as nn

batch_size = 4096
dim = 393216


class Model(nn.Module):
    def forward(self, x):
        return nn.functional.leaky_relu(x * 2 - 1, 0.01)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
