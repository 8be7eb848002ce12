"""The ops of one experts layer (:class:`pase.frontends.torch_moe.Region`), as the zoo's
``moe_mlp`` (``graphs/moe.py``) builds them::

    TopK (b, l, x) -> MoEDispatch (x, b, c, e) -> gate (act), up, mul, down Einsums
    ``xbce,xef->xbcf`` / ``xbcf,xfe->xbce`` -> MoECombine (b, l, e)

The experts' weights are their parameters as torch stores them: Mixtral's fused
``gate_up_proj`` (x, 2f, e) is cut into its two halves (``chunk(2)``), one weight
of the gate Einsum and one of the up Einsum, so the parameter's elements are
counted once in all.
"""
from __future__ import annotations

import math
from typing import Any

from pase.frontends.torch_ir import AxisOf, Conflict, Pending, PortSpec
from pase.frontends.torch_moe import CAPACITY_FACTOR, CASTS, Region
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import ACT_PW, ModelImportError, Walk, module_path, source_line
from pase.frontends.torch_walk import target_name as _name


def capacity(seq: int, experts: int, k: int) -> int:
    """Slots per expert and sequence (the zoo's ``moe_mlp``)."""
    return min(seq, math.ceil(CAPACITY_FACTOR * k * seq / experts))


class _Ops:
    """Named ops of one layer, appended to the walk in order."""

    def __init__(self, walk: Walk, r: Region):
        self.walk, self.r = walk, r

    def add(self, name: str, kind: str, inputs: list, outputs: list, aten: list[str], *,
            module: str | None = None, weights: list | None = None, counted: bool = False,
            order: str = "einsum", **attrs: Any) -> Pending:
        w = self.walk
        p = Pending(w.unique(name), kind, inputs, outputs, weights or [],
                    attrs, order=order, counted=counted)
        p.aten = list(dict.fromkeys(aten))
        p.module = self.r.path if module is None else module
        w.ops.append(p)
        w.claim(p)
        return p


def emit_region(walk: Walk, r: Region) -> None:
    """Append the layer's ops to ``walk`` and set the value of its output node."""
    try:
        _emit(walk, r)
    except Conflict as exc:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(r.up)}: "
                               f"{exc}") from None


def _leaves(walk: Walk, tv: Any, what: str, last: str, r: Region) -> list[int]:
    """The (batch, sequence, ``last``) leaves of the tokens or the router's scores."""
    leaves = walk.atoms.leaf_list(tv.data) if isinstance(tv, TV) and tv.kind == "act" else []
    if len(leaves) != 3:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(r.up)}: its "
                               f"{what} must be a (batch, sequence, {last}) tensor, viewed as "
                               f"(tokens, {last})")
    return leaves


