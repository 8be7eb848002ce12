"""ResNet-101 as modelled in the PaSE paper (245 ops, 277 edges at batch 128).

Bottleneck blocks (torchvision layout) whose convs have ``pw = 0``; every conv is
followed by a BatchNorm, and a block ends with ``Elementwise(main, identity, pw 1)``.
A projection conv 1x1 + BatchNorm on the identity path (``layerN.i.downsample.0``
and ``.1``) is built after the main path and before the add.
"""
from __future__ import annotations

from typing import Sequence

from pase.builder import GraphBuilder, Value, check_model_options
from pase.errors import OptionError
from pase.ir import Graph
from pase.registry import MODELS

EXPANSION = 4
PLANES = (64, 128, 256, 512)


def _bottleneck(b: GraphBuilder, x: Value, planes: int, stride: int, prefix: str) -> Value:
    width = x.shape[1]
    out = b.conv(x, (planes, width, 1, 1), name=f"{prefix}.conv1")
    out = b.batch_norm(out, name=f"{prefix}.bn1")
    out = b.conv(out, (planes, planes, 3, 3), stride=stride, pad=1, name=f"{prefix}.conv2")
    out = b.batch_norm(out, name=f"{prefix}.bn2")
    out = b.conv(out, (planes * EXPANSION, planes, 1, 1), name=f"{prefix}.conv3")
    out = b.batch_norm(out, name=f"{prefix}.bn3")
    identity = x
    if stride != 1 or width != planes * EXPANSION:
        identity = b.conv(x, (planes * EXPANSION, width, 1, 1), stride=stride,
                          name=f"{prefix}.downsample.0")
        identity = b.batch_norm(identity, name=f"{prefix}.downsample.1")
    return b.elementwise(out, identity, pw=1, name=f"{prefix}.add")


@MODELS.register("resnet101", "ResNet-101 (He 2016), bottleneck blocks (3, 4, 23, 3)")
def resnet101(batch: int = 128, classes: int = 1000,
              blocks: Sequence[int] = (3, 4, 23, 3)) -> Graph:
    check_model_options("resnet101", batch=batch, classes=classes)
    blocks = tuple(blocks)
    if len(blocks) != len(PLANES) or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                         for n in blocks):
        raise OptionError(f"blocks must be {len(PLANES)} integers >= 1, got {blocks!r}")
    b = GraphBuilder("resnet101", cutoff=4, batch=batch)
    x = b.input((batch, 3, 227, 227))
    x = b.conv(x, (64, 3, 7, 7), stride=2, pad=3, name="conv1")
    x = b.batch_norm(x, name="bn1")
    x = b.pool(x, 3, 2, pad=1, name="maxpool")
    for stage, (planes, count) in enumerate(zip(PLANES, blocks)):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _bottleneck(b, x, planes, stride, f"layer{stage + 1}.{i}")
    x = b.reduce_mean(x, (2, 3), name="avgpool")
    x = b.fc(x, classes, name="fc")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()
