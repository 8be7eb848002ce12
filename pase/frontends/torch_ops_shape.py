"""ATen handlers of layout: views, joins and splits, constants."""
from __future__ import annotations

import math
from typing import Any

from pase.frontends.torch_handlers import as_list, handles, node_shape, split_at, wrap_dim
from pase.frontends.torch_ir import AxisOf, Conflict, PortSpec
from pase.frontends.torch_layout import (
    materialize,
    out_tv,
    permute,
    reshape,
)
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import VIEW_OPS, Walk

# -- views -------------------------------------------------------------------------------

@handles(*(VIEW_OPS - {"permute", "transpose", "t", "expand", "expand_as", "movedim", "swapaxes",
                       "native_dropout", "_assert_tensor_metadata"}))
def _view(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"] if "self" in a else next(iter(a.values()))
    if not isinstance(x, TV):
        return x
    shape = node_shape(node)
    if shape == x.shape(w.atoms):
        return x.with_view(list(x.view))
    return reshape(w, x, shape)


@handles("native_dropout")
def _native_dropout(w: Walk, node: Any, a: dict) -> Any:
    return (a["input"], None)


@handles("_assert_tensor_metadata")
def _nothing(w: Walk, node: Any, a: dict) -> Any:
    return None


@handles("permute")
def _permute(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    return permute(x, [wrap_dim(d, x.rank) for d in a["dims"]])


@handles("transpose", "swapaxes")
def _transpose(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    i, j = (wrap_dim(a.get("dim0", a.get("axis0")), x.rank), wrap_dim(a.get("dim1", a.get("axis1")), x.rank))
    order = list(range(x.rank))
    order[i], order[j] = order[j], order[i]
    return permute(x, order)


@handles("t", "numpy_T")
def _t(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    return permute(x, list(range(x.rank))[::-1])


@handles("movedim")
def _movedim(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    src = [wrap_dim(d, x.rank) for d in as_list(a["source"])]
    dst = [wrap_dim(d, x.rank) for d in as_list(a["destination"])]
    order = [i for i in range(x.rank) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(x, order)


@handles("repeat_interleave")
def _repeat_interleave(w: Walk, node: Any, a: dict) -> Any:
    """Each entry repeated ``r`` times along ``dim`` (grouped-query attention's kv heads):
    the axis becomes its atoms then a broadcast atom of size ``r``, not in the data."""
    x, r, dim = a.get("self"), a.get("repeats"), a.get("dim")
    if not isinstance(x, TV) or not isinstance(r, int) or dim is None:
        raise Conflict("repeat_interleave with tensor repeats or no dim")
    dim = wrap_dim(dim, x.rank)
    view = list(x.view)
    view[dim] = list(view[dim]) + [w.atoms.new(r)]
    return x.with_view(view)


@handles("repeat")
def _repeat(w: Walk, node: Any, a: dict) -> Any:
    """A tensor tiled ``sizes`` times: each tiled axis gets a broadcast atom in front."""
    x, sizes = a["self"], list(a["repeats"])
    lead = len(sizes) - x.rank
    view = [[w.atoms.new(s)] for s in sizes[:lead]]
    for axis, s in zip(x.view, sizes[lead:]):
        view.append(list(axis) if s == 1 else [w.atoms.new(s)] + list(axis))
    return x.with_view(view)


@handles("expand", "expand_as")
def _expand(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    shape = node_shape(node)
    lead = len(shape) - x.rank
    view = w.fresh(shape[:lead])
    for axis, s in zip(x.view, shape[lead:]):
        have = math.prod(w.atoms.size[q] for q in axis)
        view.append(axis if have == s else [w.atoms.new(s)])  # a broadcast axis: not in the data
    return x.with_view(view)




# -- joins and splits --------------------------------------------------------------------------

@handles("cat", "concat")
def _cat(w: Walk, node: Any, a: dict) -> Any:
    parts = [t for t in a["tensors"] if isinstance(t, TV)]
    acts = [t for t in parts if t.kind == "act"]
    if not acts:
        return TV(w.fresh(node_shape(node)), [], "const")
    dim = wrap_dim(a.get("dim", 0), parts[0].rank)
    sources = tuple(node.args[0]) if node.args and isinstance(node.args[0], (list, tuple)) else ()
    parts = _grown(w, dim, sources, parts)
    acts = [t for t in parts if t.kind == "act"]
    out = _concat(w, node, parts, acts, dim)
    if len(sources) == len(a["tensors"]):
        w.cats.append((dim, sources, out))
    return out


def _grown(w: Walk, dim: int, sources: tuple, parts: list[TV]) -> list[TV]:
    """A concatenation of an earlier one's inputs and more (DenseNet's growing feature
    lists) as that concatenation's output and the rest: the same tensor, the same bytes
    copied, but each feature map read by one concatenation instead of every later one,
    which keeps the graph's dependent sets small."""
    best = None
    for d, seen, out in w.cats:
        if d == dim and 1 < len(seen) < len(sources) and sources[:len(seen)] == seen and \
                len(parts) == len(sources) and (best is None or len(seen) > len(best[0])):
            best = (seen, out)
    return parts if best is None else [best[1]] + parts[len(best[0]):]


def _concat(w: Walk, node: Any, parts: list[TV], acts: list[TV], dim: int) -> TV:
    atoms = w.atoms
    for i, t in enumerate(acts):  # the concatenated axis must be one atom
        if len(atoms.leaf_list(t.view[dim])) != 1:
            done = materialize(w, t, "a concatenation along a merged axis was re-laid out")
            parts[parts.index(t)] = acts[i] = done
    first = acts[0]
    for t in acts[1:]:
        for i in range(first.rank):
            if i != dim:
                atoms.unify(first.view[i], t.view[i])
        lf, lt = first.leaves(atoms), t.leaves(atoms)
        if len(lf) == len(lt):  # size-1 atoms no view holds (what a strided slice picked)
            for p, q in zip(lf, lt):
                if atoms.size[p] == atoms.size[q] == 1:
                    atoms.unify([p], [q])
    shape = node_shape(node)
    new = atoms.new(shape[dim])
    if atoms.leaf_list(first.view[dim]):
        atoms.set_role(new, atoms.role[atoms.leaf_list(first.view[dim])[0]])
    one = atoms.new(1)
    inputs = []
    for t in acts:
        if len(atoms.leaf_list(t.view[dim])) != 1 or not _same_layout(atoms, first, t, dim):
            raise Conflict("a concatenation of tensors in different layouts")
        atoms.lock(t.view[dim])
        inputs.append(w.port(t, [(t.view[dim][0], one)]))
    cat_leaf = atoms.leaf_list(first.view[dim])[0]
    data = [new if x == cat_leaf else x for x in first.leaves(atoms)]
    weights = []
    lead = parts[:parts.index(first)]
    for t in lead:  # parameters before the inputs (a class token): Concat weights
        raw = _concat_weight(w, first, t, dim)
        if t.kind == "param" and t.param is not None and raw is not None:
            port, _ = w.weight_port(t, "Concat")
            if port is not None:
                weights.append(PortSpec(list(t.data), param=t.param, raw=raw))
            continue
        w.approximate(f"{node.name}: a constant part of a concatenation is left out")
    if len(lead) + len(acts) < len(parts):
        w.approximate(f"{node.name}: parts of a concatenation after its inputs are left out")
    atoms.lock([new])  # aliased to its size-1 dim: a later view re-lays it out
    op = w.add("Concat", inputs, [PortSpec(data, alias=[(new, one)])], weights=weights,
               order="input", axis=AxisOf(one))
    op.pinned.append(one)
    w.claim(op)
    view = list(first.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


def _same_layout(atoms, first: TV, t: TV, dim: int) -> bool:
    """``t``'s data has ``first``'s layout, the concatenated axis aside."""
    lf, lt = first.leaves(atoms), t.leaves(atoms)
    cf, ct = atoms.leaf_list(first.view[dim])[0], atoms.leaf_list(t.view[dim])[0]
    return len(lf) == len(lt) and cf in lf and ct in lt and lf.index(cf) == lt.index(ct) \
        and all(x == y for x, y in zip(lf, lt) if x != cf)


def _concat_weight(w: Walk, first: TV, t: TV, dim: int) -> list | None:
    """A parameter placed before ``first`` along ``dim`` as a Concat weight: per op axis
    its extent, mapped to the op's dim where the sizes agree (else extent 1, broadcast)."""
    atoms = w.atoms
    if t.rank != first.rank or any(len(atoms.leaf_list(v)) != 1 for v in first.view):
        return None
    own = set(atoms.leaf_list(t.data))
    raw = []
    for leaf in first.leaves(atoms):
        i = next((i for i, v in enumerate(first.view) if atoms.leaf_list(v) == [leaf]), None)
        if i is None:
            raw.append((1, None))
            continue
        mine = atoms.leaf_list(t.view[i])
        extent = math.prod(atoms.size[x] for x in mine)
        if i == dim:
            raw.append((extent, None))
        elif mine and all(x in own for x in mine) and extent == atoms.size[leaf]:
            atoms.unify(t.view[i], [leaf])
            raw.append((extent, leaf))
        elif not any(x in own for x in mine) or extent == 1:
            raw.append((1, None))
        else:
            return None
    if math.prod(e for e, _ in raw) != math.prod(atoms.size[x] for x in own):
        return None
    return raw


@handles("stack")
def _stack(w: Walk, node: Any, a: dict) -> Any:
    xs = [t for t in a["tensors"] if isinstance(t, TV)]
    dim = wrap_dim(a.get("dim", 0), xs[0].rank + 1)
    atoms = w.atoms
    if any(t.kind != "act" for t in xs):
        return TV(w.fresh(node_shape(node)), [], "const")
    first = xs[0]
    for t in xs[1:]:
        for i in range(first.rank):
            atoms.unify(first.view[i], t.view[i])
        if t.leaves(atoms) != first.leaves(atoms):
            raise Conflict("a stack of tensors in different layouts")
    new, one = atoms.new(len(xs)), atoms.new(1)
    leaves = first.leaves(atoms)
    at = len(atoms.leaf_list(sum(first.view[:dim], [])))
    at = min(at, len(leaves))
    data = leaves[:at] + [new] + leaves[at:]
    atoms.lock([new])  # aliased to its size-1 dim: a later view re-lays it out
    op = w.add("Stack", [w.port(t) for t in xs], [PortSpec(data, alias=[(new, one)])],
               order="output", axis=at)
    op.pinned.append(one)
    view = list(first.view)
    view.insert(dim, [new])
    return out_tv(w, view, data, op)


def _unstack(w: Walk, x: TV, dim: int, count: int) -> list[TV]:
    """``x`` cut into ``count`` equal parts along ``dim``: an Unstack over a new atom."""
    atoms = w.atoms
    axis = x.view[dim]
    size = math.prod(atoms.size[q] for q in axis)
    leaves = atoms.cut(axis, [count]) if count > 1 else atoms.leaf_list(axis)
    first, rest = split_at(atoms, leaves, count)
    if len(first) != 1:
        raise Conflict("a split along an axis already cut otherwise")
    s = first[0]
    atoms.set_role(s, "other", force=True)  # which part (q, k or v): no role of its own
    atoms.lock([s])
    one = atoms.new(1)
    data = [q for q in x.leaves(atoms) if q != s]
    op = w.add("Unstack", [w.port(x, [(s, one)])], [PortSpec(list(data)) for _ in range(count)],
               order="input", axis=AxisOf(one))
    op.pinned.append(one)
    del size
    outs = []
    for i in range(count):
        view = list(x.view)
        view[dim] = rest if rest else [atoms.new(1)]
        outs.append(out_tv(w, view, list(data), op, i))
    return outs


def _slice_tv(w: Walk, x: TV, dim: int, start: int, stop: int) -> TV:
    atoms = w.atoms
    axis = x.view[dim]
    size = math.prod(atoms.size[q] for q in axis)
    start, stop = max(0, min(start, size)), max(0, min(stop, size))
    if start == 0 and stop == size:
        return x
    if x.kind != "act":
        return x.with_view(x.view[:dim] + [[atoms.new(stop - start)]] + x.view[dim + 1:],
                           kind="const" if x.kind == "const" else x.kind)
    if len(atoms.leaf_list(axis)) != 1:
        x = materialize(w, x, "a slice of a merged axis was re-laid out")
        axis = x.view[dim]
    atoms.lock(axis)
    new, one = atoms.new(stop - start, atoms.role[atoms.leaf_list(axis)[0]]), atoms.new(1)
    data = [new if q == axis[0] else q for q in x.leaves(atoms)]
    atoms.lock([new])  # aliased to its size-1 dim: a later view re-lays it out
    op = w.add("Slice", [w.port(x, [(axis[0], one)])], [PortSpec(data, alias=[(new, one)])],
               order="input", axis=AxisOf(one), start=start, stop=stop)
    op.pinned.append(one)
    view = list(x.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


@handles("split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split")
def _split(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = wrap_dim(a.get("dim", 0), x.rank)
    sizes = [int(v.shape[dim]) for v in node.meta["val"]]
    if x.kind != "act":
        return tuple(x.with_view(x.view[:dim] + [[w.atoms.new(s)]] + x.view[dim + 1:])
                     for s in sizes)
    if len(set(sizes)) == 1 and len(sizes) > 1:
        try:
            return tuple(_unstack(w, x, dim, len(sizes)))
        except Conflict:
            pass
    outs, start = [], 0
    for s in sizes:
        outs.append(_slice_tv(w, x, dim, start, start + s))
        start += s
    return tuple(outs)


@handles("unbind")
def _unbind(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = wrap_dim(a.get("dim", 0), x.rank)
    n = x.shape(w.atoms)[dim]
    outs = _unstack(w, x, dim, n) if x.kind == "act" else [x] * n
    return tuple(o.with_view(o.view[:dim] + o.view[dim + 1:]) for o in outs)


@handles("slice", "narrow")
def _slice(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = wrap_dim(a.get("dim", 0), x.rank)
    size = x.shape(w.atoms)[dim]
    if "start" in a and "length" in a:
        start, stop = a["start"], a["start"] + a["length"]
    else:
        start = a.get("start") or 0
        stop = a.get("end")
        stop = size if stop is None or stop > size else stop
        start, stop = start % size if start < 0 else start, stop % size if stop < 0 else stop
    step = a.get("step") or 1
    if step != 1:
        return _strided(w, x, dim, int(start), int(stop), int(step))
    return _slice_tv(w, x, dim, int(start), int(stop))


def _strided(w: Walk, x: TV, dim: int, start: int, stop: int, step: int) -> TV:
    """``x[start::step]`` along ``dim`` (Swin's patch merging, ``x[:, 0::2]``): the axis
    viewed as (n / step, step) and entry ``start`` of the second picked, a Slice."""
    size = x.shape(w.atoms)[dim]
    if size % step or start >= step or stop != size:
        raise Conflict(f"a strided slice {start}:{stop}:{step} of an axis of {size} (allowed: "
                       f"start < step, to the end, a step that divides the axis)")
    shape = list(x.shape(w.atoms))
    shape[dim:dim + 1] = [size // step, step]
    y = reshape(w, x, tuple(shape))
    picked = _slice_tv(w, y, dim + 1, start, start + 1)
    return picked.with_view(picked.view[:dim + 1] + picked.view[dim + 2:])


@handles("select")
def _select(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = wrap_dim(a["dim"], x.rank)
    size = x.shape(w.atoms)[dim]
    i = a["index"] % size
    out = _slice_tv(w, x, dim, i, i + 1)
    return out.with_view(out.view[:dim] + out.view[dim + 1:])


@handles("topk")
def _topk(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = wrap_dim(a.get("dim", -1), x.rank)
    atoms = w.atoms
    if x.kind != "act":
        return (x, x)
    axis = x.view[dim]
    atoms.lock(axis)
    op = w.add("TopK", [w.port(x)], [PortSpec(list(x.data))], order="input", k=int(a["k"]),
               axis=AxisOf(axis[0]), normalize=False)
    op.pinned.append(axis[0])
    dense = out_tv(w, list(x.view), list(x.data), op)
    small = [atoms.new(int(a["k"]))]
    values = dense.with_view(x.view[:dim] + [small] + x.view[dim + 1:], extra={"dense": dense,
                                                                              "node": w.node})
    indices = values.with_view(list(values.view), kind="const", data=[], integer=True)
    return (values, indices)


@handles("zeros_like", "ones_like", "full_like", "empty_like", "arange", "zeros", "ones", "full",
         "empty", "tensor", "scalar_tensor", "tril", "triu", "new_zeros", "new_ones", "new_full",
         "rand", "randn", "rand_like", "randn_like", "bernoulli", "eq", "ne", "lt", "gt", "le",
         "ge", "argmax", "argmin", "argsort", "lift_fresh", "sym_size", "logical_and",
         "logical_or", "isinf", "isnan")
def _constant(w: Walk, node: Any, a: dict) -> Any:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(TV(w.fresh(tuple(v.shape)), [], "const") for v in val)
    shape = tuple(val.shape) if hasattr(val, "shape") else ()
    return TV(w.fresh(shape), [], "const")
