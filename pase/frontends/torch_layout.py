"""Views, products and broadcasts: the general rules every ATen handler leans on.

- :func:`reshape` turns a view into another by cutting atoms (free) or, where
  an atom cannot be cut, by a Ravel + Unravel pair (the IR's reshape);
- :func:`contract` is every product (linear, matmul, bmm, einsum, attention):
  an einsum over torch axes becomes an Einsum over atoms;
- :func:`binary` is every element-wise op of two tensors, broadcast or not.
"""
from __future__ import annotations

import math
from typing import Any

from pase.frontends.torch_ir import Conflict, Pending, PortSpec
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import Walk


def out_tv(w: Walk, view: list[list[int]], data: list[int], op: Pending, index: int = 0,
           integer: bool = False) -> TV:
    return TV(view, data, "act", (op, index), integer=integer, extra={"node": w.node})


# -- views -----------------------------------------------------------------------------

def reshape(w: Walk, tv: TV, shape: tuple[int, ...]) -> TV:
    """``tv`` viewed with ``shape`` (same number of elements)."""
    atoms = w.atoms
    flat = [a for axis in tv.view for a in axis]
    bounds, p = [], 1
    for s in shape:
        p *= s
        bounds.append(p)
    try:
        leaves = atoms.cut(flat, [b for b in bounds if b > 1]) if flat else []
    except Conflict:
        return ravel_unravel(w, tv, shape)
    leaves = [x for x in leaves if atoms.size[x] > 1]
    view, i = [], 0
    for s in shape:
        if s == 1:
            view.append([atoms.new(1)])
            continue
        axis, prod = [], 1
        while prod < s and i < len(leaves):
            axis.append(leaves[i])
            prod *= atoms.size[leaves[i]]
            i += 1
        if prod != s:
            return ravel_unravel(w, tv, shape)
        view.append(axis)
    return tv.with_view(view)


def ravel_unravel(w: Walk, tv: TV, shape: tuple[int, ...]) -> TV:
    """A real reshape: the IR's Ravel (to 1-D) and Unravel (to ``shape``)."""
    if tv.kind != "act":
        return tv.with_view(w.fresh(shape), data=[], kind="const")
    atoms = w.atoms
    n = math.prod(atoms.size[x] for x in tv.leaves(atoms))
    flat = atoms.new(n)
    ravel = w.add("Ravel", [w.port(tv)], [PortSpec([flat])], order="input", suffix=".ravel")
    ravel.contiguous = True
    view = w.fresh(shape)
    for src, dst in zip(tv.view, view):  # an axis kept whole keeps its role
        if len(src) == 1 and atoms.size[src[0]] == atoms.size[dst[0]]:
            atoms.set_role(dst[0], atoms.role[atoms.leaves(src[0])[0]])
    data = [a[0] for a in view]
    unravel = w.add("Unravel", [PortSpec([flat], (ravel, 0))], [PortSpec(list(data))],
                    order="output")
    unravel.contiguous = True
    w.relayouts.append(f"{w.node.name}: a reshape the IR cannot follow became Ravel + Unravel")
    return out_tv(w, view, data, unravel)


def materialize(w: Walk, tv: TV, reason: str) -> TV:
    """``tv`` as a new tensor whose layout is its view, one atom per axis."""
    shape = tv.shape(w.atoms)
    out = ravel_unravel(w, tv, shape)
    w.relayouts[-1] = f"{w.node.name}: {reason}"
    return out


def permute(tv: TV, order: list[int]) -> TV:
    return tv.with_view([tv.view[i] for i in order])


# -- products --------------------------------------------------------------------------

