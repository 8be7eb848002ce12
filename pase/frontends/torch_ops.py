"""One handler per ATen op: how each becomes IR ops (or a view, or nothing).

A handler takes the walk, the FX node and its arguments bound by name, and
returns the node's value: a :class:`TV`, a tuple of them, or a Python value.
:data:`HANDLERS` maps the op's name (``linear``, ``conv2d``...) to its handler.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from pase.frontends.torch_ir import AxisOf, Conflict, PortSpec
from pase.frontends.torch_layout import (
    binary,
    contract,
    materialize,
    out_tv,
    permute,
    reshape,
    unary,
)
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import ACT_PW, VIEW_OPS, Walk

Handler = Callable[[Walk, Any, dict], Any]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn
    return deco


def _shape(node: Any) -> tuple[int, ...]:
    val = node.meta.get("val")
    return tuple(int(s) for s in val.shape)


def _dim(d: int, rank: int) -> int:
    return d % rank if rank else 0


# -- views -------------------------------------------------------------------------------

@handles(*(VIEW_OPS - {"permute", "transpose", "t", "expand", "expand_as", "movedim", "swapaxes",
                       "native_dropout", "_assert_tensor_metadata"}))
def _view(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"] if "self" in a else next(iter(a.values()))
    if not isinstance(x, TV):
        return x
    shape = _shape(node)
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
    return permute(x, [_dim(d, x.rank) for d in a["dims"]])


@handles("transpose", "swapaxes")
def _transpose(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    i, j = (_dim(a.get("dim0", a.get("axis0")), x.rank), _dim(a.get("dim1", a.get("axis1")), x.rank))
    order = list(range(x.rank))
    order[i], order[j] = order[j], order[i]
    return permute(x, order)


@handles("t")
def _t(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    return permute(x, list(range(x.rank))[::-1])


@handles("movedim")
def _movedim(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    src = [_dim(d, x.rank) for d in _list(a["source"])]
    dst = [_dim(d, x.rank) for d in _list(a["destination"])]
    order = [i for i in range(x.rank) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(x, order)


@handles("expand", "expand_as")
def _expand(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    shape = _shape(node)
    lead = len(shape) - x.rank
    view = w.fresh(shape[:lead])
    for axis, s in zip(x.view, shape[lead:]):
        have = math.prod(w.atoms.size[q] for q in axis)
        view.append(axis if have == s else [w.atoms.new(s)])  # a broadcast axis: not in the data
    return x.with_view(view)


def _list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


# -- products ------------------------------------------------------------------------------

@handles("linear")
def _linear(w: Walk, node: Any, a: dict) -> Any:
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    lead = "".join(_letters(x.rank - 1))
    w.atoms.set_role(weight.view[0][0] if weight.view else 0, "parameter")
    return contract(w, x, weight, f"{lead}Z,YZ->{lead}Y", bias=bias)


def _letters(n: int) -> list[str]:
    return list("abcdefghijklmnopqrstuvw"[:n])


@handles("addmm")
def _addmm(w: Walk, node: Any, a: dict) -> Any:
    return contract(w, a["mat1"], a["mat2"], "ak,kn->an", bias=a["self"])


@handles("mm")
def _mm(w: Walk, node: Any, a: dict) -> Any:
    return contract(w, a["self"], a["mat2"], "mk,kn->mn")


@handles("bmm")
def _bmm(w: Walk, node: Any, a: dict) -> Any:
    _head_roles(w, a["self"], a["mat2"])
    return contract(w, a["self"], a["mat2"], "bmk,bkn->bmn")


@handles("baddbmm")
def _baddbmm(w: Walk, node: Any, a: dict) -> Any:
    out = contract(w, a["batch1"], a["batch2"], "bmk,bkn->bmn")
    return binary(w, out, a["self"], "add")


@handles("matmul")
def _matmul(w: Walk, node: Any, a: dict) -> Any:
    x, y = a["self"], a["other"]
    if x.rank == 1 or y.rank == 1:
        if x.rank == 1 and y.rank == 1:
            return contract(w, x, y, "k,k->")
        if x.rank == 1:
            lead = "".join(_letters(y.rank - 2))
            return contract(w, x, y, f"Z,{lead}ZY->{lead}Y")
        lead = "".join(_letters(x.rank - 2))
        return contract(w, x, y, f"{lead}XZ,Z->{lead}X")
    n = max(x.rank, y.rank) - 2
    lead = "".join(_letters(n))
    _head_roles(w, x, y)
    return contract(w, x, y, f"{lead[n - (x.rank - 2):]}XZ,{lead[n - (y.rank - 2):]}ZY->{lead}XY")


def _head_roles(w: Walk, x: TV, y: TV) -> None:
    """Batched products of two activations (attention written by hand): the batch axes
    that came out of a projection's features are heads."""
    if x.kind != "act" or y.kind != "act":
        return
    for axis in x.view[:-2]:
        for leaf in w.atoms.leaf_list(axis):
            if w.atoms.role[leaf] in ("parameter", "channel", "other"):
                w.atoms.set_role(leaf, "heads")


