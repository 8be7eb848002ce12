"""Build graphs layer by layer: ``b.conv(x, ...)`` adds an op and returns its output.

Each method creates one op of a kind the cost models know (see
``docs/ops.md``), with the iteration space, pinned dims and port mappings of
the PaSE paper's modelling. A :class:`Value` is a tensor handle carrying its
shape, its producer, and axis names/roles that later ops reuse for their dims.
Each op is checked against the schema of its kind (:mod:`pase.schema`) as it is
added, so a bad argument (``pw=-1``, an axis out of range) fails at the call that
passed it; ``build()`` returns an immutable :class:`~pase.ir.Graph`.

Example:
    >>> b = GraphBuilder("mlp")
    >>> x = b.input((64, 512), names=("b", "k"))
    >>> h = b.fc(x, 1024, pw=1)
    >>> loss = b.softmax_cross_entropy(b.fc(h, 10))
    >>> g = b.build()
    >>> [op.kind for op in g.ops]
    ['FC', 'FC', 'SoftmaxCrossEntropy']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from pase.errors import GraphError, OptionError
from pase.ir import Dim, Graph, Op, Port, check_op
from pase.schema import parse_einsum


@dataclass(frozen=True)
class Value:
    """A tensor while building: shape, producer, and names/roles for its axes."""

    shape: tuple[int, ...]
    source: tuple[str, int] | None
    names: tuple[str, ...]
    roles: tuple[str, ...]


def _default_names(rank: int) -> tuple[str, ...]:
    return ("b", "c", "h", "w")[:rank] if rank <= 4 else tuple(f"d{i}" for i in range(rank))


class GraphBuilder:
    """Accumulates ops in build order; ``build()`` returns the validated Graph."""

    def __init__(self, name: str, **attrs: Any):
        self.name = name
        self.attrs = attrs
        self.ops: list[Op] = []
        self._counts: dict[str, int] = {}
        self._names: set[str] = set()

    # -- plumbing --------------------------------------------------------------
    def input(self, shape: Sequence[int], names: Sequence[str] | None = None,
              roles: Sequence[str] | None = None) -> Value:
        """A graph input (images, token ids, weights): not an op, adds no edges."""
        shape = tuple(int(s) for s in shape)
        names = tuple(names) if names else _default_names(len(shape))
        roles = tuple(roles) if roles else _guess_roles(names)
        return Value(shape, None, names, roles)

    def _name(self, kind: str, name: str | None) -> str:
        if name is not None:
            return name
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return f"{kind.lower()}{self._counts[kind]}"

    def _add(self, op: Op, out_names: Sequence[tuple[tuple[str, ...], tuple[str, ...]]]) -> list[Value]:
        check_op(op)
        if op.name in self._names:
            raise GraphError(f"duplicate op name {op.name!r} in graph {self.name!r}")
        self._names.add(op.name)
        self.ops.append(op)
        return [Value(p.shape, (op.name, i), names, roles)
                for i, (p, (names, roles)) in enumerate(zip(op.outputs, out_names))]

    def build(self) -> Graph:
        """The immutable, validated Graph of the ops added so far."""
        return Graph(self.name, tuple(self.ops), self.attrs, check_ops=False)  # checked in _add

    # -- shape-preserving ops -------------------------------------------------
    def _pointwise(self, kind: str, xs: Sequence[Value], name: str | None,
                   weights: Sequence[Port] = (), pinned: Sequence[str] = (), **attrs: Any) -> Value:
        if not xs:
            raise GraphError(f"{kind} needs at least one input")
        x = xs[0]
        dims = tuple(Dim(n, s, r) for n, s, r in zip(x.names, x.shape, x.roles))
        axes = tuple((n,) for n in x.names)
        for y in xs[1:]:
            if y.shape != x.shape:
                raise GraphError(f"{kind}: operand shapes differ: {x.shape} vs {y.shape}")
        op = Op(self._name(kind, name), kind, dims,
                inputs=tuple(Port(v.shape, axes, v.source) for v in xs),
                outputs=(Port(x.shape, axes),), weights=tuple(weights),
                pinned=frozenset(pinned), attrs=attrs)
        return self._add(op, [(x.names, x.roles)])[0]

    def elementwise(self, x: Value, y: Value | None = None, pw: float = 0, name: str | None = None,
                    fn: str | None = None, weights: Sequence[Sequence[int]] = ()) -> Value:
        """Element-wise ``fn`` (``add``, ``mul``) of ``x`` and ``y``, plus parameter ``weights``.

        A weight shape aligns with the trailing axes of ``x`` (numpy broadcasting): an
        axis of the dim's size maps to it, any other extent stays unmapped (1:
        broadcast; longer: its leading entries are used).
        """
        xs = [x] if y is None else [x, y]
        ports = tuple(_broadcast_port(x, shape) for shape in weights)
        extra = {} if fn is None else {"fn": fn}
        return self._pointwise("Elementwise", xs, name, ports, pw=pw, **extra)

    def rotary(self, x: Value, name: str | None = None) -> Value:
        """Rotary position embedding: positions on the second-last axis, features last.

        ``x * cos + rotate_half(x) * sin``: 3 FLOP per element (``pw = 2``); the feature
        dim is pinned, since rotate_half pairs feature i with i + d/2.
        """
        if len(x.shape) < 2:
            raise GraphError(f"rotary needs a rank >= 2 input, got shape {x.shape}")
        return self._pointwise("Elementwise", [x], name, pinned=(x.names[-1],), pw=2, fn="rotary")

    def norm(self, x: Value, axis: int = -1, name: str | None = None, weights: int = 0,
             rms: bool = False) -> Value:
        """Layer normalisation (``rms``: RMSNorm) with ``weights`` affine parameters (0-2)."""
        axis = _axis(axis, len(x.shape), "Norm")
        ports = tuple(Port((x.shape[axis],), ((x.names[axis],),)) for _ in range(weights))
        extra = {"rms": True} if rms else {}
        return self._pointwise("Norm", [x], name, ports, axis=axis, **extra)

    def batch_norm(self, x: Value, name: str | None = None, weights: int = 0) -> Value:
        """Batch normalisation (the paper's: over the batch axis) with per-channel weights."""
        ports = tuple(Port((x.shape[1],), ((x.names[1],),)) for _ in range(weights))
        return self._pointwise("BatchNorm", [x], name, ports, axis=0)

    def softmax(self, x: Value, axis: int = -1, name: str | None = None,
                causal: bool = False, window: int = 0) -> Value:
        """Softmax along ``axis``; ``causal`` masks keys after the query, and a ``window`` > 0
        (with causal) keeps only each query's last ``window`` keys (sliding-window attention)."""
        extra: dict[str, Any] = {"causal": True} if causal else {}
        if window:
            extra["window"] = window
        return self._pointwise("Softmax", [x], name, axis=_axis(axis, len(x.shape), "Softmax"),
                               **extra)

    def top_k(self, x: Value, k: int, axis: int = -1, normalize: bool = False,
              name: str | None = None) -> Value:
        """Keep the ``k`` largest entries along ``axis`` (renormalised if asked), zero the rest.

        The candidate axis is pinned: a row's selection needs all its candidates.
        """
        axis = _axis(axis, len(x.shape), "TopK")
        return self._pointwise("TopK", [x], name, pinned=(x.names[axis],), k=k, axis=axis,
                               normalize=normalize)

    def moe_dispatch(self, tokens: Value, gates: Value, capacity: int, k: int,
                     name: str | None = None, groups: int = 1) -> Value:
        """Tokens ``(b, l, e)`` to expert buffers ``(x, b, c, e)`` by the gates ``(b, l, x)``.

        ``c = capacity`` slots per expert and sequence; tokens over capacity are dropped.
        The slot dim is pinned: a token's slot is a running count over the sequence.
        ``groups > 1`` routes each of that many runs of consecutive tokens into its own
        ``capacity / groups`` slots, as each rank routes the tokens it holds (Megatron-Core
        under sequence or context parallelism): dims ``x b g c e l``, ``c`` and ``l`` one
        group's slots and tokens, both pinned, so a split of ``g`` splits the tokens and
        the slots alike (:func:`routing_groups`).
        """
        (bsz, seq, width), experts = _rank(tokens, 3, "MoEDispatch"), _rank(gates, 3, "MoEDispatch")[2]
        g = _groups(groups, seq, capacity, "MoEDispatch")
        dims = (Dim("x", experts, "expert"), Dim("b", bsz, "batch"),
                *((Dim("g", groups, "sequence"),) if g else ()),
                Dim("c", capacity // groups, "sequence"), Dim("e", width, "channel"),
                Dim("l", seq // groups, "sequence"))
        op = Op(self._name("MoEDispatch", name), "MoEDispatch", dims,
                inputs=(Port(tokens.shape, (("b",), g + ("l",), ("e",)), tokens.source),
                        Port(gates.shape, (("b",), g + ("l",), ("x",)), gates.source)),
                outputs=(Port((experts, bsz, capacity, width), (("x",), ("b",), g + ("c",), ("e",))),),
                pinned=frozenset({"c", "l"} if g else {"c"}), attrs={"k": k})
        return self._add(op, [(("x", "b", "c", "e"), ("expert", "batch", "sequence", "channel"))])[0]

    def moe_combine(self, expert_out: Value, gates: Value, k: int,
                    name: str | None = None, groups: int = 1) -> Value:
        """Expert outputs ``(x, b, c, e)`` back to tokens ``(b, l, e)``, weighted by the gates
        (the slot dim pinned, ``groups`` as in :meth:`moe_dispatch`: dims ``b g l e x c``)."""
        experts, bsz, capacity, width = _rank(expert_out, 4, "MoECombine")
        seq = _rank(gates, 3, "MoECombine")[1]
        g = _groups(groups, seq, capacity, "MoECombine")
        dims = (Dim("b", bsz, "batch"), *((Dim("g", groups, "sequence"),) if g else ()),
                Dim("l", seq // groups, "sequence"), Dim("e", width, "channel"),
                Dim("x", experts, "expert"), Dim("c", capacity // groups, "sequence"))
        op = Op(self._name("MoECombine", name), "MoECombine", dims,
                inputs=(Port(expert_out.shape, (("x",), ("b",), g + ("c",), ("e",)), expert_out.source),
                        Port(gates.shape, (("b",), g + ("l",), ("x",)), gates.source)),
                outputs=(Port((bsz, seq, width), (("b",), g + ("l",), ("e",))),),
                pinned=frozenset({"c", "l"} if g else {"c"}), attrs={"k": k})
        return self._add(op, [(("b", "l", "e"), ("batch", "sequence", "channel"))])[0]

    def softmax_cross_entropy(self, x: Value, name: str | None = None) -> Value:
        return self._pointwise("SoftmaxCrossEntropy", [x], name)

    # -- convolution and pooling ------------------------------------------------
    def conv(self, x: Value, filters: Sequence[int], stride: int | Sequence[int] = 1,
             pad: int | Sequence[int] = 0, pw: int = 0, name: str | None = None,
             groups: int = 1, dilation: int | Sequence[int] = 1) -> Value:
        """Conv2d of ``x (b, c, h, w)`` with ``filters (n, c/groups, r, s)`` as torch stores
        them; output dims never split. ``groups > 1`` adds the dim ``g`` (depthwise:
        ``groups = c``)."""
        b, c, h, w = _rank(x, 4, "Conv")
        if isinstance(filters, (str, bytes)) or len(filters) != 4:
            raise GraphError(f"Conv: filters must be (n, c, r, s), got {filters!r}")
        n, fc, r, s = (int(f) for f in filters)
        if groups == 1 and fc != c:
            raise GraphError(f"Conv: filter expects {fc} input channels, input has {c}")
        if not isinstance(groups, int) or groups < 1 or n % groups or fc * groups != c:
            raise GraphError(f"Conv: {groups!r} groups of filters {tuple(filters)} on {c} input "
                             f"channels; allowed: groups >= 1 dividing n, with c = groups x "
                             f"the filter's channels")
        (sh, sw), (ph, pw_) = _pair(stride, "Conv stride", 1), _pair(pad, "Conv pad", 0)
        dh, dw = _pair(dilation, "Conv dilation", 1)
        ho, wo = _out_size(h, dh * (r - 1) + 1, sh, ph), _out_size(w, dw * (s - 1) + 1, sw, pw_)
        g, n = (("g",), n // groups) if groups > 1 else ((), n)
        dims = (Dim("b", b, "batch"),) + (Dim("g", groups, "channel"),) * len(g) + (
            Dim("c", fc, "channel"), Dim("h", ho, "spatial"), Dim("w", wo, "spatial"),
            Dim("r", r, "window"), Dim("s", s, "window"), Dim("n", n, "parameter"))
        attrs: dict = {"stride": (sh, sw), "pad": (ph, pw_), "pw": pw}
        if (dh, dw) != (1, 1):
            attrs["dilation"] = (dh, dw)
        op = Op(self._name("Conv", name), "Conv", dims,
                inputs=(Port(x.shape, (("b",), g + ("c",), ("h",), ("w",)), x.source),),
                outputs=(Port((b, n * groups, ho, wo), (("b",), g + ("n",), ("h",), ("w",))),),
                weights=(Port((n * groups, fc, r, s), (g + ("n",), ("c",), ("r",), ("s",))),),
                pinned=frozenset({"h", "w"}), attrs=attrs)
        return self._add(op, [(("b", "c", "h", "w"), ("batch", "channel", "spatial", "spatial"))])[0]

    def resize(self, x: Value, size: Sequence[int], mode: str = "nearest",
               name: str | None = None) -> Value:
        """Resize ``x (b, c, spatial...)`` to spatial extents ``size`` (nearest, linear or
        cubic interpolation); the domain is the output, as for pooling."""
        if len(x.shape) < 3 or len(size) != len(x.shape) - 2:
            raise GraphError(f"Resize: size {tuple(size)!r} for an input of shape {x.shape}; "
                             f"allowed: one extent per spatial axis (the axes after b, c)")
        shape = tuple(x.shape[:2]) + tuple(int(v) for v in size)
        dims = tuple(Dim(n, v, r) for n, v, r in zip(x.names, shape, x.roles))
        axes = tuple((n,) for n in x.names)
        op = Op(self._name("Resize", name), "Resize", dims,
                inputs=(Port(x.shape, axes, x.source),), outputs=(Port(shape, axes),),
                attrs={"mode": mode})
        return self._add(op, [(x.names, x.roles)])[0]

    def pool(self, x: Value, window: int | Sequence[int], stride: int | Sequence[int] | None = None,
             pad: int | Sequence[int] = 0, name: str | None = None) -> Value:
        """Max/average pooling of ``x (b, c, h, w)``; the domain is the output."""
        b, c, h, w = _rank(x, 4, "Pooling")
        (kh, kw) = _pair(window, "Pooling window", 1)
        (sh, sw) = _pair(stride if stride is not None else window, "Pooling stride", 1)
        (ph, pw_) = _pair(pad, "Pooling pad", 0)
        ho, wo = _out_size(h, kh, sh, ph), _out_size(w, kw, sw, pw_)
        dims = (Dim("b", b, "batch"), Dim("c", c, "channel"), Dim("h", ho, "spatial"),
                Dim("w", wo, "spatial"))
        axes = (("b",), ("c",), ("h",), ("w",))
        op = Op(self._name("Pooling", name), "Pooling", dims,
                inputs=(Port(x.shape, axes, x.source),), outputs=(Port((b, c, ho, wo), axes),),
                attrs={"window": (kh, kw), "stride": (sh, sw), "pad": (ph, pw_)})
        return self._add(op, [(x.names, x.roles)])[0]

    # -- GEMM-shaped ops -----------------------------------------------------
    def fc(self, x: Value, units: int, pw: float = 0, name: str | None = None,
           bias: bool = False, act: str | None = None) -> Value:
        """Fully connected layer over the last axis of ``x``; leading axes fold into m."""
        lead_names = tuple(x.names[:-1])
        lead_roles = tuple(x.roles[:-1])
        k = x.shape[-1]
        dims = tuple(Dim(n, s, r) for n, s, r in zip(lead_names, x.shape[:-1], lead_roles)) + (
            Dim("n", units, "parameter"), Dim("k", k, "reduction"))
        lead = tuple((n,) for n in lead_names)
        out_shape = x.shape[:-1] + (units,)
        op = Op(self._name("FC", name), "FC", dims,
                inputs=(Port(x.shape, lead + (("k",),), x.source),),
                outputs=(Port(out_shape, lead + (("n",),)),),
                weights=(Port((k, units), (("k",), ("n",))),)
                + ((Port((units,), (("n",),)),) if bias else ()),
                attrs=_gemm_attrs(pw, act, bias, None))
        return self._add(op, [(lead_names + ("k",), lead_roles + ("channel",))])[0]

    def einsum(self, eq: str, a: Value, b: Value, pw: float = 0, name: str | None = None,
               roles: dict[str, str] | None = None, kind: str = "Einsum", bias: str | None = None,
               act: str | None = None, tied: str | None = None) -> Value:
        """Two-operand einsum; the domain is the output letters, then the reduced ones.

        ``bias`` names the output letters a bias parameter spans (``"f"``); ``act`` the
        point-wise function of ``pw``; ``tied`` the op whose first weight is this one's.
        """
        if not isinstance(eq, str):
            raise GraphError(f"{kind}: eq must be a string such as 'ab,bc->ac', got {eq!r}")
        try:
            la, lb, out = parse_einsum(eq)
        except ValueError as exc:
            raise GraphError(f"{kind} {eq!r}: {exc}") from None
        sizes: dict[str, int] = {}
        for letters, v in ((la, a), (lb, b)):
            if len(letters) != len(v.shape):
                raise GraphError(f"{kind} {eq!r}: operand {letters!r} has rank {len(v.shape)}")
            for ch, s in zip(letters, v.shape):
                if sizes.setdefault(ch, s) != s:
                    raise GraphError(f"{kind} {eq!r}: letter {ch!r} has sizes {sizes[ch]} and {s}")
        reduced = [ch for ch in dict.fromkeys(la + lb) if ch not in out]
        order = list(out) + reduced
        roles = roles or {}
        dims = tuple(Dim(ch, sizes[ch], roles.get(ch, "other")) for ch in order)
        ports = [Port(v.shape, tuple((ch,) for ch in letters), v.source)
                 for letters, v in ((la, a), (lb, b))]
        inputs = tuple(p for p in ports if p.source is not None)
        weights = tuple(p for p in ports if p.source is None)
        if bias is not None:
            if any(ch not in out for ch in bias):
                raise GraphError(f"{kind} {eq!r}: bias letters {bias!r} must be output letters")
            letters = [ch for ch in out if ch in bias]
            weights += (Port(tuple(sizes[ch] for ch in letters), tuple((ch,) for ch in letters)),)
        out_shape = tuple(sizes[ch] for ch in out)
        attrs = {"eq": f"{la},{lb}->{out}"} | _gemm_attrs(pw, act, bias is not None, tied)
        op = Op(self._name(kind, name), kind, dims, inputs=inputs,
                outputs=(Port(out_shape, tuple((ch,) for ch in out)),), weights=weights,
                attrs=attrs)
        return self._add(op, [(tuple(out), tuple(roles.get(ch, "other") for ch in out))])[0]

    def embedding(self, ids: Value, vocab: int, width: int, name: str | None = None,
                  tied: str | None = None) -> Value:
        """Embedding lookup as the einsum ``abc,cd->abd`` of a one-hot input with a weight.

        ``tied`` names another op whose first parameter is this table (shared embeddings).
        """
        bsz, seq = _rank(ids, 2, "Embedding")
        onehot = self.input((bsz, seq, vocab), names=("b", "l", "v"))
        weight = self.input((vocab, width), names=("v", "e"))
        out = self.einsum("abc,cd->abd", onehot, weight, name=name, kind="Embedding", tied=tied,
                          roles={"a": "batch", "b": "sequence", "c": "vocabulary", "d": "channel"})
        return Value(out.shape, out.source, ("b", "l", "e"), ("batch", "sequence", "channel"))

    def lstm(self, x: Value, units: int, layers: int, name: str | None = None) -> Value:
        """A stack of LSTM layers over ``x (b, s, e)``; the sequence dim is never split."""
        b, s, e = _rank(x, 3, "LSTM")
        if units != e:
            raise GraphError(f"LSTM: units ({units}) must equal the input width ({e})")
        dims = (Dim("l", layers, "layer"), Dim("s", s, "sequence"), Dim("b", b, "batch"),
                Dim("n", units, "parameter"), Dim("k", e, "channel"))
        op = Op(self._name("LSTM", name), "LSTM", dims,
                inputs=(Port(x.shape, (("b",), ("s",), ("k",)), x.source),),
                outputs=(Port((b, s, units), (("b",), ("s",), ("n",))),),
                weights=(Port((layers, 2 * e, 4 * units), (("l",), ("k",), ("n",))),),
                pinned=frozenset({"s"}))
        return self._add(op, [(("b", "s", "e"), ("batch", "sequence", "channel"))])[0]

    # -- layout ops ------------------------------------------------------------
    def reduce_mean(self, x: Value, axes: Sequence[int], keepdims: bool = False,
                    name: str | None = None) -> Value:
        axes = tuple(sorted(_axis(a, len(x.shape), "ReduceMean") for a in axes))
        dims = tuple(Dim(n, s, r) for n, s, r in zip(x.names, x.shape, x.roles))
        keep = [i for i in range(len(x.shape)) if i not in axes]
        if keepdims:
            out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
            out_axes = tuple(() if i in axes else (x.names[i],) for i in range(len(x.shape)))
            names, roles = x.names, x.roles
        else:
            out_shape = tuple(x.shape[i] for i in keep)
            out_axes = tuple((x.names[i],) for i in keep)
            names, roles = tuple(x.names[i] for i in keep), tuple(x.roles[i] for i in keep)
        op = Op(self._name("ReduceMean", name), "ReduceMean", dims,
                inputs=(Port(x.shape, tuple((n,) for n in x.names), x.source),),
                outputs=(Port(out_shape, out_axes),), attrs={"axes": axes, "keepdims": keepdims})
        return self._add(op, [(names, roles)])[0]

    def concat(self, xs: Sequence[Value], axis: int = 1, name: str | None = None,
               weights: Sequence[Sequence[int]] = ()) -> Value:
        """Concatenate along ``axis``; the domain has size 1 there, so it is never split.

        ``weights`` are parameter shapes placed before the inputs (a class token): extent
        1 on an axis other than ``axis`` broadcasts there.
        """
        if not xs:
            raise GraphError("Concat needs at least one input")
        x = xs[0]
        axis = _axis(axis, len(x.shape), "Concat")
        for y in xs[1:]:
            if y.shape[:axis] + y.shape[axis + 1:] != x.shape[:axis] + x.shape[axis + 1:]:
                raise GraphError(f"Concat: shapes {x.shape} and {y.shape} differ off axis {axis}")
        dims = tuple(Dim(n, 1 if i == axis else s, r)
                     for i, (n, s, r) in enumerate(zip(x.names, x.shape, x.roles)))
        axes = tuple((n,) for n in x.names)
        ports = []
        for shape in weights:
            shape = tuple(int(s) for s in shape)
            if len(shape) != len(x.shape):
                raise GraphError(f"Concat: weight shape {shape} has not the rank of {x.shape}")
            ports.append(Port(shape, tuple(() if a == axis or (s == 1 and x.shape[a] != 1) else (n,)
                                           for a, (s, n) in enumerate(zip(shape, x.names)))))
        out_shape = tuple(sum(y.shape[axis] for y in list(xs) + ports) if i == axis else s
                          for i, s in enumerate(x.shape))
        op = Op(self._name("Concat", name), "Concat", dims,
                inputs=tuple(Port(y.shape, axes, y.source) for y in xs),
                outputs=(Port(out_shape, axes),), weights=tuple(ports),
                pinned=frozenset({x.names[axis]}), attrs={"axis": axis})
        return self._add(op, [(x.names, x.roles)])[0]

    def slice(self, x: Value, axis: int, start: int, stop: int, name: str | None = None) -> Value:
        """Entries ``start .. stop - 1`` along ``axis`` (the axis stays); never split there."""
        axis = _axis(axis, len(x.shape), "Slice")
        dims = tuple(Dim(n, 1 if i == axis else s, r)
                     for i, (n, s, r) in enumerate(zip(x.names, x.shape, x.roles)))
        axes = tuple((n,) for n in x.names)
        out_shape = tuple(stop - start if i == axis else s for i, s in enumerate(x.shape))
        if min(out_shape) < 1:
            raise GraphError(f"Slice: [{start}, {stop}) is empty")
        op = Op(self._name("Slice", name), "Slice", dims,
                inputs=(Port(x.shape, axes, x.source),), outputs=(Port(out_shape, axes),),
                pinned=frozenset({x.names[axis]}), attrs={"axis": axis, "start": start, "stop": stop})
        return self._add(op, [(x.names, x.roles)])[0]

    def stack(self, xs: Sequence[Value], axis: int = 0, new_name: str = "s",
              name: str | None = None) -> Value:
        """Stack along a new axis; its domain dim has size 1, so it is never split."""
        if not xs:
            raise GraphError("Stack needs at least one input")
        x = xs[0]
        axis = _axis(axis, len(x.shape) + 1, "Stack")
        names = x.names[:axis] + (new_name,) + x.names[axis:]
        roles = x.roles[:axis] + ("other",) + x.roles[axis:]
        shape = x.shape[:axis] + (1,) + x.shape[axis:]
        dims = tuple(Dim(n, s, r) for n, s, r in zip(names, shape, roles))
        in_axes = tuple((n,) for n in x.names)
        out_shape = x.shape[:axis] + (len(xs),) + x.shape[axis:]
        op = Op(self._name("Stack", name), "Stack", dims,
                inputs=tuple(Port(y.shape, in_axes, y.source) for y in xs),
                outputs=(Port(out_shape, tuple((n,) for n in names)),),
                pinned=frozenset({new_name}), attrs={"axis": axis})
        return self._add(op, [(names, roles)])[0]

    def unstack(self, x: Value, axis: int = 0, name: str | None = None) -> list[Value]:
        """Split along ``axis`` into ``x.shape[axis]`` outputs; that dim is never split."""
        axis = _axis(axis, len(x.shape), "Unstack")
        shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
        dims = tuple(Dim(n, s, r) for n, s, r in zip(x.names, shape, x.roles))
        out_names = x.names[:axis] + x.names[axis + 1:]
        out_roles = x.roles[:axis] + x.roles[axis + 1:]
        out_shape = x.shape[:axis] + x.shape[axis + 1:]
        out_port = Port(out_shape, tuple((n,) for n in out_names))
        op = Op(self._name("Unstack", name), "Unstack", dims,
                inputs=(Port(x.shape, tuple((n,) for n in x.names), x.source),),
                outputs=(out_port,) * x.shape[axis], pinned=frozenset({x.names[axis]}),
                attrs={"axis": axis})
        return self._add(op, [(out_names, out_roles)] * x.shape[axis])

    def reshape(self, x: Value, shape: Sequence[int], names: Sequence[str] | None = None,
                roles: Sequence[str] | None = None, name: str | None = None) -> Value:
        """A reshape is a Ravel to 1-D followed by an Unravel (two ops)."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != math.prod(x.shape):
            raise GraphError(f"reshape: {x.shape} has {math.prod(x.shape)} elements, "
                             f"target {shape} has {math.prod(shape)}")
        flat = self._ravel(x, None if name is None else name + "_ravel")
        names = tuple(names) if names else _default_names(len(shape))
        roles = tuple(roles) if roles else _guess_roles(names)
        return self._unravel(flat, shape, names, roles, name)

    def _ravel(self, x: Value, name: str | None) -> Value:
        dims = tuple(Dim(n, s, r) for n, s, r in zip(x.names, x.shape, x.roles))
        size = math.prod(x.shape)
        op = Op(self._name("Ravel", name), "Ravel", dims,
                inputs=(Port(x.shape, tuple((n,) for n in x.names), x.source),),
                outputs=(Port((size,), (x.names,)),), contiguous=True)
        return self._add(op, [(("flat",), ("other",))])[0]

    def _unravel(self, x: Value, shape: tuple[int, ...], names: tuple[str, ...],
                 roles: tuple[str, ...], name: str | None) -> Value:
        dims = tuple(Dim(n, s, r) for n, s, r in zip(names, shape, roles))
        op = Op(self._name("Unravel", name), "Unravel", dims,
                inputs=(Port(x.shape, (names,), x.source),),
                outputs=(Port(shape, tuple((n,) for n in names)),), contiguous=True)
        return self._add(op, [(names, roles)])[0]


def check_model_options(model: str, **values: Any) -> None:
    """OptionError unless every value is an integer >= 1 (a model's sizes and counts).

    >>> check_model_options("mlp", batch=0)
    Traceback (most recent call last):
    pase.errors.OptionError: model 'mlp' option batch must be an integer >= 1, got 0
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OptionError(f"model {model!r} option {name} must be an integer >= 1, "
                              f"got {value!r}")


def _gemm_attrs(pw: float, act: str | None, bias: bool, tied: str | None) -> dict[str, Any]:
    """A GEMM's attributes, leaving out those at their defaults (graphs stay as before)."""
    attrs: dict[str, Any] = {"pw": pw}
    if act is not None:
        attrs["act"] = act
    if bias:
        attrs["bias"] = True
    if tied is not None:
        attrs["tied"] = tied
    return attrs


def _broadcast_port(x: Value, shape: Sequence[int]) -> Port:
    """A parameter of ``shape`` aligned with the trailing axes of ``x``."""
    shape = tuple(int(s) for s in shape)
    if len(shape) > len(x.shape):
        raise GraphError(f"a weight of shape {shape} has more axes than {x.shape}")
    lead = len(x.shape) - len(shape)
    return Port(shape, tuple((n,) if s == size else ()
                             for s, n, size in zip(shape, x.names[lead:], x.shape[lead:])))


_ROLE_GUESS = {"b": "batch", "c": "channel", "h": "spatial", "w": "spatial", "l": "sequence",
               "s": "sequence", "e": "channel", "v": "vocabulary", "k": "channel", "n": "parameter"}


def _guess_roles(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(_ROLE_GUESS.get(n, "other") for n in names)


def _axis(axis: int, rank: int, kind: str) -> int:
    """``axis`` in ``-rank..rank-1`` as ``0..rank-1`` (GraphError otherwise)."""
    if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
        raise GraphError(f"{kind}: axis {axis!r} is out of range; allowed: integers in "
                         f"{-rank}..{rank - 1} for a rank-{rank} tensor")
    return axis % rank


def routing_groups(seq: int, capacity: int, most: int = 64) -> int:
    """The routing groups of a mixture-of-experts layer (:meth:`GraphBuilder.moe_dispatch`):
    the largest count up to ``most`` that divides both the sequence and the capacity, so
    that every way a layout splits the sequence (tp under sequence parallelism, cp) up to
    ``most`` ranks can route each rank's own tokens into its own share of the slots, with
    the capacity unchanged."""
    return max(d for d in range(1, most + 1) if seq % d == 0 and capacity % d == 0)


def _groups(groups: int, seq: int, capacity: int, kind: str) -> tuple[str, ...]:
    """``("g",)`` for grouped routing, ``()`` for one group; GraphError where ``groups``
    does not divide the sequence and the capacity."""
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or \
            seq % groups or capacity % groups:
        raise GraphError(f"{kind}: groups={groups!r}; allowed: a positive integer dividing the "
                         f"sequence ({seq}) and the capacity ({capacity})")
    return ("g",) if groups > 1 else ()


def _rank(x: Value, rank: int, kind: str) -> tuple[int, ...]:
    if len(x.shape) != rank:
        raise GraphError(f"{kind} expects a rank-{rank} input, got shape {x.shape}")
    return x.shape


def _pair(v: int | Sequence[int], what: str, low: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= ``low``, as a pair (GraphError otherwise)."""
    pair = (v, v) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= low
                                 for x in pair):
        raise GraphError(f"{what} is {v!r}; allowed: an integer >= {low} or a pair of them")
    return (int(pair[0]), int(pair[1]))


def _out_size(size: int, window: int, stride: int, pad: int) -> int:
    out = (size - window + 2 * pad) // stride + 1
    if out < 1:
        raise GraphError(f"window {window} with stride {stride} and pad {pad} does not fit size {size}")
    return out
