import torch
import torch.nn as nn

batch_size = 128
input_size = 16384
layer_sizes = [16384, 16384]
output_size = 8192


class Model(nn.Module):
    def __init__(self, n_in, hidden, n_out):
        super().__init__()
        layers, width = [], n_in
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]