def _emit(walk: Walk, r: Region) -> None:
    atoms = walk.atoms
    tokens, probs = walk.values.get(r.tokens), walk.values.get(r.topk.args[0])
    b, l_, e = _leaves(walk, tokens, "tokens", "width", r)
    pb, pl, x = _leaves(walk, probs, "router's scores", "experts", r)
    if [atoms.find(pb), atoms.find(pl)] != [atoms.find(b), atoms.find(l_)]:
        why = ("give the example input a batch of at least 2 (a batch of 1 leaves the router's "
               "scores without a batch axis)" if 1 in (atoms.size[b], atoms.size[l_]) else
               "the router's tokens are not the experts' tokens")
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(r.up)}: {why}")
    k = int(r.topk.args[1])
    experts, seq = atoms.size[x], atoms.size[l_]
    atoms.set_role(x, "expert")
    c = atoms.new(capacity(seq, experts, k), "sequence")
    atoms.lock([b, l_, e, x, c])
    ops = _Ops(walk, r)
    block = r.path.rpartition(".")[0] if "." in r.path else r.path
    names = {section: [_name(n) for n in nodes] for section, nodes in _sections(r).items()}

    topk = ops.add(f"{block}.top_k", "TopK", [walk.port(probs)], [PortSpec(list(probs.data))],
                   names["topk"], module=module_path(r.topk)[0], order="input", k=k,
                   axis=AxisOf(x), normalize=r.normalize)
    topk.pinned.append(x)
    gates = PortSpec([b, l_, x], (topk, 0))
    tok = walk.port(tokens)
    tok.atoms = [b, l_, e]
    dispatch = ops.add(f"{r.path}.dispatch", "MoEDispatch", [tok, gates],
                       [PortSpec([x, b, c, e])], names["dispatch"], k=k)
    dispatch.pinned.append(c)
    dispatch.fixed = [(x, "x"), (b, "b"), (c, "c"), (e, "e"), (l_, "l")]
    walk.module_in.setdefault(r.path, (tokens, dispatch, tok))

    up_w = _weight(walk, r, r.up, x)   # (x, in, out) views of the parameter
    down_w = _weight(walk, r, r.down, x)
    buf = PortSpec([x, b, c, e], (dispatch, 0))
    ein, eout = up_w.view[1], up_w.view[2]
    halves = atoms.cut(eout, [2]) if r.gated else atoms.leaf_list(eout)  # (2, f): chunk(2)
    f = halves[-1] if r.gated else halves[0]
    if len(halves) != (2 if r.gated else 1) or len(atoms.leaf_list(ein)) != 1:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(r.up)}: its "
                               f"up weight {up_w.shape(atoms)} is not (experts, width, features)")
    atoms.set_role(f, "parameter")
    alias_e = [(p, q) for p, q in atoms.link(ein, [e]) if p != q]
    layout = [a for a in atoms.leaf_list(up_w.data) if not (r.gated and a == halves[0])]

    def expert(name, aten, **attrs):
        weight = PortSpec(list(layout), alias=list(alias_e), param=up_w.param)
        return ops.add(f"{r.path}.{name}", "Einsum", [buf], [PortSpec([x, b, c, f])], aten,
                       weights=[weight], counted=True, **attrs)

    act = {"pw": ACT_PW[r.act], "act": r.act}
    if r.gated:
        gate = expert("gate", names["up"] + [r.act], **act)
        up = expert("up", names["up"], pw=0)
        h = ops.add(f"{r.path}.mul", "Elementwise",
                    [PortSpec([x, b, c, f], (gate, 0)), PortSpec([x, b, c, f], (up, 0))],
                    [PortSpec([x, b, c, f])], names["mul"], order="input", fn="mul")
    else:
        h = expert("up", names["up"] + [r.act], **act)
    din, dout = down_w.view[1], down_w.view[2]
    if len(atoms.leaf_list(dout)) != 1 or atoms.size[atoms.leaf_list(dout)[0]] != atoms.size[e]:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(r.down)}: its "
                               f"down weight {down_w.shape(atoms)} is not (experts, features, "
                               f"width)")
    alias_f = [(p, q) for p, q in atoms.link(din, [f]) if p != q]
    out_e = atoms.leaf_list(dout)[0]
    down = ops.add(f"{r.path}.down", "Einsum", [PortSpec([x, b, c, f], (h, 0))],
                   [PortSpec([x, b, c, out_e])], names["down"], counted=True, pw=0,
                   weights=[PortSpec(atoms.leaf_list(down_w.data), alias=alias_f,
                                     param=down_w.param)])
    atoms.lock([out_e])
    combine = ops.add(f"{r.path}.combine", "MoECombine",
                      [PortSpec([x, b, c, out_e], (down, 0)), PortSpec([b, l_, x], (topk, 0))],
                      [PortSpec([b, l_, out_e])], names["combine"], k=k)
    combine.pinned.append(c)
    combine.fixed = [(b, "b"), (l_, "l"), (out_e, "e"), (x, "x"), (c, "c")]
    out = TV([[b, l_], [out_e]], [b, l_, out_e], "act", (combine, 0),
             extra={"node": r.output})
    walk.values[r.output] = out


def _sections(r: Region) -> dict[str, list]:
    """The layer's ATen nodes by the op that stands for them."""
    order = {n: i for i, n in enumerate(r.nodes)}
    up, down = order[r.up], order[r.down]
    out: dict[str, list] = {"topk": [r.topk] + r.chain, "dispatch": [], "up": [r.up], "mul": [],
                            "down": [r.down], "combine": []}
    skip = set(out["topk"]) | {r.up, r.down}
    for n in r.nodes:
        if n in skip or _name(n) in CASTS or all(a.op == "placeholder" for a in n.all_input_nodes):
            continue  # casts, and the weights' transposes (views of parameters)
        i = order[n]
        out["dispatch" if i < up else "mul" if i < down else "combine"].append(n)
    return out


_VIEWS = CASTS | {"transpose", "t", "permute"}


def _weight(walk: Walk, r: Region, mm: Any, x: int) -> TV:
    """The grouped product's weight ``(experts, in, out)``: a parameter seen through
    transposes; its expert axis becomes the layer's ``x``."""
    chain, node = [], mm.args[1]
    while node.op == "call_function" and _name(node) in _VIEWS:
        chain.append(node)
        node = node.args[0]
    tv = walk.values.get(node)
    if node.op != "placeholder" or not isinstance(tv, TV) or tv.kind != "param" or tv.rank != 3:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(mm)}: its "
                               f"weight is not a 3-D parameter seen through transposes")
    if tv.param in walk.owner:
        raise ModelImportError(f"cannot import the experts {r.path} at {source_line(mm)}: its "
                               f"weight {tv.param} is read by another op too")
    view = list(tv.view)
    for n in reversed(chain):
        name = _name(n)
        if name == "t" or name == "transpose":
            i, j = (0, 1) if name == "t" else (n.args[1] % 3, n.args[2] % 3)
            view[i], view[j] = view[j], view[i]
        elif name == "permute":
            view = [view[d % 3] for d in n.args[1]]
    walk.atoms.unify(view[0], [x])
    return tv.with_view(view)