def contract(w: Walk, a: TV, b: TV, eq: str, *, kind: str = "Einsum",
             bias: TV | None = None, counted: bool = True, suffix: str = "",
             attrs: dict[str, Any] | None = None) -> TV:
    """The einsum ``eq`` over the torch axes of ``a`` and ``b`` as an IR op."""
    atoms = w.atoms
    lhs, out_letters = eq.replace(" ", "").split("->")
    la, lb = lhs.split(",")
    if "..." in eq:
        raise Conflict(f"ellipsis einsums are not supported ({eq})")
    if "const" in (a.kind, b.kind) and "act" not in (a.kind, b.kind):  # no activation
        view = [(a.view[la.index(c)] if c in la else b.view[lb.index(c)]) for c in out_letters]
        return TV(view, [], "const")
    # A product of parameters (DeBERTa's projection of its relative-position table) is
    # computed and trained like any other: an op whose operands are both weights. A
    # constant operand of an activation's product (a buffer) is read as an input no op
    # makes: no gradient, no parameter, but the FLOP and the operand's bytes are the op's.
    a, b = _read_constant(w, a), _read_constant(w, b)
    a, b = _whole_where_locked(w, a, b, la, lb), _whole_where_locked(w, b, a, lb, la)
    va = dict(zip(la, a.view))
    vb = dict(zip(lb, b.view))
    alias_b: list[tuple[int, int]] = []
    alias_a: list[tuple[int, int]] = []
    ones: dict[str, list[int]] = {}  # per broadcast letter, the size-1 side's atoms
    for c in dict.fromkeys(la):
        if c not in lb:
            continue
        sa = math.prod(atoms.size[x] for x in va[c])
        sb = math.prod(atoms.size[x] for x in vb[c])
        if sa != sb and 1 in (sa, sb):
            ones[c] = atoms.leaf_list(va[c] if sa == 1 else vb[c])
            continue  # broadcast
        if c in out_letters and not crossed(atoms, a.view, la.index(c), b.view, lb.index(c)):
            atoms.unify(va[c], vb[c])
        else:  # contracted, or met crossed: linked, b's atoms read as a's by this op
            for x, y in atoms.link(va[c], vb[c]):
                if x != y:
                    alias_b.append((y, x))
    out_view = []
    seen: set[int] = set()
    for c in out_letters:
        side = va if c in va and not (c in vb and _one(atoms, va[c])) else vb
        axis = side[c]
        leaves = atoms.leaf_list(axis)
        if seen & set(leaves):  # the same atom twice (keys of self-attention)
            fresh = [atoms.new(atoms.size[x], atoms.role[x]) for x in leaves]
            for x, y in atoms.link(leaves, fresh):
                (alias_b if side is vb else alias_a).append((x, y))
            leaves = fresh
        seen |= set(leaves)
        out_view.append(leaves)
    pa = PortSpec(list(a.data), a.source, alias_a, a.param, user=_user(a))
    pb = PortSpec(list(b.data), b.source, alias_b, b.param, user=_user(b))
    mapped = set()
    for spec in (pa, pb):
        amap = {}
        for src, dst in spec.alias:
            amap.update(zip(atoms.leaves(src), atoms.leaves(dst)))
        mapped |= {amap.get(x, x) for x in atoms.leaf_list(spec.atoms)}
    # A broadcast size-1 atom (Falcon's one key head) sits by its letter's axis, so the
    # output keeps the order of its axes (a causal softmax's queries then keys, last).
    out_data = [x for c, axis in zip(out_letters, out_view)
                for x in [q for q in ones.get(c, []) if q not in axis] + axis if x in mapped]
    # An axis of one operand that torch's view dropped (a size-1 axis) stays in the output.
    in_both = _in_both(atoms, pa, pb)
    out_data += [x for x in sorted(mapped - set(out_data)) if x not in in_both]
    inputs, weights, tie = [], [], None
    for spec, tv in ((pa, a), (pb, b)):
        if tv.kind == "act" and (tv.source is not None or tv.extra.get("constant")):
            inputs.append(spec)
            continue
        if tv.kind == "param" and tv.param is not None:
            tie = _tie(w, spec, tie)
        else:
            spec.param = None
        weights.append(spec)
    op_attrs = dict(attrs or {})
    if bias is not None and bias.kind == "param":
        atoms.unify(bias.view[-1], out_view[-1])
        # A bias another op holds already (ALBERT's layers share theirs) is left out here:
        # a tie names only a first weight, so it would be counted twice.
        port, _ = w.weight_port(bias, "Elementwise")
        if port is not None:
            weights.append(port)
            op_attrs["bias"] = True
    if tie is not None:
        op_attrs["tied"] = tie
        weights.sort(key=lambda s: 0 if s.param and w.owner.get(s.param) else 1)
    op = w.add(kind, inputs, [PortSpec(out_data)], weights=weights, counted=counted,
               suffix=suffix, pw=0, **op_attrs)
    w.claim(op)
    return out_tv(w, out_view, out_data, op)


