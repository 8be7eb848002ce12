"""Mixture-of-experts layers as transformers writes them, imported as the zoo's MoE ops.

transformers (5.x) runs a MoE block's experts as one function over all tokens
(``transformers/integrations/moe.py``, the ``grouped_mm`` path Mixtral takes): it
sorts the router's top-k expert ids (``sort``), gathers the tokens in expert order
(``index``), counts the tokens per expert (``histc``, ``cumsum``), multiplies each
expert's rows by its weights (``grouped_mm_fallback`` / ``_grouped_mm``), scales
them by the gates and scatters them back (``index_put_``, ``index``, ``sum``). None
of these ops means anything alone; together they are the zoo's MoE layer
(``graphs/moe.py``)::

    TopK -> MoEDispatch -> Einsums over the expert dim x -> MoECombine

The walk driver calls two hooks: :func:`find_moe` before the walk (which nodes
form such a layer, and which ops inside it the pattern does not know, listed up
front with the other unsupported ops), and :meth:`MoE.run` for each node of a
layer (the layer's ops are emitted at its last node).

Capacity: transformers' experts drop no token, and each routed token costs its
expert's products once (``tokens * k`` rows). The zoo's buffers hold
``c = ceil(capacity_factor * k * l / x)`` slots per expert and sequence;
with :data:`CAPACITY_FACTOR` 1 that is the balanced load, ``x * c = k * l`` when
``x`` divides ``k * l``, so the experts' FLOP equal torch's per-token count exactly
(and exceed it by the rounding up of ``c`` otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pase.frontends.torch_walk import ModelImportError, Walk, module_path, source_line, target_name

__all__ = ["CAPACITY_FACTOR", "MoE", "Region", "find_moe"]

CAPACITY_FACTOR = 1.0  # the zoo's Mixtral's: buffers of the balanced load

GROUPED_MM = {"grouped_mm_fallback", "_grouped_mm", "grouped_mm"}
ACTS = {"silu": "silu", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
CASTS = {"to", "_to_copy", "_assert_tensor_metadata", "clone", "contiguous", "alias", "detach"}
# The experts' own bookkeeping: sorting, gathers, counts, scatters, views (meaningless alone).
ROUTING = CASTS | GROUPED_MM | set(ACTS) | {
    "sort", "floor_divide", "index", "histc", "cumsum", "empty_like", "arange", "index_put_",
    "index_put", "unsqueeze", "view", "reshape", "_unsafe_view", "sum", "mul", "transpose", "t",
    "permute", "chunk", "getitem", "zeros_like", "zeros"}
# Between the router's topk and the experts: the gates' renormalisation, casts and views.
GATE_CHAIN = CASTS | {"getitem", "sum", "div", "div_", "view", "reshape", "type_as"}


@dataclass
class Region:
    """One experts layer: its nodes (the router's topk on) and the parts emission reads."""

    path: str
    nodes: list = field(default_factory=list)  # in graph order
    unknown: list = field(default_factory=list)  # nodes of ops the pattern does not know
    problem: str | None = None
    topk: Any = None
    chain: list = field(default_factory=list)  # topk's outputs up to the experts
    tokens: Any = None
    output: Any = None
    up: Any = None
    down: Any = None
    act: str = ""
    gated: bool = False
    normalize: bool = False

    def fail(self, why: str) -> None:
        self.problem = self.problem or why


def _inside(node: Any, path: str) -> bool:
    p = module_path(node)[0]
    return path == "" or p == path or p.startswith(path + ".")


def _through(node: Any, ops: set[str]) -> Any:
    """``node``'s first tensor argument followed back through ops in ``ops``."""
    while node.op == "call_function" and target_name(node) in ops:
        node = node.args[0]
    return node


def find_moe(nodes: list, unsupported: str = "error") -> "MoE":
    """The experts layers among the exported program's ``call_function`` ``nodes``.

    A layer is every node run inside a module that calls a grouped product, with the
    router's ``topk`` and what lies between it and the experts. With ``unsupported``
    ``"elementwise"`` a layer that cannot be imported whole is left to the walk.
    """
    paths = list(dict.fromkeys(module_path(n)[0] for n in nodes if target_name(n) in GROUPED_MM))
    regions = [_region(nodes, path) for path in paths]
    if unsupported != "error":
        regions = [r for r in regions if not r.unknown and r.problem is None]
    return MoE(regions)


def _region(nodes: list, path: str) -> Region:
    inner = [n for n in nodes if _inside(n, path)]
    r = Region(path, list(inner))
    members = set(inner)
    r.unknown = [n for n in inner if target_name(n) not in ROUTING]
    outside = list(dict.fromkeys(a for n in inner for a in n.all_input_nodes if a not in members))
    tokens = []
    for a in outside:
        if a.op != "call_function":
            continue
        found = _trace(a)
        if found is None:
            tokens.append(a)
        else:
            r.chain = list(dict.fromkeys(r.chain + found))
    tops = [n for n in r.chain if target_name(n) == "topk"]
    if len(tops) != 1 or len(tokens) != 1:
        r.fail(f"expected the tokens and one router topk as inputs, found {len(tokens)} other "
               f"input(s) and {len(tops)} topk(s)")
        return r
    r.topk, r.tokens = tops[0], tokens[0]
    r.chain = [n for n in nodes if n in set(r.chain) and n is not r.topk]
    # Mixtral renormalises the kept gates: values / values.sum(-1) (Switch, OLMoE do not)
    r.normalize = any(target_name(n) in ("div", "div_") and len(n.args) > 1
                      and hasattr(n.args[1], "op") and target_name(_through(n.args[1], CASTS))
                      == "sum" for n in r.chain)
    taken = members | {r.topk} | set(r.chain)
    # dtype checks torch.export adds on the gates outside the experts: no-ops, taken in
    taken |= {u for n in taken for u in n.users if target_name(u) == "_assert_tensor_metadata"}
    r.nodes = [n for n in nodes if n in taken]
    _check_outputs(r)
    _check_products(r, inner)
    return r


def _trace(node: Any) -> list | None:
    """The nodes from a ``topk`` to ``node`` when ``node`` derives from one through
    :data:`GATE_CHAIN` ops only, else None."""
    if node.op != "call_function":
        return None
    name = target_name(node)
    if name == "topk":
        return [node]
    if name not in GATE_CHAIN or not node.all_input_nodes:
        return None
    out = [node]
    for arg in node.all_input_nodes:
        found = _trace(arg)
        if found is None:
            return None
        out += found
    return out


def _check_outputs(r: Region) -> None:
    inside = set(r.nodes)
    leaving = [n for n in r.nodes if any(u not in inside for u in n.users)]
    if len(leaving) != 1:
        r.fail(f"expected one output, found {len(leaving)} values used outside")
        return
    r.output = leaving[0]
    shape = tuple(getattr(r.output.meta.get("val"), "shape", ()))
    if shape != tuple(r.tokens.meta["val"].shape):
        r.fail(f"its output {tuple(shape)} is not of the tokens' shape "
               f"{tuple(r.tokens.meta['val'].shape)}")


def _check_products(r: Region, inner: list) -> None:
    """The experts' products must be ``up -> act [* up] -> down``."""
    mms = [n for n in inner if target_name(n) in GROUPED_MM]
    if len(mms) != 2:
        r.fail(f"expected two grouped products (up, down), found {len(mms)}")
        return
    r.up, r.down = mms
    h = _through(r.down.args[0], CASTS)
    if target_name(h) in ACTS and _through(h.args[0], CASTS) is r.up:
        r.act = ACTS[target_name(h)]
        return
    if target_name(h) == "mul" and len(h.args) == 2:
        a, b = (_through(x, CASTS) for x in h.args)
        if target_name(b) in ACTS:
            a, b = b, a
        halves = [_through(a.args[0], CASTS) if target_name(a) in ACTS else None, b]
        if all(x is not None and target_name(x) == "getitem" for x in halves):
            chunk = halves[0].args[0]
            if (chunk is halves[1].args[0] and target_name(chunk) == "chunk"
                    and [halves[0].args[1], halves[1].args[1]] == [0, 1]
                    and chunk.args[1] == 2 and chunk.args[2] in (-1, 1)
                    and _through(chunk.args[0], CASTS) is r.up):
                r.act, r.gated = ACTS[target_name(a)], True
                return
    r.fail("its products are not up -> activation [* up] -> down")


class MoE:
    """The experts layers of one import: which nodes they hold, and their emission."""

    def __init__(self, regions: list[Region]):
        self.regions = regions
        self.of = {n: r for r in regions for n in r.nodes}
        self.unknown = {n for r in regions for n in r.unknown}

    def __contains__(self, node: Any) -> bool:
        return node in self.of

    def where(self, node: Any) -> str:
        """Where an unknown op sits, for the up-front listing."""
        r = self.of.get(node)
        return f" (in the experts {r.path})" if r is not None else ""

    def check(self) -> None:
        for r in self.regions:
            if r.problem:
                raise ModelImportError(f"cannot import the experts {r.path} at "
                                       f"{source_line(r.up or r.nodes[0])} as a mixture of "
                                       f"experts: {r.problem}")

    def run(self, walk: Walk, node: Any, emit: Any) -> Any:
        """The value of ``node``: ``emit(walk, region)`` (torch_moe_emit's) makes the
        layer's ops at its last node."""
        r = self.of[node]
        if node is r.nodes[-1]:
            emit(walk, r)
        return walk.values.get(node)
