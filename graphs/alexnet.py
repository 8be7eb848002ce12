"""AlexNet as modelled in the PaSE paper (14 ops, 13 edges at batch 128)."""
from __future__ import annotations

from pase.builder import GraphBuilder, check_model_options
from pase.ir import Graph
from pase.registry import MODELS


@MODELS.register("alexnet", "AlexNet (Krizhevsky 2012), the paper's CNN benchmark")
def alexnet(batch: int = 128, classes: int = 1024) -> Graph:
    check_model_options("alexnet", batch=batch, classes=classes)
    b = GraphBuilder("alexnet", cutoff=4, batch=batch)
    x = b.input((batch, 3, 227, 227))
    x = b.conv(x, (96, 3, 11, 11), stride=4, pw=1, name="conv1")
    x = b.pool(x, 3, 2, name="pool1")
    x = b.conv(x, (256, 96, 5, 5), pad=2, pw=1, name="conv2")
    x = b.pool(x, 3, 2, name="pool2")
    x = b.conv(x, (384, 256, 3, 3), pad=1, pw=1, name="conv3")
    x = b.conv(x, (384, 384, 3, 3), pad=1, pw=1, name="conv4")
    x = b.conv(x, (256, 384, 3, 3), pad=1, pw=1, name="conv5")
    x = b.pool(x, 3, 2, name="pool5")
    x = b.reshape(x, (batch, x.shape[1] * x.shape[2] * x.shape[3]), names=("b", "k"),
                  name="flatten")
    x = b.fc(x, 4096, pw=1, name="fc6")
    x = b.fc(x, 4096, pw=1, name="fc7")
    x = b.fc(x, classes, name="fc8")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()
