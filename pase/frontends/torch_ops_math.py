"""ATen handlers that compute: products, norms, attention, element-wise ops, embeddings
and losses (convolutions, pooling and resizing: :mod:`pase.frontends.torch_ops_conv`)."""
from __future__ import annotations

import math
from typing import Any

from pase.frontends.torch_handlers import (
    as_list,
    dim_letters,
    handles,
    node_shape,
    split_at,
    wrap_dim,
)
from pase.frontends.torch_ir import AxisOf, Conflict, PortSpec
from pase.frontends.torch_layout import (
    binary,
    contract,
    materialize,
    out_tv,
    permute,
    unary,
)
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import ACT_PW, Walk

# -- products ------------------------------------------------------------------------------

@handles("linear")
def _linear(w: Walk, node: Any, a: dict) -> Any:
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    lead = "".join(dim_letters(x.rank - 1))
    w.atoms.set_role(weight.view[0][0] if weight.view else 0, "parameter")
    return contract(w, x, weight, f"{lead}Z,YZ->{lead}Y", bias=bias)




@handles("addmm")
def _addmm(w: Walk, node: Any, a: dict) -> Any:
    if a["mat2"].kind == "param":
        w.atoms.set_role(a["mat2"].view[1][0], "parameter")
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
            lead = "".join(dim_letters(y.rank - 2))
            return contract(w, x, y, f"Z,{lead}ZY->{lead}Y")
        lead = "".join(dim_letters(x.rank - 2))
        return contract(w, x, y, f"{lead}XZ,Z->{lead}X")
    n = max(x.rank, y.rank) - 2
    lead = "".join(dim_letters(n))
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


# -- norms ---------------------------------------------------------------------------------

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
    if len(as_list(shape)) != 1:
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
    axis = x.view[wrap_dim(dim, x.rank)]
    if len(atoms.leaf_list(axis)) != 1:
        x = materialize(w, x, "a softmax over a merged axis was re-laid out")
        axis = x.view[wrap_dim(dim, x.rank)]
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
    if q.rank >= 4 and hq != hk and hk > 1 and hq % hk == 0:  # GQA (1 kv head: broadcast)
        leaves = atoms.cut(heads_q, [hk])
        group = [x for x in leaves if True]
        g_part, r_part = split_at(atoms, group, hk)
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
    lead = "".join(dim_letters(n))
    if q.rank > k.rank:  # the query's extra heads axis (GQA)
        klead = lead[:-2] + lead[-2]
    else:
        klead = lead
    scores = contract(w, q, k, f"{lead}XZ,{klead}YZ->{lead}XY", suffix=".scores")
    bias = a.get("attn_mask")
    if isinstance(bias, TV) and bias.kind == "param":  # a learned bias (T5's buckets)
        scores = binary(w, scores, bias, "add")
    probs = _softmax_op(w, scores, -1, causal=bool(a.get("is_causal")))
    out = contract(w, probs, v, f"{lead}XY,{klead}YZ->{lead}XZ", suffix=".context")
    if qv is not None and q.rank != a["query"].rank:
        out = out.with_view(out.view[:-4] + [out.view[-4] + out.view[-3]] + out.view[-2:])
    return out




# -- element-wise ----------------------------------------------------------------------------

# Activations with no IR ``act`` of their own: the FLOP weight of the one they resemble
# (hardswish and mish gate x as silu does, hardsigmoid is piecewise linear as relu).
_LIKE = {"hardswish": "silu", "mish": "silu", "hardsigmoid": "relu"}


@handles("gelu", "relu", "silu", "tanh", "hardswish", "hardsigmoid", "mish")
def _activation(w: Walk, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0].rstrip("_")
    like = _LIKE.get(name)
    return unary(w, a["self"], 3 * ACT_PW[like or name], act=None if like else name)


@handles("sigmoid", "exp", "neg", "rsqrt", "sqrt", "reciprocal", "abs", "log", "square",
         "cos", "sin", "erf", "hardtanh", "leaky_relu", "elu", "pow", "clamp", "softplus", "logical_not", "tril", "triu", "clamp_min",
         "clamp_max", "sign", "floor", "ceil", "round", "log1p", "expm1", "gelu_backward")