@handles("outer", "ger")
def _outer(w: Walk, node: Any, a: dict) -> Any:
    return contract(w, a["self"], a.get("vec2", a.get("other")), "i,j->ij")


@handles("einsum")
def _einsum(w: Walk, node: Any, a: dict) -> Any:
    eq, operands = a["equation"], list(a["tensors"])
    if "->" not in eq:
        ins = eq.replace(" ", "").split(",")
        letters = sorted(c for c in set("".join(ins)) if "".join(ins).count(c) == 1)
        eq = f"{eq}->{''.join(letters)}"
    lhs, rhs = eq.replace(" ", "").split("->")
    parts = lhs.split(",")
    if len(parts) == 1:
        return _one_operand_einsum(w, operands[0], parts[0], rhs)
    x = operands[0]
    letters_x = parts[0]
    for i in range(1, len(parts)):
        later = "".join(parts[i + 1:]) + rhs
        keep = "".join(dict.fromkeys(c for c in letters_x + parts[i] if c in later))
        if i == len(parts) - 1:
            keep = rhs
        x = contract(w, x, operands[i], f"{letters_x},{parts[i]}->{keep}")
        letters_x = keep
        _expert_roles(w, operands[i], parts[i], keep, letters_x)
    return x


def _expert_roles(w: Walk, y: TV, letters: str, out: str, _: str) -> None:
    """A parameter of rank >= 3 whose leading axis reaches the output: stacked experts."""
    if y.kind == "param" and y.rank >= 3 and letters[0] in out:
        w.atoms.set_role(y.view[0][0], "expert")


def _one_operand_einsum(w: Walk, x: TV, letters: str, out: str) -> Any:
    if sorted(letters) == sorted(out):
        return permute(x, [letters.index(c) for c in out])
    raise Conflict(f"a one-operand einsum that reduces ({letters}->{out})")


# -- convolution, pooling, norms ------------------------------------------------------------

