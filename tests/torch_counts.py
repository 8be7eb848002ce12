"""The one check of an imported PyTorch module against torch's own counts, shared by the
importer's pattern tests: parameters equal the module's unique ``numel()`` sum, the
matrix-product FLOP (of the ops torch counts, and of the whole graph as ``pase inspect``
totals them) equal ``FlopCounterMode``'s, and the graph solves."""
import pytest

import pase
from pase.counts import counts
from pase.frontends.torch import import_torch


def check_import(model, *args):
    from torch.utils.flop_counter import FlopCounterMode

    imp = import_torch(model, args)
    unique = sum({id(p): p.numel() for p in model.parameters()}.values())
    assert pase.counts.parameters(imp.graph) == unique
    with FlopCounterMode(display=False) as counter:
        model(*args)
    theirs = counter.get_total_flops()
    whole = counts(imp.graph)
    by_op = whole.by_op()
    ours = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert whole.matmul_flops == pytest.approx(theirs, rel=1e-12)
    assert pase.solve(imp.graph, devices=8, cost_model="alpha-beta").solution.status.value == \
        "optimal"
    return imp
