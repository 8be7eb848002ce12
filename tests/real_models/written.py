"""Two models written here in plain PyTorch, as their papers describe them.

- :class:`UNet` (Ronneberger et al. 2015): double 3x3 convolutions, max-pooling
  down, transposed 2x2 convolutions up, skip connections concatenated on the
  channels, a 1x1 head.
- :class:`DLRM` (Naumov et al. 2019): a bottom MLP over the dense features,
  ``EmbeddingBag`` tables (sum of each sample's ids) for the sparse ones, the dot
  products of every pair of the features as the interaction, a top MLP.
"""
from __future__ import annotations

import torch
from torch import nn


def _double(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True),
                         nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 2, width: int = 16, depth: int = 3):
        super().__init__()
        widths = [width * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList([_double(channels, widths[0])] +
                                  [_double(a, b) for a, b in zip(widths, widths[1:])])
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList([nn.ConvTranspose2d(b, a, 2, stride=2)
                                 for a, b in zip(widths, widths[1:])][::-1])
        self.merge = nn.ModuleList([_double(2 * a, a) for a in widths[:-1]][::-1])
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        skips.pop()
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self, dense: int = 13, rows: tuple[int, ...] = (1000, 1000, 500, 200),
                 width: int = 16):
        super().__init__()
        self.bottom = _mlp([dense, 64, width])
        self.tables = nn.ModuleList([nn.EmbeddingBag(n, width, mode="sum") for n in rows])
        features = len(rows) + 1
        pairs = features * (features - 1) // 2
        self.top = _mlp([width + pairs, 64, 1])

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        ys = [table(sparse[:, i]) for i, table in enumerate(self.tables)]
        z = torch.stack([x] + ys, dim=1)                        # (b, features, width)
        dots = torch.bmm(z, z.transpose(1, 2))                   # (b, features, features)
        i, j = torch.triu_indices(z.shape[1], z.shape[1], offset=1)
        return self.top(torch.cat([x, dots[:, i, j]], dim=1))
