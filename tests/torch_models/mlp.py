"""A two-layer MLP with a ReLU, and a small CNN (conv, batch norm, pooling, linear)."""
import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    def __init__(self, width=16, hidden=32, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class CNN(nn.Module):
    def __init__(self, channels=8, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * channels * 4 * 4, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def build(batch=8, width=16, hidden=32, classes=10):
    torch.manual_seed(0)
    return MLP(width, hidden, classes), (torch.randn(batch, width),)


def cnn(batch=4, channels=8, classes=10):
    torch.manual_seed(0)
    return CNN(channels, classes), (torch.randn(batch, 3, 16, 16),)
