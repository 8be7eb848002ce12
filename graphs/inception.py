"""Inception-v3 as modelled in the PaSE paper (219 ops, 253 edges at batch 128).

The torchvision layout without the auxiliary head. A basic conv is a Conv
(``pw = 0``) followed by a BatchNorm, named ``<module>.<branch>.conv`` and
``.bn`` as in torchvision's state dict. Ops are built in the order of
torchvision's ``forward``: branches left to right, each branch's pooling
before its 1x1 conv, then the Concat on the channel axis (InceptionE also
concatenates its split 1x3 / 3x1 pairs).
"""
from __future__ import annotations

from typing import Sequence

from pase.builder import GraphBuilder, Value, check_model_options
from pase.ir import Graph
from pase.registry import MODELS


def _basic(b: GraphBuilder, x: Value, out: int, kernel: int | Sequence[int], name: str,
           stride: int = 1, pad: int | Sequence[int] = 0) -> Value:
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = b.conv(x, (out, x.shape[1], kh, kw), stride=stride, pad=pad, name=f"{name}.conv")
    return b.batch_norm(x, name=f"{name}.bn")


def _inception_a(b: GraphBuilder, x: Value, pool_features: int, m: str) -> Value:
    b1 = _basic(b, x, 64, 1, f"{m}.branch1x1")
    b5 = _basic(b, x, 48, 1, f"{m}.branch5x5_1")
    b5 = _basic(b, b5, 64, 5, f"{m}.branch5x5_2", pad=2)
    b3 = _basic(b, x, 64, 1, f"{m}.branch3x3dbl_1")
    b3 = _basic(b, b3, 96, 3, f"{m}.branch3x3dbl_2", pad=1)
    b3 = _basic(b, b3, 96, 3, f"{m}.branch3x3dbl_3", pad=1)
    bp = b.pool(x, 3, 1, pad=1, name=f"{m}.avg_pool")
    bp = _basic(b, bp, pool_features, 1, f"{m}.branch_pool")
    return b.concat([b1, b5, b3, bp], axis=1, name=f"{m}.concat")


def _inception_b(b: GraphBuilder, x: Value, m: str) -> Value:
    b3 = _basic(b, x, 384, 3, f"{m}.branch3x3", stride=2)
    bd = _basic(b, x, 64, 1, f"{m}.branch3x3dbl_1")
    bd = _basic(b, bd, 96, 3, f"{m}.branch3x3dbl_2", pad=1)
    bd = _basic(b, bd, 96, 3, f"{m}.branch3x3dbl_3", stride=2)
    bp = b.pool(x, 3, 2, name=f"{m}.max_pool")
    return b.concat([b3, bd, bp], axis=1, name=f"{m}.concat")


def _inception_c(b: GraphBuilder, x: Value, c7: int, m: str) -> Value:
    b1 = _basic(b, x, 192, 1, f"{m}.branch1x1")
    b7 = _basic(b, x, c7, 1, f"{m}.branch7x7_1")
    b7 = _basic(b, b7, c7, (1, 7), f"{m}.branch7x7_2", pad=(0, 3))
    b7 = _basic(b, b7, 192, (7, 1), f"{m}.branch7x7_3", pad=(3, 0))
    bd = _basic(b, x, c7, 1, f"{m}.branch7x7dbl_1")
    bd = _basic(b, bd, c7, (7, 1), f"{m}.branch7x7dbl_2", pad=(3, 0))
    bd = _basic(b, bd, c7, (1, 7), f"{m}.branch7x7dbl_3", pad=(0, 3))
    bd = _basic(b, bd, c7, (7, 1), f"{m}.branch7x7dbl_4", pad=(3, 0))
    bd = _basic(b, bd, 192, (1, 7), f"{m}.branch7x7dbl_5", pad=(0, 3))
    bp = b.pool(x, 3, 1, pad=1, name=f"{m}.avg_pool")
    bp = _basic(b, bp, 192, 1, f"{m}.branch_pool")
    return b.concat([b1, b7, bd, bp], axis=1, name=f"{m}.concat")


def _inception_d(b: GraphBuilder, x: Value, m: str) -> Value:
    b3 = _basic(b, x, 192, 1, f"{m}.branch3x3_1")
    b3 = _basic(b, b3, 320, 3, f"{m}.branch3x3_2", stride=2)
    b7 = _basic(b, x, 192, 1, f"{m}.branch7x7x3_1")
    b7 = _basic(b, b7, 192, (1, 7), f"{m}.branch7x7x3_2", pad=(0, 3))
    b7 = _basic(b, b7, 192, (7, 1), f"{m}.branch7x7x3_3", pad=(3, 0))
    b7 = _basic(b, b7, 192, 3, f"{m}.branch7x7x3_4", stride=2)
    bp = b.pool(x, 3, 2, name=f"{m}.max_pool")
    return b.concat([b3, b7, bp], axis=1, name=f"{m}.concat")


def _inception_e(b: GraphBuilder, x: Value, m: str) -> Value:
    b1 = _basic(b, x, 320, 1, f"{m}.branch1x1")
    b3 = _basic(b, x, 384, 1, f"{m}.branch3x3_1")
    b3a = _basic(b, b3, 384, (1, 3), f"{m}.branch3x3_2a", pad=(0, 1))
    b3b = _basic(b, b3, 384, (3, 1), f"{m}.branch3x3_2b", pad=(1, 0))
    b3 = b.concat([b3a, b3b], axis=1, name=f"{m}.branch3x3.concat")
    bd = _basic(b, x, 448, 1, f"{m}.branch3x3dbl_1")
    bd = _basic(b, bd, 384, 3, f"{m}.branch3x3dbl_2", pad=1)
    bda = _basic(b, bd, 384, (1, 3), f"{m}.branch3x3dbl_3a", pad=(0, 1))
    bdb = _basic(b, bd, 384, (3, 1), f"{m}.branch3x3dbl_3b", pad=(1, 0))
    bd = b.concat([bda, bdb], axis=1, name=f"{m}.branch3x3dbl.concat")
    bp = b.pool(x, 3, 1, pad=1, name=f"{m}.avg_pool")
    bp = _basic(b, bp, 192, 1, f"{m}.branch_pool")
    return b.concat([b1, b3, bd, bp], axis=1, name=f"{m}.concat")


@MODELS.register("inception_v3", "Inception-v3 (Szegedy 2016), torchvision layout without aux head")
def inception_v3(batch: int = 128, classes: int = 1000) -> Graph:
    check_model_options("inception_v3", batch=batch, classes=classes)
    b = GraphBuilder("inception_v3", cutoff=4, batch=batch)
    x = b.input((batch, 3, 299, 299))
    x = _basic(b, x, 32, 3, "Conv2d_1a_3x3", stride=2)
    x = _basic(b, x, 32, 3, "Conv2d_2a_3x3")
    x = _basic(b, x, 64, 3, "Conv2d_2b_3x3", pad=1)
    x = b.pool(x, 3, 2, name="maxpool1")
    x = _basic(b, x, 80, 1, "Conv2d_3b_1x1")
    x = _basic(b, x, 192, 3, "Conv2d_4a_3x3")
    x = b.pool(x, 3, 2, name="maxpool2")
    for m, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = _inception_a(b, x, pool_features, m)
    x = _inception_b(b, x, "Mixed_6a")
    for m, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _inception_c(b, x, c7, m)
    x = _inception_d(b, x, "Mixed_7a")
    for m in ("Mixed_7b", "Mixed_7c"):
        x = _inception_e(b, x, m)
    x = b.reduce_mean(x, (2, 3), name="avgpool")
    x = b.fc(x, classes, name="fc")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()