def crossed(atoms, xv: list[list[int]], i: int, yv: list[list[int]], j: int) -> bool:
    """Whether axis ``i`` of view ``xv`` and axis ``j`` of ``yv``, met as one axis, hold
    atoms the other tensor has on another axis: ``c2p + p2c.transpose(-1, -2)`` in
    DeBERTa, where both scores' query and key axes are the one sequence atom. Made one,
    the sum would read that atom twice; the op reads one operand's atoms as the other's."""
    mine, theirs = set(atoms.leaf_list(xv[i])), set(atoms.leaf_list(yv[j]))
    if mine == theirs:
        return False
    x_rest = {q for k, axis in enumerate(xv) if k != i for q in atoms.leaf_list(axis)}
    y_rest = {q for k, axis in enumerate(yv) if k != j for q in atoms.leaf_list(axis)}
    return bool(theirs & x_rest or mine & y_rest)


def _read_constant(w: Walk, tv: TV) -> TV:
    """A constant operand of a product as a tensor the op reads: its view's atoms become
    its data, and it is an input with no producer (never a weight: a weight is trained)."""
    if tv.kind != "const":
        return tv
    leaves = w.atoms.leaf_list([q for axis in tv.view for q in axis])
    return tv.with_view(list(tv.view), data=leaves, kind="act", source=None,
                        extra={"constant": True})


def _whole_where_locked(w: Walk, x: TV, other: TV, lx: str, lo: str) -> TV:
    """``x`` re-laid out when an axis it shares with ``other`` (the same einsum letter)
    is several atoms where ``other`` has one locked atom that cannot be cut to match (a
    Swin window's 7 x 7 tokens against a softmax's 49, its 8 x 7 rows against a rolled
    56)."""
    atoms = w.atoms
    if x.kind != "act":
        return x
    for c, axis in zip(lx, x.view):
        if c not in lo:
            continue
        mine, theirs = atoms.leaf_list(axis), atoms.leaf_list(other.view[lo.index(c)])
        if len(mine) > 1 and len(theirs) == 1 and atoms.locked[theirs[0]] and \
                math.prod(atoms.size[q] for q in mine) == atoms.size[theirs[0]]:
            return materialize(w, x, "an operand cut otherwise than a locked axis it meets "
                                     "was re-laid out")
    return x


def _user(tv: TV) -> int | None:
    return tv.extra.get("input") if tv.kind == "act" and tv.source is None else None


def _one(atoms, axis: list[int]) -> bool:
    return math.prod(atoms.size[x] for x in axis) == 1


def _in_both(atoms, pa: PortSpec, pb: PortSpec) -> set[int]:
    def dims(spec):
        amap = {}
        for src, dst in spec.alias:
            amap.update(zip(atoms.leaves(src), atoms.leaves(dst)))
        return {amap.get(x, x) for x in atoms.leaf_list(spec.atoms)}
    return dims(pa) & dims(pb)


def _tie(w: Walk, spec: PortSpec, tie: str | None) -> str | None:
    """The op to tie to when parameter ``spec.param`` is already held by another op (its
    first parameter: a shared embedding table); else ``tie`` unchanged."""
    owner = w.owner.get(spec.param or "")
    if owner is None or owner.dead:
        return tie
    first = next((s.param for s in owner.weights if s.param is not None), None)
    if tie is None and first == spec.param:
        return owner.name
    w.approximate(f"{w.node.name}: parameter {spec.param} is read again where it cannot be "
                  f"tied, so it is counted twice")
    return tie


# -- element-wise ----------------------------------------------------------------------

def unary(w: Walk, x: TV, weight: float, *, act: str | None = None) -> TV:
    """An element-wise function of one tensor, ``weight`` FLOP per element in all (forward
    and backward, the IR's Elementwise convention). An activation (``act``) folds into the
    product before it as that product's ``act`` (``pw``: its forward FLOP per element); any
    other folds into the element-wise op before it; else it is an Elementwise op."""
    from pase.frontends.torch_walk import ACT_PW

    if x.kind != "act":
        return x
    gemm = w.fusable(x, ("Einsum",)) if act else None
    if gemm is not None and not gemm.attrs.get("act") and not gemm.attrs.get("pw"):
        gemm.attrs.update(pw=ACT_PW[act], act=act)
        gemm.aten.append(act)
        return x.with_view(list(x.view), extra={"node": w.node})
    prev = w.fusable(x, ("Elementwise",))
    if prev is not None and prev.attrs.get("fn", "add") == "add" and not prev.weights:
        prev.attrs["pw"] = prev.attrs.get("pw", 0) + weight
        return x.with_view(list(x.view), extra={"node": w.node})
    op = w.add("Elementwise", [w.port(x)], [PortSpec(list(x.data))], order="input",
               pw=max(weight - 1, 0))
    return out_tv(w, list(x.view), list(x.data), op)


