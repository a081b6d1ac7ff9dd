import torch
import torch.nn as nn

batch_size = 1024
in_features = 8192
out_features = 8192
multiplier = 2.0
negative_slope = 0.1


# Consistent with itself, but its constructor takes the sizes in another order than the task's
# kernelbench.init gives them: built from vinci's get_init_inputs(), its Linear is [In, Out].
class Model(nn.Module):
    def __init__(self, n_out, n_in, scale, slope):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.scale = scale
        self.act = nn.LeakyReLU(slope)

    def forward(self, x):
        return self.act(self.fc(x) * self.scale)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [out_features, in_features, multiplier, negative_slope]
