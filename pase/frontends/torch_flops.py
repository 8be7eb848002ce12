"""The import's FLOP check: each product's FLOP against torch's own count.

After the walk, every FX node that computes a product (a linear, matmul, convolution,
attention...) is run once more on its fake values (shapes only, no data) under
``torch.utils.flop_counter.FlopCounterMode``, with attention on its math backend as
FlopCounterMode counts it. The matrix-product FLOP of the IR ops the importer made from
that node (2 per multiply-add, ``pase.counts``) must equal torch's count within 1%. A
mismatch is an import error that names the op: a graph whose products are priced
wrong is never returned as a success. Products of constants only (a rotary table's
``inv_freq @ positions``) make no IR op and have no gradient: they are left out.
"""
from __future__ import annotations

from typing import Any

from pase.frontends.torch_walk import ModelImportError, source_line, target_name

__all__ = ["TOLERANCE", "check_flops", "node_flops"]

TOLERANCE = 0.01

# ATen ops whose names say they may multiply matrices; every other op counts 0 in torch.
_PRODUCT_WORDS = ("linear", "mm", "matmul", "conv", "attention", "einsum", "bilinear", "mv",
                  "dot", "outer", "ger", "tensordot")


def _fake(value: Any) -> Any:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return value.meta.get("val")
    if isinstance(value, (list, tuple)):
        return type(value)(_fake(v) for v in value)
    if isinstance(value, dict):
        return {k: _fake(v) for k, v in value.items()}
    return value


def node_flops(node: Any) -> float:
    """FlopCounterMode's count of one FX node, run on its inputs' fake values."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    name = target_name(node)
    if not any(word in name for word in _PRODUCT_WORDS):
        return 0.0
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        node.target(*_fake(node.args), **_fake(node.kwargs))
    return float(counter.get_total_flops())


def check_flops(imported: Any, walk: Any) -> None:
    """Raise :class:`ModelImportError` where an FX node's product FLOP differ from the
    IR ops the walk made from it. Nodes the walk approximated are left out (they warn)."""
    from pase.counts import counts
    from pase.frontends.torch_values import TV

    pending = [p for p in walk.ops if not p.dead]

    by_op = counts(imported.graph).by_op()
    ours: dict[Any, float] = {}
    names: dict[Any, list[str]] = {}
    for p in pending:
        if p.counted and p.node is not None:
            ours[p.node] = ours.get(p.node, 0.0) + by_op[p.name].matmul_flops
            names.setdefault(p.node, []).append(p.name)
    nodes = {p.node for p in pending if p.node is not None}
    nodes |= {n for n, v in walk.values.items() if isinstance(v, TV) and v.kind == "act"
              and getattr(n, "op", None) == "call_function"}
    for node in sorted(nodes, key=lambda n: n.name):
        if node in walk.approximated_nodes:
            continue
        theirs = node_flops(node)
        mine = ours.get(node, 0.0)
        if abs(mine - theirs) <= TOLERANCE * max(theirs, mine):
            continue
        ops = ", ".join(repr(n) for n in names.get(node, [])) or "no op"
        ratio = f"{mine / theirs:.4g}x torch's" if theirs else "torch counts 0"
        raise ModelImportError(
            f"matrix-product FLOP of aten.{target_name(node)} at {source_line(node)} are "
            f"{mine:.4g} in pase ({ops}) and {theirs:.4g} in torch's FlopCounterMode "
            f"({ratio}): pase imported this op wrong; please report it")