def binary(w: Walk, x: Any, y: Any, fn: str) -> TV:
    """``x fn y`` (add, sub, mul, div) with numpy broadcasting."""
    xt, yt = isinstance(x, TV), isinstance(y, TV)
    if not xt or (yt and x.kind != "act" and y.kind == "act"):
        x, y, xt, yt = y, x, yt, xt
    if not xt:
        raise Conflict("no tensor operand")
    if not yt or y.kind == "const" or (y.kind == "param" and x.kind == "const"):
        if x.kind != "act":
            return x
        return unary(w, x, 1)
    if x.kind != "act":  # parameters only
        return x.with_view(list(x.view), kind="const", data=[])
    atoms = w.atoms
    letters = _letters(max(x.rank, y.rank))
    lx, ly = letters[len(letters) - x.rank:], letters[len(letters) - y.rank:]
    x, y = _whole_where_locked(w, x, y, lx, ly), _whole_where_locked(w, y, x, ly, lx)
    view = _broadcast(w, x, y)
    same = x.leaves(atoms) == y.leaves(atoms)
    if y.kind == "act" and same:
        op = w.add("Elementwise", [w.port(x), w.port(y)], [PortSpec(list(x.data))],
                   order="input", fn="add" if fn in ("add", "sub") else "mul")
        return out_tv(w, view, list(x.data), op)
    if y.kind == "param" and fn in ("add", "sub"):
        raw = _trailing(w, x, y)
        if raw is not None:
            port, _ = w.weight_port(y, "Elementwise")
            weights = [] if port is None else [PortSpec(port.atoms, param=y.param, raw=raw)]
            op = w.add("Elementwise", [w.port(x)], [PortSpec(list(x.data))], weights=weights,
                       order="input", fn="add")
            w.claim(op)
            return out_tv(w, view, list(x.data), op)
    letters = _letters(len(view))
    off = len(view)
    eq_x = letters[off - x.rank:]
    eq_y = letters[off - y.rank:]
    out = contract(w, x, y, f"{eq_x},{eq_y}->{letters}", counted=False)
    return out


def _letters(n: int) -> str:
    import string
    return string.ascii_letters[:n]


def _broadcast(w: Walk, x: TV, y: TV) -> list[list[int]]:
    atoms = w.atoms
    rank = max(x.rank, y.rank)
    xv = [[]] * (rank - x.rank) + x.view
    yv = [[]] * (rank - y.rank) + y.view
    view = []
    for ax, ay in zip(xv, yv):
        sx = math.prod(atoms.size[a] for a in ax)
        sy = math.prod(atoms.size[a] for a in ay)
        if sx == sy and ax and ay:
            if not crossed(atoms, xv, len(view), yv, len(view)):  # else: contract aliases
                atoms.unify(ax, ay)
            view.append(ax)
        else:
            view.append(ax if sx >= sy and ax else ay)
    return view


def _trailing(w: Walk, x: TV, y: TV) -> list[tuple[int, int | None]] | None:
    """A parameter ``y`` as an Elementwise weight over op dims ``x``'s layout: one axis per
    op dim, the dim where ``y`` holds its atom, else extent 1 (broadcast). Atoms of ``y``
    that are no dim of the op (the rows of a table read at constant indices: positions
    fewer than the table's rows, token types, T5's buckets) are one unmapped axis in the
    last free place, so the weight holds the whole table and its count stays exact.
    Leading broadcast axes are dropped. None when the rows have no free place."""
    atoms = w.atoms
    dims = x.leaves(atoms)
    own = y.leaves(atoms)
    roots = {atoms.find(d): d for d in dims}
    rows = math.prod(atoms.size[q] for q in own if atoms.find(q) not in roots)
    held = {atoms.find(q) for q in own}
    raw: list[tuple[int, int | None]] = [
        (atoms.size[d], d) if atoms.find(d) in held else (1, None) for d in dims]
    if rows > 1:
        free = [i for i, (_, d) in enumerate(raw) if d is None]
        if not free:
            return None
        raw[free[-1]] = (rows, None)
    while raw and raw[0] == (1, None):
        raw.pop(0)
    return raw