def _pointwise(w: Walk, node: Any, a: dict) -> Any:
    x = a.get("self", a.get("input"))
    if not isinstance(x, TV):
        return x
    heavy = node.target.__name__.split(".")[0] in ("sigmoid", "erf", "softplus")
    return unary(w, x, 3 * ACT_PW["silu"] if heavy else 1)


@handles("add", "sub", "mul", "div", "rsub", "true_divide", "maximum", "minimum", "where", "masked_fill")
def _binary(w: Walk, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0].rstrip("_")
    if name in ("where", "masked_fill"):
        x = a.get("self") if name == "where" else a.get("self")
        others = [v for k, v in a.items() if isinstance(v, TV) and v.kind == "act"]
        x = others[-1] if name == "where" and others else a.get("self")
        if isinstance(x, TV) and x.kind != "act":  # a masked parameter: broadcast, no op
            return _broadcast_view(w, x, node_shape(node))
        return unary(w, x, 1) if isinstance(x, TV) else x
    fn = {"rsub": "sub", "true_divide": "div", "maximum": "add", "minimum": "add"}.get(name, name)
    return binary(w, a["self"], a["other"], fn)


def _broadcast_view(w: Walk, x: TV, shape: tuple[int, ...]) -> TV:
    """``x`` viewed at the broadcast ``shape``: new atoms, not in its data, where it grows."""
    view = w.fresh(shape[:len(shape) - x.rank])
    for axis, s in zip(x.view, shape[len(shape) - x.rank:]):
        view.append(axis if math.prod(w.atoms.size[q] for q in axis) == s else [w.atoms.new(s)])
    return x.with_view(view)


@handles("mean", "sum")
def _reduce(w: Walk, node: Any, a: dict) -> Any:
    x = a["self"]
    dims = a.get("dim")
    if not isinstance(x, TV) or x.kind != "act":
        return x
    if dims is None or len(as_list(dims)) == 0:  # to a scalar (a loss): nothing to split
        return TV([], [], "const")
    dims = sorted({wrap_dim(d, x.rank) for d in as_list(dims)})
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
        # Only ``arange(rows)`` reads the table row for row, so only then is the row axis
        # the index's axis; any other constant index (fewer positions, token types, buckets)
        # reads a part of the table, which stays whole in its reader's weight port.
        shape = ids.shape(atoms)
        whole = _arange_length(a_node(node, "indices")) == atoms.size[vocab[0]]
        last = len(shape) - 1 if whole and shape and shape[-1] == atoms.size[vocab[0]] else None
        view = [vocab if i == last else [atoms.new(s, "sequence" if i == len(shape) - 1 else
                                                   "other")]
                for i, s in enumerate(shape)] + [width]
        return table.with_view(view, extra={"table": table})
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


def a_node(node: Any, name: str) -> Any:
    """The FX node bound to argument ``name`` of ``node`` (positional or keyword)."""
    schema = getattr(node.target, "_schema", None)
    names = [arg.name for arg in schema.arguments] if schema is not None else []
    if name in node.kwargs:
        return node.kwargs[name]
    i = names.index(name) if name in names else -1
    return node.args[i] if 0 <= i < len(node.args) else None


# Ops that keep an index tensor's values in order (an arange stays an arange).
_SAME_VALUES = {"unsqueeze", "view", "reshape", "_unsafe_view", "expand", "_to_copy", "to",
                "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "flatten"}


def _arange_length(node: Any) -> int | None:
    """``n`` when the FX ``node`` is ``arange(n)`` (start 0, step 1) seen through views."""
    import torch.fx

    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        if name in _SAME_VALUES:
            node = node.args[0]
            continue
        if name != "arange":
            return None
        nums = [a for a in node.args if isinstance(a, int)]
        start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums + [1])[:3]
        return end if start == 0 and step == 1 else None
    return None


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


