"""ATen handlers of indexing, padding and the small ops around them: ``index``,
``index_select``, ``gather``, ``scatter``, ``embedding_bag``, ``pad``, ``roll``,
``cumsum`` and ``fill_``.

Each maps onto existing IR kinds (docs/ops.md):

- a parameter indexed by constants (Swin's relative-position bias, Whisper's positions)
  is the whole table: its consumer (an add) holds it as an Elementwise weight whose row
  axis maps to no dim (``torch_layout._trailing``), so the parameter count stays exact;
- an activation indexed along one axis is a selection of k of its n entries: a Slice
  (k < n), an Elementwise with that axis pinned (k = n: a permutation), a Concat of
  copies (k > n); a scatter into zeros is the reverse, a pad;
- a pad is a Concat of the input with Slices of itself (the entries a circular pad
  copies; a constant pad moves as many);
- ``roll`` and ``cumsum`` are Elementwise ops pinning the axes they run along.
"""
from __future__ import annotations

import math
from typing import Any

from pase.frontends.torch_handlers import (
    as_list,
    constant,
    handles,
    integral,
    node_shape,
    wrap_dim,
)
from pase.frontends.torch_ir import AxisOf, Conflict, PortSpec
from pase.frontends.torch_layout import (
    binary,
    materialize,
    out_tv,
    reshape,
    unary,
)
from pase.frontends.torch_ops_math import _embedding
from pase.frontends.torch_ops_shape import _slice_tv
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import Walk, target_name


def _size(w: Walk, x: TV, dim: int) -> int:
    return math.prod(w.atoms.size[a] for a in x.view[dim])


def _one_leaf(w: Walk, x: TV, dim: int, what: str) -> TV:
    if len(w.atoms.leaf_list(x.view[dim])) != 1:
        return materialize(w, x, f"{what} along a merged axis was re-laid out")
    return x


# -- building blocks ---------------------------------------------------------------------

def pinned_elementwise(w: Walk, x: TV, dims: list[int]) -> TV:
    """An element-wise op of ``x`` (1 FLOP per element) that moves entries along ``dims``:
    those axes are pinned (an entry's neighbours along them live on other devices)."""
    atoms = w.atoms
    data = set(x.leaves(atoms))
    op = w.add("Elementwise", [w.port(x)], [PortSpec(list(x.data))], order="input", pw=0)
    op.pinned += [leaf for d in dims for leaf in atoms.leaf_list(x.view[d]) if leaf in data]
    return out_tv(w, list(x.view), list(x.data), op)


