"""Small graph families for tests and teaching: chain, diamond, fork-join, MLP, random DAGs."""
from __future__ import annotations

import numpy as np

from pase.builder import GraphBuilder, Value, check_model_options
from pase.errors import OptionError
from pase.ir import Graph
from pase.registry import MODELS


@MODELS.register("mlp", "a small multi-layer perceptron (teaching)")
def mlp(batch: int = 64, width: int = 1024, layers: int = 3, classes: int = 10) -> Graph:
    check_model_options("mlp", batch=batch, width=width, layers=layers, classes=classes)
    b = GraphBuilder("mlp", cutoff=4, batch=batch)
    x = b.input((batch, width), names=("b", "k"))
    for i in range(layers):
        x = b.fc(x, width, pw=1, name=f"fc{i + 1}")
    x = b.fc(x, classes, name="classifier")
    b.softmax_cross_entropy(x, name="loss")
    return b.build()


@MODELS.register("chain", "a chain of FC layers of alternating widths (tests)")
def chain(length: int = 4, batch: int = 32, width: int = 64) -> Graph:
    check_model_options("chain", length=length, batch=batch, width=width)
    b = GraphBuilder("chain", cutoff=4, batch=batch)
    x = b.input((batch, width), names=("b", "k"))
    for i in range(length):
        x = b.fc(x, width * (2 if i % 2 == 0 else 1), name=f"fc{i + 1}")
    return b.build()


@MODELS.register("diamond", "FC -> two parallel FCs -> add (tests)")
def diamond(batch: int = 32, width: int = 64) -> Graph:
    check_model_options("diamond", batch=batch, width=width)
    b = GraphBuilder("diamond", cutoff=4, batch=batch)
    x = b.fc(b.input((batch, width), names=("b", "k")), width, name="split")
    left = b.fc(x, width, name="left")
    right = b.fc(x, width, name="right")
    b.elementwise(left, right, name="join")
    return b.build()


@MODELS.register("fork-join", "FC -> several parallel FC branches -> concat -> FC (tests)")
def fork_join(branches: int = 3, batch: int = 32, width: int = 64) -> Graph:
    check_model_options("fork-join", branches=branches, batch=batch, width=width)
    b = GraphBuilder("fork-join", cutoff=4, batch=batch)
    x = b.fc(b.input((batch, width), names=("b", "k")), width, name="fork")
    outs = [b.fc(x, width, name=f"branch{i + 1}") for i in range(branches)]
    y = b.concat(outs, axis=1, name="join") if branches > 1 else outs[0]
    b.fc(y, width, name="head")
    return b.build()


@MODELS.register("random", "a seeded random DAG of FC/elementwise ops (tests)")
def random_dag(size: int = 8, seed: int = 0, batch: int = 32, width: int = 64) -> Graph:
    """``size`` ops; each reads one or two earlier ops, so the graph is connected."""
    check_model_options("random", size=size, batch=batch, width=width)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise OptionError(f"model 'random' option seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random-{size}-{seed}", cutoff=4, batch=batch)
    values: list[Value] = [b.fc(b.input((batch, width), names=("b", "k")), width, name="op0")]
    for i in range(1, size):
        x = values[int(rng.integers(0, i))]
        if i >= 2 and rng.random() < 0.4:
            y = values[int(rng.integers(0, i))]
            if y.source != x.source:
                values.append(b.elementwise(x, y, name=f"op{i}"))
                continue
        values.append(b.fc(x, width, name=f"op{i}"))
    return b.build()
