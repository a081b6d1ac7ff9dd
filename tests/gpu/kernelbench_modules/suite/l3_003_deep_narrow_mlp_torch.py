# vinci-task: L3_003
# Decoy: the deep MLP as a loop of F.linear + in-place ReLU over the same Linear layers; PyTorch ops only.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, In, H, Out):
        super().__init__()
        self.fc0 = nn.Linear(In, H)
        self.fc1 = nn.Linear(H, H)
        self.fc2 = nn.Linear(H, H)
        self.fc3 = nn.Linear(H, H)
        self.fc4 = nn.Linear(H, H)
        self.fc5 = nn.Linear(H, H)
        self.fc6 = nn.Linear(H, H)
        self.fc7 = nn.Linear(H, H)
        self.fc8 = nn.Linear(H, H)
        self.fc9 = nn.Linear(H, H)
        self.fc10 = nn.Linear(H, H)
        self.fc11 = nn.Linear(H, H)
        self.fc12 = nn.Linear(H, H)
        self.fc13 = nn.Linear(H, H)
        self.fc14 = nn.Linear(H, H)
        self.fc15 = nn.Linear(H, H)
        self.out = nn.Linear(H, Out)

    def forward(self, x):
        for i in range(16):
            layer = getattr(self, "fc%d" % i)
            x = F.relu(F.linear(x, layer.weight, layer.bias), inplace=True)
        return F.linear(x, self.out.weight, self.out.bias)