def concat_along(w: Walk, parts: list[TV], dim: int) -> TV:
    """A Concat along ``dim`` of activations in one layout (the axis one atom in each)."""
    atoms = w.atoms
    first = parts[0]
    total = sum(_size(w, t, dim) for t in parts)
    axis_leaf = atoms.leaf_list(first.view[dim])[0]
    new = atoms.new(total, atoms.role[axis_leaf])
    one = atoms.new(1)
    inputs = []
    for t in parts:
        atoms.lock(t.view[dim])
        inputs.append(w.port(t, [(t.view[dim][0], one)]))
    data = [new if q == axis_leaf else q for q in first.leaves(atoms)]
    atoms.lock([new])  # aliased to its size-1 dim: a later view re-lays it out
    op = w.add("Concat", inputs, [PortSpec(data, alias=[(new, one)])], order="input",
               axis=AxisOf(one))
    op.pinned.append(one)
    view = list(first.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


def pad_along(w: Walk, x: TV, dim: int, before: int, after: int) -> TV:
    """``x`` with ``before`` and ``after`` entries added along ``dim``: a Concat of Slices of
    ``x`` and ``x`` (the data a pad moves; negative amounts cut entries off: a Slice)."""
    n = _size(w, x, dim)
    if before < 0 or after < 0:
        x = _slice_tv(w, x, dim, max(-before, 0), n - max(-after, 0))
        before, after, n = max(before, 0), max(after, 0), _size(w, x, dim)
    if before == after == 0:
        return x
    x = _one_leaf(w, x, dim, "a pad")

    def copies(k: int, tail: bool) -> list[TV]:
        out = [x] * (k // n)
        if k % n:
            out.append(_slice_tv(w, x, dim, n - k % n, n) if tail else
                       _slice_tv(w, x, dim, 0, k % n))
        return out
    return concat_along(w, copies(before, True) + [x] + copies(after, False), dim)


def select_along(w: Walk, x: TV, dim: int, k: int) -> TV:
    """``k`` entries of ``x`` picked along ``dim`` by indices (a gather)."""
    n = _size(w, x, dim)
    if k == n:  # a permutation (or a pick with repeats): entries move along the axis
        return pinned_elementwise(w, x, [dim])
    if k < n:
        return _slice_tv(w, x, dim, 0, k)
    x = _one_leaf(w, x, dim, "a gather")
    parts = [x] * (k // n)
    out = concat_along(w, parts, dim) if len(parts) > 1 else x
    return pad_along(w, out, dim, 0, k % n) if k % n else out


def gathered(w: Walk, table: TV, dims: list[int], shape: tuple[int, ...]) -> TV:
    """Entries of parameter ``table`` picked along ``dims`` by constants: the whole table,
    viewed with ``shape`` in place of ``dims`` (its rows map to no dim of any op)."""
    lo, hi = dims[0], dims[-1] + 1
    view = table.view[:lo] + [[w.atoms.new(s)] for s in shape] + table.view[hi:]
    return table.with_view(view, extra={"table": table})


# -- index, index_select, gather -----------------------------------------------------------

@handles("index", "_unsafe_index")
def _index(w: Walk, node: Any, a: dict) -> Any:
    x, indices = a["self"], list(a["indices"])
    if integral(node) or not isinstance(x, TV) or x.kind == "const":
        return constant(w, node)
    where = [i for i, t in enumerate(indices) if t is not None]
    if not where or where != list(range(where[0], where[-1] + 1)):
        raise Conflict("an index whose index tensors are not on adjacent axes")
    lo, hi = where[0], where[-1] + 1
    shapes = [t.shape(w.atoms) if isinstance(t, TV) else () for t in indices[lo:hi]]
    picked = tuple(_broadcast_shapes(shapes))
    if x.kind == "param":
        ids = indices[lo]
        if isinstance(ids, TV) and ids.kind == "act" and len(where) == 1 and lo == 0 \
                and x.rank == 2:  # table[ids]: an embedding lookup
            return _embedding(w, node, {"weight": x, "indices": ids})
        return gathered(w, x, list(range(lo, hi)), picked)
    return _pick(w, node, x, lo, hi, math.prod(picked))


def _pick(w: Walk, node: Any, x: TV, lo: int, hi: int, k: int) -> TV:
    """Activation ``x`` with axes ``lo..hi-1`` replaced by ``k`` picked entries, viewed as
    the node's shape."""
    shape = x.shape(w.atoms)
    merged = shape[:lo] + (math.prod(shape[lo:hi]),) + shape[hi:]
    flat = reshape(w, x, merged) if hi - lo > 1 else x
    out = select_along(w, flat, lo, k)
    want = node_shape(node)
    return out if out.shape(w.atoms) == want else reshape(w, out, want)


def _broadcast_shapes(shapes: list[tuple[int, ...]]) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for i, v in enumerate((1,) * (rank - len(s)) + tuple(s)):
            out[i] = max(out[i], v)
    return out


@handles("index_select")
def _index_select(w: Walk, node: Any, a: dict) -> Any:
    x, index = a["self"], a["index"]
    if integral(node) or not isinstance(x, TV) or x.kind == "const":
        return constant(w, node)
    dim = wrap_dim(a["dim"], x.rank)
    k = node_shape(node)[dim] if x.rank else 1
    if x.kind == "param":
        if isinstance(index, TV) and index.kind == "act" and dim == 0 and x.rank == 2:
            return _embedding(w, node, {"weight": x, "indices": index})
        return gathered(w, x, [dim], (k,))
    return _pick(w, node, x, dim, dim + 1, k)


@handles("gather")
def _gather(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    if integral(node) or not isinstance(x, TV) or x.kind == "const":
        return constant(w, node)
    dim = wrap_dim(a["dim"], x.rank)
    shape, want = x.shape(w.atoms), node_shape(node)
    if any(s != t for i, (s, t) in enumerate(zip(shape, want)) if i != dim):
        raise Conflict(f"a gather along dim {dim} whose index has other sizes than the input "
                       f"on the other axes ({want} from {shape}); allowed: equal sizes")
    if x.kind == "param":
        return gathered(w, x, [dim], (want[dim],))
    if want[dim] == shape[dim]:
        return _regathered(w, x, dim)
    return select_along(w, x, dim, want[dim])


def _regathered(w: Walk, x: TV, dim: int) -> TV:
    """A gather of as many entries as the axis has, each row of the other axes picking its
    own (DeBERTa's relative positions read per query as key positions): an element-wise op
    pinning the axis whose output axis is a new one. Kept as the input's, it would be made
    one with what the output meets (the keys) though it is another axis (the positions)."""
    x = _one_leaf(w, x, dim, "a gather")
    atoms = w.atoms
    old = atoms.leaf_list(x.view[dim])[0]
    new = atoms.new(atoms.size[old], atoms.role[old])
    data = [new if q == old else q for q in x.leaves(atoms)]
    op = w.add("Elementwise", [w.port(x, [(old, new)])], [PortSpec(data)], order="output", pw=0)
    op.pinned.append(new)
    view = list(x.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


# -- scatter (the reverse of a gather) -----------------------------------------------------

@handles("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy")
def _scatter(w: Walk, node: Any, a: dict) -> Any:
    x, src = a["self"], a.get("src", a.get("source"))
    if isinstance(src, TV) and "dense" in src.extra:  # zeros.scatter(d, topk idx, topk values)
        dense = src.extra["dense"]
        return dense.with_view(list(dense.view))
    if integral(node) or not isinstance(x, TV):
        return constant(w, node)
    if not isinstance(src, TV) or src.kind == "const":  # a scatter of a value
        return unary(w, x, 1) if x.kind == "act" else x
    if src.kind != "act":
        raise Conflict(f"{target_name(node)} of a parameter; allowed: activations, constants")
    dim = wrap_dim(a["dim"], x.rank)
    shape, have = x.shape(w.atoms), src.shape(w.atoms)
    if len(have) != len(shape) or any(s != t for i, (s, t) in enumerate(zip(shape, have))
                                      if i != dim) or have[dim] > shape[dim]:
        raise Conflict(f"{target_name(node)} along dim {dim} of {have} into {shape}; allowed: "
                       f"a source of the target's sizes on the other axes, at most as long")
    spread = pad_along(w, src, dim, 0, shape[dim] - have[dim]) if have[dim] < shape[dim] \
        else pinned_elementwise(w, src, [dim])
    return spread if x.kind != "act" else binary(w, x, spread, "add")


# -- embedding_bag -------------------------------------------------------------------------

@handles("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only")
def _embedding_bag(w: Walk, node: Any, a: dict) -> Any:
    """Sums (means, maxima) of bags of rows: the Embedding ``bkv,vd->bkd`` of the ids in
    ``b`` bags of ``k`` (a gather, written as the one-hot product), then a ReduceMean over k."""
    table, ids = a["weight"], a["indices"]
    atoms = w.atoms
    if ids.rank == 1:
        bags, size = _bags(node, ids.shape(atoms)[0], a.get("include_last_offset", False))
        ids = reshape(w, ids, (bags, size))
    elif ids.rank != 2:
        raise Conflict(f"embedding_bag of ids of rank {ids.rank}; allowed: 1 (with offsets) "
                       f"or 2")
    rest = constant(w, node)[1:]
    vocab, width = table.view[0], table.view[1]
    atoms.set_role(width[0], "channel")
    if ids.kind != "act":  # bags of constant rows: the whole table, as a gathered parameter
        return (gathered(w, table, [0], (ids.shape(atoms)[0],)), *rest)
    atoms.set_role(vocab[0], "vocabulary")
    atoms.lock(vocab + width)
    port, tie = w.weight_port(table, "Embedding")
    if port is None:
        raise Conflict("a table used twice where it cannot be tied")
    _drop_id_slice(w, ids)
    bag, inside = atoms.leaf_list(ids.view[0]), atoms.leaf_list(ids.view[1])
    rows = bag + inside + width
    op = w.add("Embedding", [], [PortSpec(rows)], weights=[PortSpec(bag + inside + vocab), port],
               pw=0, **({"tied": tie} if tie else {}))
    w.claim(op)
    out = bag + width
    reduce = w.add("ReduceMean", [PortSpec(rows, (op, 0))], [PortSpec(out)], order="input",
                   suffix=".bags", axes=[AxisOf(q) for q in inside], keepdims=False)
    return (out_tv(w, [bag, width], out, reduce), *rest)


def _drop_id_slice(w: Walk, ids: TV) -> None:
    """The Slice that picked these ids out of an integer input (DLRM's ``sparse[:, i]``):
    the one-hot weight reads the ids, so that Slice would be an op nothing reads."""
    made, node = ids.source[0] if ids.source else None, ids.extra.get("node")
    if made is not None and made.kind == "Slice" and node is not None and integral(node) \
            and w.real_users(node) == 1:
        made.dead = True


def _bags(node: Any, n: int, last: bool) -> tuple[int, int]:
    """(bags, ids per bag) of a flat embedding_bag whose offsets are an evenly spaced
    ``arange`` (nn.EmbeddingBag on a 2-D input); else the op is refused."""
    off = node.args[2] if len(node.args) > 2 else node.kwargs.get("offsets")
    nums = [v for v in getattr(off, "args", ()) if isinstance(v, int)]
    start, stop, step = {1: (0, *nums, 1), 2: (*nums, 1), 3: tuple(nums)}.get(len(nums),
                                                                             (None,) * 3)
    if getattr(off, "target", None) is None or "arange" not in target_name(off) or start != 0:
        raise Conflict("embedding_bag whose offsets are not an arange from 0; allowed: bags "
                       "of one size (a 2-D input)")
    count = len(range(start, stop, step)) - (1 if last else 0)
    if step * count != n:
        raise Conflict(f"embedding_bag of {n} ids in bags of {step} from {count} offsets; "
                       f"allowed: bags of one size")
    return count, step


# -- pad, roll, cumsum, fill ---------------------------------------------------------------

@handles("pad", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d",
         "replication_pad1d", "replication_pad2d", "circular_pad2d")
def _pad(w: Walk, node: Any, a: dict) -> Any:
    x = a.get("self", a.get("input"))
    amounts = [int(v) for v in as_list(a.get("pad", a.get("padding")))]
    if integral(node) or not isinstance(x, TV) or x.kind != "act":
        return constant(w, node) if not isinstance(x, TV) or x.kind == "const" else \
            x.with_view(w.fresh(node_shape(node)), kind="const", data=[])
    for i in range(len(amounts) // 2):  # pairs from the last axis backwards
        before, after = amounts[2 * i], amounts[2 * i + 1]
        if before or after:
            x = pad_along(w, x, x.rank - 1 - i, before, after)
    return x


@handles("roll")
def _roll(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    if integral(node) or not isinstance(x, TV) or x.kind != "act":
        return x if isinstance(x, TV) and x.kind == "param" else constant(w, node)
    dims = as_list(a.get("dims") or [])
    shifts = as_list(a["shifts"])
    moved = [wrap_dim(d, x.rank) for d, s in zip(dims, shifts) if s % _size(w, x, d)]
    if not dims:  # a roll of the flattened tensor moves entries along every axis
        moved = list(range(x.rank)) if any(shifts) else []
    return pinned_elementwise(w, x, moved) if moved else x


@handles("cumsum", "cumprod", "logcumsumexp")
def _cumsum(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    if integral(node) or not isinstance(x, TV) or x.kind == "const":
        return constant(w, node)
    if x.kind == "param":
        return x.with_view(list(x.view), kind="const", data=[])
    return pinned_elementwise(w, x, [wrap_dim(a["dim"], x.rank)])


@handles("fill", "fill_", "zero", "zero_")
def _fill(w: Walk, node: Any, a: dict) -> Any:
    """A tensor of one value: a constant whatever it was made from (no gradient flows)."""
    return constant(w, node)
