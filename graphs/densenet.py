"""DenseNet-121 (Huang et al. 2017), as torchvision's ``densenet121``.

A 7x7 stride-2 conv, BatchNorm and a 3x3 max pool; four dense blocks of (6, 12,
24, 16) layers, each layer reading the Concat of the block input and EVERY
earlier layer's output (BatchNorm, 1x1 conv to ``bn_size * growth`` channels,
BatchNorm, 3x3 conv to ``growth``), so a layer's output feeds every later layer
of its block: the stress case for the dynamic program's dependent sets. Between
blocks a transition halves the channels (BatchNorm, 1x1 conv) and the size (2x2
average pool). A final BatchNorm, a global average pool and a 1000-class FC with
a bias. BatchNorms carry their scale and shift; ReLUs are not ops (as in the
paper's ResNet, whose convs have ``pw = 0``).
"""
from __future__ import annotations

from pase.builder import GraphBuilder
from pase.graphs.zoo import register_presets
from pase.ir import Graph


def densenet(model: str, *, batch: int, image: int, growth: int, bn_size: int,
             init_features: int, block1: int, block2: int, block3: int, block4: int,
             classes: int) -> Graph:
    b = GraphBuilder(model, cutoff=4, batch=batch)
    x = b.input((batch, 3, image, image))
    x = b.conv(x, (init_features, 3, 7, 7), stride=2, pad=3, name="conv0")
    x = b.batch_norm(x, weights=2, name="norm0")
    x = b.pool(x, 3, 2, pad=1, name="pool0")
    counts = (block1, block2, block3, block4)
    for i, count in enumerate(counts):
        features = [x]
        for j in range(count):
            p = f"block{i + 1}.layer{j + 1}"
            h = features[0] if len(features) == 1 else b.concat(features, axis=1, name=f"{p}.concat")
            h = b.batch_norm(h, weights=2, name=f"{p}.norm1")
            h = b.conv(h, (bn_size * growth, h.shape[1], 1, 1), name=f"{p}.conv1")
            h = b.batch_norm(h, weights=2, name=f"{p}.norm2")
            features.append(b.conv(h, (growth, bn_size * growth, 3, 3), pad=1, name=f"{p}.conv2"))
        x = b.concat(features, axis=1, name=f"block{i + 1}.concat")
        if i + 1 < len(counts):
            p = f"transition{i + 1}"
            x = b.batch_norm(x, weights=2, name=f"{p}.norm")
            x = b.conv(x, (x.shape[1] // 2, x.shape[1], 1, 1), name=f"{p}.conv")
            x = b.pool(x, 2, 2, name=f"{p}.avgpool")
    x = b.batch_norm(x, weights=2, name="norm5")
    x = b.reduce_mean(x, (2, 3), name="avgpool")
    x = b.fc(x, classes, bias=True, name="classifier")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()


register_presets(densenet, {"densenet121": (
    "DenseNet-121: dense blocks (6, 12, 24, 16), growth 32, every layer reads all earlier ones",
    {"batch": 128, "image": 224, "growth": 32, "bn_size": 4, "init_features": 64, "block1": 6,
     "block2": 12, "block3": 24, "block4": 16, "classes": 1000})},
    tiny={"batch": 4, "image": 32, "growth": 8, "bn_size": 2, "init_features": 16, "block1": 2,
          "block2": 2, "block3": 2, "block4": 2, "classes": 10})