@handles("conv2d", "convolution")
def _conv2d(w: Walk, node: Any, a: dict) -> Any:
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    stride = _pair(a.get("stride", 1))
    pad = _pair(a.get("padding", 0))
    if _pair(a.get("dilation", 1)) != (1, 1) or a.get("groups", 1) != 1 or x.rank != 4 \
            or isinstance(a.get("padding"), str) or a.get("transposed"):
        raise Conflict("only 2-D convolutions with groups=1 and dilation 1 are supported")
    atoms = w.atoms
    if len(x.leaves(atoms)) != 4 or x.leaves(atoms) != atoms.leaf_list(sum(x.view, [])):
        x = materialize(w, x, "a convolution input in another layout was re-laid out")
    b, c, hh, ww = (axis[0] for axis in x.view)
    n, c2, r, s = (axis[0] for axis in weight.view)
    atoms.lock([b, c, hh, ww, n, r, s])
    shape = _shape(node)
    h_out, w_out = atoms.new(shape[2], "spatial"), atoms.new(shape[3], "spatial")
    atoms.lock([h_out, w_out])
    for atom, role in ((c, "channel"), (hh, "spatial"), (ww, "spatial"), (n, "parameter"),
                       (r, "window"), (s, "window")):
        atoms.set_role(atom, role)
    atoms.unify([c2], [c])
    port, tie = w.weight_port(weight, "Conv")
    out = [b, n, h_out, w_out]
    op = w.add("Conv", [w.port(x, [(hh, h_out), (ww, w_out)])], [PortSpec(out)],
               weights=[port] if port else [], order="conv", counted=True,
               stride=list(stride), pad=list(pad), pw=0)
    op.pinned += [h_out, w_out]
    w.claim(op)
    y = out_tv(w, [[q] for q in out], out, op)
    if bias is not None and isinstance(bias, TV) and bias.kind == "param":
        y = _channel_bias(w, y, bias, n)
        if bias.param:
            w.param_site[bias.param] = op
    return y


def _channel_bias(w: Walk, y: TV, bias: TV, channel: int) -> TV:
    """A per-channel bias of a (b, c, h, w) output: an add of a (c, 1, 1) parameter."""
    port, _ = w.weight_port(bias, "Elementwise")
    w.atoms.unify(bias.view[0], [channel])
    weights = [] if port is None else [
        PortSpec(port.atoms, param=bias.param, raw=[(w.atoms.size[channel], channel), (1, None),
                                                    (1, None)])]
    op = w.add("Elementwise", [w.port(y)], [PortSpec(list(y.data))], weights=weights,
               order="input", suffix=".bias", fn="add")
    w.claim(op)
    return out_tv(w, list(y.view), list(y.data), op)


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return (int(v), int(v))


def _pool(w: Walk, node: Any, x: TV, window, stride, pad) -> TV:
    atoms = w.atoms
    if x.rank != 4:
        raise Conflict("pooling of a tensor that is not (b, c, h, w)")
    if len(x.leaves(atoms)) != 4 or x.leaves(atoms) != atoms.leaf_list(sum(x.view, [])):
        x = materialize(w, x, "a pooling input in another layout was re-laid out")
    b, c, hh, ww = (axis[0] for axis in x.view)
    shape = _shape(node)
    h_out, w_out = atoms.new(shape[2], "spatial"), atoms.new(shape[3], "spatial")
    atoms.lock([b, c, hh, ww, h_out, w_out])
    out = [b, c, h_out, w_out]
    op = w.add("Pooling", [w.port(x, [(hh, h_out), (ww, w_out)])], [PortSpec(out)],
               order="output", window=list(window), stride=list(stride), pad=list(pad))
    return out_tv(w, [[q] for q in out], out, op)


@handles("max_pool2d", "max_pool2d_with_indices")
def _max_pool(w: Walk, node: Any, a: dict) -> Any:
    if _pair(a.get("dilation", 1)) != (1, 1) or a.get("ceil_mode"):
        raise Conflict("max pooling with dilation or ceil_mode")
    k = _pair(a["kernel_size"])
    s = _pair(a.get("stride") or k)
    out = _pool(w, node, a["self"], k, s, _pair(a.get("padding", 0)))
    return (out, None) if "indices" in str(node.target) else out


@handles("avg_pool2d")
def _avg_pool(w: Walk, node: Any, a: dict) -> Any:
    if a.get("ceil_mode"):
        raise Conflict("average pooling with ceil_mode")
    k = _pair(a["kernel_size"])
    return _pool(w, node, a["self"], k, _pair(a.get("stride") or k), _pair(a.get("padding", 0)))


