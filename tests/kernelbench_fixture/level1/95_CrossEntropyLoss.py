import torch
import torch.nn as nn

batch_size = 32768
num_classes = 4096
input_shape = (num_classes,)


class Model(nn.Module):
    def forward(self, logits, labels):
        return nn.CrossEntropyLoss()(logits, labels)


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