@handles("adaptive_avg_pool2d", "adaptive_max_pool2d", "_adaptive_avg_pool2d")
def _adaptive_pool(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    h, wd = x.shape(w.atoms)[2:]
    oh, ow = _shape(node)[2:]
    if h % oh or wd % ow:
        raise Conflict(f"adaptive pooling from {h}x{wd} to {oh}x{ow} (sizes that do not divide)")
    k = (h // oh, wd // ow)
    out = _pool(w, node, x, k, k, (0, 0))
    return (out, None) if "max" in str(node.target) else out


@handles("batch_norm", "_native_batch_norm_legit_functional", "_native_batch_norm_legit",
         "native_batch_norm", "_native_batch_norm_legit_no_training")
def _batch_norm(w: Walk, node: Any, a: dict) -> Any:
    x = a["input"]
    atoms = w.atoms
    if x.leaves(atoms) != atoms.leaf_list(sum(x.view, [])) or len(x.view[1]) != 1:
        x = materialize(w, x, "a batch norm input in another layout was re-laid out")
    channel = x.view[1][0]
    atoms.lock([channel])
    weights = []
    for key in ("weight", "bias"):
        p = a.get(key)
        if isinstance(p, TV) and p.kind == "param":
            atoms.unify(p.view[0], [channel])
            port, _ = w.weight_port(p, "BatchNorm")
            if port is not None:
                weights.append(port)
    op = w.add("BatchNorm", [w.port(x)], [PortSpec(list(x.data))], weights=weights,
               order="input", axis=0)
    w.claim(op)
    out = out_tv(w, list(x.view), list(x.data), op)
    return out if node.target.__name__.startswith("batch_norm") else (out, None, None, None, None)


def _norm(w: Walk, node: Any, x: TV, shape: Any, params: list[Any], rms: bool) -> TV:
    atoms = w.atoms
    if len(_list(shape)) != 1:
        raise Conflict("normalisation over more than one axis")
    axis = x.view[-1]
    if len(atoms.leaf_list(axis)) != 1:
        x = materialize(w, x, "a norm over a merged axis was re-laid out")
        axis = x.view[-1]
    atoms.lock(axis)
    weights = []
    for p in params:
        if isinstance(p, TV) and p.kind == "param":
            atoms.unify(p.view[-1], axis)
            port, _ = w.weight_port(p, "Norm")
            if port is not None:
                weights.append(port)
    attrs = {"rms": True} if rms else {}
    op = w.add("Norm", [w.port(x)], [PortSpec(list(x.data))], weights=weights, order="input",
               axis=AxisOf(axis[0]), **attrs)
    w.claim(op)
    return out_tv(w, list(x.view), list(x.data), op)


@handles("layer_norm", "native_layer_norm")
def _layer_norm(w: Walk, node: Any, a: dict) -> Any:
    out = _norm(w, node, a["input"], a["normalized_shape"], [a.get("weight"), a.get("bias")],
                False)
    return out if node.target.__name__.startswith("layer_norm") else (out, None, None)


@handles("rms_norm", "_fused_rms_norm")
def _rms_norm(w: Walk, node: Any, a: dict) -> Any:
    out = _norm(w, node, a["input"], a["normalized_shape"], [a.get("weight")], True)
    return out if node.target.__name__.startswith("rms_norm") else (out, None)


def _softmax_op(w: Walk, x: TV, dim: int, causal: bool = False, kind: str = "Softmax") -> TV:
    atoms = w.atoms
    axis = x.view[_dim(dim, x.rank)]
    if len(atoms.leaf_list(axis)) != 1:
        x = materialize(w, x, "a softmax over a merged axis was re-laid out")
        axis = x.view[_dim(dim, x.rank)]
    atoms.lock(axis)
    attrs: dict[str, Any] = {} if kind == "SoftmaxCrossEntropy" else {"axis": AxisOf(axis[0])}
    if causal:
        attrs["causal"] = True
    op = w.add(kind, [w.port(x)], [PortSpec(list(x.data))], order="input", **attrs)
    return out_tv(w, list(x.view), list(x.data), op)


@handles("softmax", "_softmax", "log_softmax", "_log_softmax")
def _softmax(w: Walk, node: Any, a: dict) -> Any:
    return _softmax_op(w, a["self"], a["dim"])


@handles("scaled_dot_product_attention")
def _sdpa(w: Walk, node: Any, a: dict) -> Any:
    q, k, v = a["query"], a["key"], a["value"]
    atoms = w.atoms
    if q.rank < 3:
        raise Conflict("attention needs (..., sequence, features) operands")
    heads_q, heads_k = q.view[-3] if q.rank >= 4 else [], k.view[-3] if k.rank >= 4 else []
    hq = math.prod(atoms.size[x] for x in heads_q)
    hk = math.prod(atoms.size[x] for x in heads_k)
    qv = list(q.view)
    if q.rank >= 4 and hq != hk and hk > 0 and hq % hk == 0:  # grouped-query attention
        leaves = atoms.cut(heads_q, [hk])
        group = [x for x in leaves if True]
        g_part, r_part = _split_at(atoms, group, hk)
        qv = qv[:-3] + [g_part, r_part] + qv[-2:]
        for atom in r_part:
            atoms.set_role(atom, "heads")
        q = q.with_view(qv)
    for t in (q, k, v):
        if t.rank >= 4:
            for atom in t.view[-3]:
                atoms.set_role(atom, "heads")
        for atom in t.view[-2]:
            atoms.set_role(atom, "sequence")
    for atom in q.view[-1]:
        atoms.set_role(atom, "channel")
    n = q.rank - 2
    lead = "".join(_letters(n))
    if q.rank > k.rank:  # the query's extra heads axis (GQA)
        klead = lead[:-2] + lead[-2]
    else:
        klead = lead
    scores = contract(w, q, k, f"{lead}XZ,{klead}YZ->{lead}XY", suffix=".scores")
    probs = _softmax_op(w, scores, -1, causal=bool(a.get("is_causal")))
    out = contract(w, probs, v, f"{lead}XY,{klead}YZ->{lead}XZ", suffix=".context")
    if qv is not None and q.rank != a["query"].rank:
        out = out.with_view(out.view[:-4] + [out.view[-4] + out.view[-3]] + out.view[-2:])
    return out


def _split_at(atoms, leaves: list[int], size: int) -> tuple[list[int], list[int]]:
    p, i = 1, 0
    while p < size:
        p *= atoms.size[leaves[i]]
        i += 1
    return leaves[:i], leaves[i:]


# -- element-wise ----------------------------------------------------------------------------

@handles("gelu", "relu", "silu", "tanh", "relu_", "silu_", "gelu_")
def _activation(w: Walk, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0].rstrip("_")
    return unary(w, a["self"], 3 * ACT_PW[name], act=name)


@handles("sigmoid", "exp", "neg", "rsqrt", "sqrt", "reciprocal", "abs", "log", "square",
         "cos", "sin", "erf", "hardtanh", "leaky_relu", "elu", "pow", "clamp", "mish",
         "hardswish", "hardsigmoid", "softplus", "logical_not", "tril", "triu", "clamp_min",
         "clamp_max", "sign", "floor", "ceil", "round", "log1p", "expm1", "gelu_backward")
def _pointwise(w: Walk, node: Any, a: dict) -> Any:
    x = a.get("self", a.get("input"))
    if not isinstance(x, TV):
        return x
    heavy = node.target.__name__.split(".")[0] in ("sigmoid", "erf", "softplus", "mish")
    return unary(w, x, 3 * ACT_PW["silu"] if heavy else 1)


@handles("add", "sub", "mul", "div", "add_", "mul_", "sub_", "div_", "rsub", "true_divide",
         "maximum", "minimum", "where", "masked_fill")
def _binary(w: Walk, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0].rstrip("_")
    if name in ("where", "masked_fill"):
        x = a.get("self") if name == "where" else a.get("self")
        others = [v for k, v in a.items() if isinstance(v, TV) and v.kind == "act"]
        x = others[-1] if name == "where" and others else a.get("self")
        return unary(w, x, 1) if isinstance(x, TV) else x
    fn = {"rsub": "sub", "true_divide": "div", "maximum": "add", "minimum": "add"}.get(name, name)
    return binary(w, a["self"], a["other"], fn)


@handles("mean", "sum")
def _reduce(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dims = a.get("dim")
    if not isinstance(x, TV) or x.kind != "act":
        return x
    if dims is None or len(_list(dims)) == 0:  # to a scalar (a loss): nothing to split
        return TV([], [], "const")
    dims = sorted({_dim(d, x.rank) for d in _list(dims)})
    atoms = w.atoms
    gone = [q for d in dims for q in x.view[d]]
    keep_data = [q for q in x.leaves(atoms) if q not in set(atoms.leaf_list(gone))]
    if not keep_data:
        return TV([], [], "const")
    op = w.add("ReduceMean", [w.port(x)], [PortSpec(keep_data)], order="input",
               axes=[AxisOf(q) for q in atoms.leaf_list(gone)], keepdims=False)
    view = [([atoms.new(1)] if d in dims else x.view[d]) for d in range(x.rank)] \
        if a.get("keepdim") else [x.view[d] for d in range(x.rank) if d not in dims]
    return out_tv(w, view, keep_data, op)


# -- embeddings and losses -------------------------------------------------------------------

@handles("embedding")
def _embedding(w: Walk, node: Any, a: dict) -> Any:
    table, ids = a["weight"], a["indices"]
    atoms = w.atoms
    vocab, width = table.view[0], table.view[1]
    atoms.set_role(width[0], "channel")
    if ids.kind != "act":  # rows of a table picked by constants (positions): a parameter
        n = math.prod(ids.shape(atoms)) if ids.view else 1
        rows = vocab if n == atoms.size[vocab[0]] else [atoms.new(n, "sequence")]
        view = ([] if not ids.view else [rows]) + [width]
        return table.with_view(view, extra={"rows": rows, "table": table})
    atoms.set_role(vocab[0], "vocabulary")
    atoms.lock(vocab + width)
    port, tie = w.weight_port(table, "Embedding")
    onehot = PortSpec(ids.leaves(atoms) + vocab)
    weights = [onehot] + ([port] if port is not None else [])
    attrs = {"tied": tie} if tie else {}
    out = ids.leaves(atoms) + width
    op = w.add("Embedding", [], [PortSpec(out)], weights=weights, pw=0, **attrs)
    if port is None:
        raise Conflict("a table used twice where it cannot be tied")
    w.claim(op)
    return out_tv(w, list(ids.view) + [width], out, op)


@handles("cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward", "nll_loss2d")
def _loss(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    if x.kind != "act":
        return TV([], [], "const")
    atoms = w.atoms
    name = node.target.__name__.split(".")[0]
    classes = x.view[1] if x.rank > 1 else x.view[0]
    for atom in classes:
        atoms.set_role(atom, "vocabulary")
    if name.startswith("nll"):
        producer = x.source[0] if x.source else None
        if producer is not None and producer.kind == "Softmax" and \
                "log_softmax" in producer.aten[0] and w.real_users(x.extra["node"]) == 1:
            producer.kind = "SoftmaxCrossEntropy"
            producer.attrs.pop("axis", None)
            producer.aten.append(name)
        return TV([], [], "const")
    if x.leaves(atoms)[-len(atoms.leaf_list(classes)):] != atoms.leaf_list(classes) \
            or len(atoms.leaf_list(classes)) != 1:
        x = materialize(w, x, "a loss whose classes are not its last axis was re-laid out")
        classes = x.view[1] if x.rank > 1 else x.view[0]
    _softmax_op(w, x, -1 if x.rank == 1 else 1, kind="SoftmaxCrossEntropy")
    return TV([], [], "const")


# -- joins and splits --------------------------------------------------------------------------

@handles("cat", "concat")
def _cat(w: Walk, node: Any, a: dict) -> Any:
    xs = [t for t in a["tensors"] if isinstance(t, TV)]
    acts = [t for t in xs if t.kind == "act"]
    if not acts:
        return TV(w.fresh(_shape(node)), [], "const")
    dim = _dim(a.get("dim", 0), xs[0].rank)
    atoms = w.atoms
    first = acts[0]
    for t in acts[1:]:
        for i in range(first.rank):
            if i != dim:
                atoms.unify(first.view[i], t.view[i])
    shape = _shape(node)
    new = atoms.new(shape[dim])
    if atoms.leaf_list(first.view[dim]):
        atoms.set_role(new, atoms.role[atoms.leaf_list(first.view[dim])[0]])
    one = atoms.new(1)
    inputs = []
    for t in acts:
        if len(atoms.leaf_list(t.view[dim])) != 1 or t.leaves(atoms) != _order(atoms, first, t):
            raise Conflict("a concatenation of tensors in different layouts")
        atoms.lock(t.view[dim])
        inputs.append(w.port(t, [(t.view[dim][0], one)]))
    data = [new if x == atoms.leaf_list(first.view[dim])[0] else x for x in first.leaves(atoms)]
    if len(acts) < len(xs):
        w.approximate(f"{node.name}: constant parts of a concatenation are left out")
    op = w.add("Concat", inputs, [PortSpec(data, alias=[(new, one)])], order="input",
               axis=AxisOf(one))
    op.pinned.append(one)
    view = list(first.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


def _order(atoms, first: TV, t: TV) -> list[int]:
    """``t``'s leaves with ``first``'s order (the concatenated axis at its place)."""
    return [x for x in t.leaves(atoms)] if len(t.leaves(atoms)) == len(first.leaves(atoms)) else []


@handles("stack")
def _stack(w: Walk, node: Any, a: dict) -> Any:
    xs = [t for t in a["tensors"] if isinstance(t, TV)]
    dim = _dim(a.get("dim", 0), xs[0].rank + 1)
    atoms = w.atoms
    if any(t.kind != "act" for t in xs):
        return TV(w.fresh(_shape(node)), [], "const")
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
    first, rest = _split_at(atoms, leaves, count)
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
    op = w.add("Slice", [w.port(x, [(axis[0], one)])], [PortSpec(data, alias=[(new, one)])],
               order="input", axis=AxisOf(one), start=start, stop=stop)
    op.pinned.append(one)
    view = list(x.view)
    view[dim] = [new]
    return out_tv(w, view, data, op)


@handles("split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split")
def _split(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = _dim(a.get("dim", 0), x.rank)
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
    dim = _dim(a.get("dim", 0), x.rank)
    n = x.shape(w.atoms)[dim]
    outs = _unstack(w, x, dim, n) if x.kind == "act" else [x] * n
    return tuple(o.with_view(o.view[:dim] + o.view[dim + 1:]) for o in outs)


@handles("slice", "narrow")
def _slice(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = _dim(a.get("dim", 0), x.rank)
    size = x.shape(w.atoms)[dim]
    if "start" in a and "length" in a:
        start, stop = a["start"], a["start"] + a["length"]
    else:
        start = a.get("start") or 0
        stop = a.get("end")
        stop = size if stop is None or stop > size else stop
        start, stop = start % size if start < 0 else start, stop % size if stop < 0 else stop
    if a.get("step", 1) not in (1, None):
        raise Conflict("a strided slice")
    return _slice_tv(w, x, dim, int(start), int(stop))


@handles("select")
def _select(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = _dim(a["dim"], x.rank)
    size = x.shape(w.atoms)[dim]
    i = a["index"] % size
    out = _slice_tv(w, x, dim, i, i + 1)
    return out.with_view(out.view[:dim] + out.view[dim + 1:])


@handles("topk")
def _topk(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dim = _dim(a.get("dim", -1), x.rank)
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


@handles("scatter", "scatter_")
def _scatter(w: Walk, node: Any, a: dict) -> Any:
    src = a.get("src")
    if isinstance(src, TV) and "dense" in src.extra:  # zeros.scatter(d, topk idx, topk values)
        dense = src.extra["dense"]
        return dense.with_view(list(dense.view))
    raise Conflict("scatter (other than of top-k values back to their places)")


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
