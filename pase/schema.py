"""One schema per op kind: its attributes (types, ranges, defaults) and structure.

:data:`OP_SCHEMAS` is the single table of what an op of each kind may look like.
Three places lean on it:

- :class:`pase.ir.Graph` checks every op against it on construction, so a graph
  read from JSON and a graph made by :class:`pase.builder.GraphBuilder` pass the
  same checks (the builder also checks each op as it is added, so an error points
  at the call that made it);
- cost models read attributes through :func:`attr` (the stored value, or the
  kind's default) and may rely on the structure checked here: an Einsum's letters
  are its dims, a Conv's dims are ``b [g] c h w r s n`` (:func:`conv_form`), an axis is in range...;
- ``docs/ops.md`` documents each kind with the ``allowed`` texts of this table
  (``tests/test_schema.py`` checks that they agree).

Every check raises a one-line :class:`~pase.errors.GraphError` that names the op,
the attribute, port or dim at fault, and what is allowed.

Adding an op kind: add an :class:`OpSchema` row here (attributes, port counts and
a structure rule), a formula to each cost model (``cost_models/paper.py`` and
``pase/work/ops.py``), and a section to ``docs/ops.md``.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pase.errors import GraphError

if TYPE_CHECKING:  # pase.ir imports this module; at run time ops are duck-typed
    from pase.ir import Op, Port

# Largest dim size or tensor extent accepted. Costs multiply sizes in float64,
# whose integers are exact only up to 2**53; nothing real comes close.
MAX_SIZE = 2**53

# A port axis, named for exemptions from the "port extent = product of its dims"
# rule: ("input" | "output" | "weight", port index, axis index).
PortAxis = tuple[str, int, int]


# -- attribute types -------------------------------------------------------------

@dataclass(frozen=True)
class AttrType:
    """A kind of attribute value.

    ``allowed`` says in words what is accepted (``{n}`` is the op's number of
    dims); ``check(value, n)`` returns None when the value is acceptable, else a
    short reason (or "" when ``allowed`` says it all).
    """

    name: str
    allowed: str
    check: Callable[[Any, int], str | None]


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, numbers.Integral)
                                  and not isinstance(value, bool))


def _check_count(value: Any, n: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return ""
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return "too large"
    return None if finite and value >= 0 else ""


def _check_axis(value: Any, n: int) -> str | None:
    return None if _is_int(value) and 0 <= value < n else ""


def _check_axes(value: Any, n: int) -> str | None:
    if not isinstance(value, (tuple, list)) or not value:
        return ""
    if not all(_is_int(a) and 0 <= a < n for a in value):
        return ""
    return None if len(set(value)) == len(value) else "an axis is repeated"


def _pair_check(low: int) -> Callable[[Any, int], str | None]:
    def check(value: Any, n: int) -> str | None:
        ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(
            _is_int(v) and low <= v <= MAX_SIZE for v in value)
        return None if ok else ""
    return check


def _check_bool(value: Any, n: int) -> str | None:
    return None if isinstance(value, bool) else ""


def _check_eq(value: Any, n: int) -> str | None:
    if not isinstance(value, str):
        return "not a string"
    try:
        parse_einsum(value)
    except ValueError as exc:
        return str(exc)
    return None


COUNT = AttrType("number", "a finite number >= 0", _check_count)
AXIS = AttrType("integer", "an integer axis in 0..{n-1}", _check_axis)
AXES = AttrType("list of integers", "a non-empty list of distinct integer axes in 0..{n-1}",
                _check_axes)
def _spatial_check(low: int) -> Callable[[Any, int], str | None]:
    def check(value: Any, n: int) -> str | None:
        ok = isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(
            _is_int(v) and low <= v <= MAX_SIZE for v in value)
        return None if ok else ""
    return check


POSITIVE_PAIR = AttrType("[int, int]", "a pair [h, w] of integers >= 1", _pair_check(1))
NATURAL_PAIR = AttrType("[int, int]", "a pair [h, w] of integers >= 0", _pair_check(0))
POSITIVE_SPATIAL = AttrType("list of integers", "a list of integers >= 1, one per spatial axis "
                            "(1 to 3)", _spatial_check(1))
NATURAL_SPATIAL = AttrType("list of integers", "a list of integers >= 0, one per spatial axis "
                           "(1 to 3)", _spatial_check(0))
BOOL = AttrType("boolean", "true or false", _check_bool)
POSITIVE_INT = AttrType("integer", "an integer >= 1",
                        lambda v, n: None if _is_int(v) and 1 <= v <= MAX_SIZE else "")
NATURAL_INT = AttrType("integer", "an integer >= 0",
                       lambda v, n: None if _is_int(v) and 0 <= v <= MAX_SIZE else "")
OP_NAME = AttrType("string", "the name of another op of the graph",
                   lambda v, n: None if isinstance(v, str) and v else "")


def _choice(*values: str) -> AttrType:
    return AttrType("string", "one of " + ", ".join(values),
                    lambda v, n: None if isinstance(v, str) and v in values else "")


ACTIVATION = _choice("relu", "gelu", "silu", "tanh", "relu2", "none")
ELEMENTWISE_FN = _choice("add", "mul", "rotary")
RESIZE_MODE = _choice("nearest", "linear", "cubic")
EINSUM = AttrType("string", "a two-operand einsum such as \"bhlk,bhmk->bhlm\": ASCII letters, "
                            "no letter twice in one operand or in the output", _check_eq)


@dataclass(frozen=True)
class Attr:
    """One attribute of an op kind. ``default`` applies when ``required`` is False."""

    name: str
    type: AttrType
    meaning: str
    required: bool = False
    default: Any = None

    def allowed(self, n: int | None = None) -> str:
        """What is accepted, in words (with the op's rank filled in when given)."""
        text = self.type.allowed
        if n == 0:
            return text.replace("in 0..{n-1}", "of the op's dims (it has none)")
        return text.replace("{n-1}", "rank-1" if n is None else str(n - 1))


# -- einsum equations --------------------------------------------------------------

_EQ = re.compile(r"([A-Za-z]+),([A-Za-z]+)->([A-Za-z]*)")


def parse_einsum(eq: str) -> tuple[str, str, str]:
    """``"ab,bc->ac"`` -> ``("ab", "bc", "ac")``; ValueError with the reason otherwise.

    Each letter is one dim of the op. Letters in both operands but not in the
    output are contracted; every other letter must be in the output.

    >>> parse_einsum("bhlk, bhmk -> bhlm")
    ('bhlk', 'bhmk', 'bhlm')
    """
    match = _EQ.fullmatch(eq.replace(" ", ""))
    if match is None:
        raise ValueError("not of the form 'ab,bc->ac' (two operands of ASCII letters)")
    a, b, out = match.groups()
    for label, letters in (("operand 1", a), ("operand 2", b), ("the output", out)):
        twice = sorted({ch for ch in letters if letters.count(ch) > 1})
        if twice:
            raise ValueError(f"letter {twice[0]!r} appears twice in {label}")
    for ch in out:
        if ch not in a and ch not in b:
            raise ValueError(f"output letter {ch!r} is in neither operand")
    for label, letters, other in (("operand 1", a, b), ("operand 2", b, a)):
        lonely = [ch for ch in letters if ch not in other and ch not in out]
        if lonely:
            raise ValueError(f"letter {lonely[0]!r} appears only in {label} and not in the "
                             f"output (only letters in both operands may be contracted)")
    return a, b, out


# -- op schemas ---------------------------------------------------------------------

Rule = Callable[["Op", str], Iterable[PortAxis]]


@dataclass(frozen=True)
class OpSchema:
    """What an op of one kind may look like.

    ``inputs``, ``outputs`` and ``weights`` are (least, most) port counts (most
    None: no limit). ``rule(op, where)`` checks the kind's structure (dim names,
    port mappings, pinned dims) and returns the port axes whose extent is allowed
    to differ from the product of their dims' sizes because it checked them itself
    (a Conv's input height, a Concat's concatenated axis...).
    """

    kind: str
    summary: str
    builder: str
    attrs: tuple[Attr, ...]
    inputs: tuple[int, int | None]
    outputs: tuple[int, int | None]
    weights: tuple[int, int | None]
    rule: Rule
    structure: str

    def attr(self, name: str) -> Attr:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)


def _a(kind: str) -> str:
    """``a Conv``, ``an FC``, ``an Einsum``: the kind with its article."""
    return ("an " if kind[:1] in "AEIOU" or kind in ("FC", "LSTM") else "a ") + kind


def _names(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


def _axes_text(dims: tuple[tuple[str, ...], ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(axis) + "]" for axis in dims) + "]"


def _ports(op: Op, which: str) -> tuple[Port, ...]:
    return {"input": op.inputs, "output": op.outputs, "weight": op.weights}[which]


def _expect_map(op: Op, where: str, which: str, i: int, want: tuple[tuple[str, ...], ...],
                rule: str) -> None:
    got = _ports(op, which)[i].dims
    if got != want:
        raise GraphError(f"{where} {which} {i} maps its axes to {_axes_text(got)}; {rule}, "
                         f"so it must map them to {_axes_text(want)}")


def _one_each(names: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    return tuple((n,) for n in names)


def _expect_dims(op: Op, where: str, want: tuple[str, ...]) -> None:
    if op.dim_names != want:
        raise GraphError(f"{where} has dims {_names(op.dim_names)}; {_a(op.kind)} has exactly the "
                         f"dims {_names(want)}, in that order")


def _expect_pinned(op: Op, where: str, names: Iterable[str], why: str) -> None:
    for n in names:
        if n not in op.pinned:
            raise GraphError(f"{where} must pin dim {n!r} ({why}); pinned: {_names(sorted(op.pinned))}")


def _window_fits(op: Op, where: str, axis: int, size_in: int, window: int, stride: int,
                 pad: int, label: str, ceil: bool = False) -> None:
    dim = op.dims[axis]
    out = (size_in - window + 2 * pad + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size_in + pad:  # torch: the last window starts inside
        out -= 1
    if out != dim.size:
        raise GraphError(f"{where} input 0 axis {axis} has size {size_in} but dim {dim.name!r} has "
                         f"size {dim.size}; a window of {window} with stride {stride} and pad {pad} "
                         f"gives an output {label} of {out}{' (rounded up)' if ceil else ''}")


# A Conv's spatial letters by rank: the output's, then the filter's.
CONV_SPATIAL = {1: ("w", "s"), 2: ("hw", "rs"), 3: ("dhw", "qrs")}


@dataclass(frozen=True)
class ConvForm:
    """A Conv's shape of dims: grouped (a ``g`` dim), its output's spatial letters and its
    filter's, and its per-axis geometry (each a tuple of one int per spatial axis)."""

    grouped: bool
    out: str
    kernel: str
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    transposed: bool

    @property
    def channels_in(self) -> str:
        """The dims of the image's channel axis (``g c`` or ``c``)."""
        return "gc" if self.grouped else "c"

    @property
    def channels_out(self) -> str:
        return "gn" if self.grouped else "n"


def _conv_names(rank: int, grouped: bool) -> tuple[str, ...]:
    out, kernel = CONV_SPATIAL[rank]
    return ("b",) + ("g",) * grouped + ("c",) + tuple(out) + tuple(kernel) + ("n",)


_CONV_DIMS = ("exactly the dims b, c, h, w, r, s, n (2-D; 1-D: b, c, w, s, n; 3-D: b, c, d, h, w, "
              "q, r, s, n), with g after b when grouped")


def conv_form(op: Op, where: str | None = None) -> ConvForm:
    """The form of Conv ``op`` (checked: its dims, and one geometry entry per spatial axis)."""
    names = op.dim_names
    grouped = "g" in names
    rank = (len(names) - 3 - grouped) // 2
    if rank not in CONV_SPATIAL or names != _conv_names(rank, grouped):
        raise GraphError(f"{where or where_op(op)} has dims {_names(names)}; a Conv has "
                         f"{_CONV_DIMS}, in that order")
    geometry = []
    for name, fill in (("stride", 1), ("pad", 0), ("dilation", 1), ("output_padding", 0)):
        value = attr(op, name)
        value = (fill,) * rank if value is None else tuple(value)
        if len(value) != rank:
            raise GraphError(f"{where or where_op(op)} attribute {name!r} is {list(value)}; a "
                             f"{rank}-D Conv takes one entry per spatial axis ({rank})")
        geometry.append(value)
    out, kernel = CONV_SPATIAL[rank]
    return ConvForm(grouped, out, kernel, *geometry, transposed=bool(attr(op, "transposed")))


def conv_output_size(size_in: int, kernel: int, stride: int, pad: int, dilation: int,
                     output_padding: int, transposed: bool) -> int:
    """An output extent along one spatial axis, as torch computes it."""
    if transposed:
        return (size_in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1
    return (size_in + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _conv_rule(op: Op, where: str) -> list[PortAxis]:
    f = conv_form(op, where)
    _expect_pinned(op, where, f.out, "spatial conv dims are never split in this model")
    ci, co, sp = f.channels_in, f.channels_out, tuple((c,) for c in f.out)
    filt = ((tuple(ci), ("n",)) if f.transposed else (tuple(co), ("c",))) \
        + tuple((c,) for c in f.kernel)
    rule = (f"a {len(f.out)}-D{' transposed' if f.transposed else ''} Conv maps image "
            f"{_axes_text(((('b',), tuple(ci)) + sp))}, output "
            f"{_axes_text(((('b',), tuple(co)) + sp))} and filter {_axes_text(filt)}")
    _expect_map(op, where, "input", 0, (("b",), tuple(ci)) + sp, rule)
    _expect_map(op, where, "output", 0, (("b",), tuple(co)) + sp, rule)
    _expect_map(op, where, "weight", 0, filt, rule)
    if any(f.output_padding) and not f.transposed:
        raise GraphError(f"{where} has output_padding {list(f.output_padding)}; only a "
                         f"transposed Conv (transposed: true) takes output padding")
    for i, (o, k) in enumerate(zip(f.out, f.kernel)):
        size_in, dim, kernel = op.inputs[0].shape[2 + i], op.dims[op.dim_index(o)], \
            op.dims[op.dim_index(k)].size
        want = conv_output_size(size_in, kernel, f.stride[i], f.pad[i], f.dilation[i],
                                f.output_padding[i], f.transposed)
        if want != dim.size:
            raise GraphError(
                f"{where} input 0 axis {2 + i} has size {size_in} but dim {dim.name!r} has size "
                f"{dim.size}; a{' transposed' if f.transposed else ''} window of {kernel} with "
                f"stride {f.stride[i]} and pad {f.pad[i]}"
                + (f", dilation {f.dilation[i]}" if f.dilation[i] != 1 else "")
                + (f", output padding {f.output_padding[i]}" if f.output_padding[i] else "")
                + f" gives an output {_SPATIAL_LABEL[o]} of {want}")
    return [("input", 0, 2 + i) for i in range(len(f.out))]


_SPATIAL_LABEL = {"d": "depth", "h": "height", "w": "width"}


def _resize_rule(op: Op, where: str) -> list[PortAxis]:
    if len(op.dims) not in (3, 4, 5):
        raise GraphError(f"{where} has {len(op.dims)} dims ({_names(op.dim_names)}); a Resize has "
                         f"3 to 5: batch, channel, then 1 to 3 output spatial dims")
    rule = "a Resize maps input and output axis i to dim i"
    _expect_map(op, where, "input", 0, _one_each(op.dim_names), rule)
    _expect_map(op, where, "output", 0, _one_each(op.dim_names), rule)
    if op.inputs[0].shape[:2] != op.shape[:2]:
        raise GraphError(f"{where} input 0 has shape {op.inputs[0].shape}; a Resize keeps the "
                         f"batch and channel extents {op.shape[:2]}")
    return [("input", 0, i) for i in range(2, len(op.dims))]


def _pooling_rule(op: Op, where: str) -> list[PortAxis]:
    if len(op.dims) != 4:
        raise GraphError(f"{where} has {len(op.dims)} dims ({_names(op.dim_names)}); a Pooling has "
                         f"4: batch, channel, output height, output width")
    rule = "a Pooling maps input and output axis i to dim i"
    _expect_map(op, where, "input", 0, _one_each(op.dim_names), rule)
    _expect_map(op, where, "output", 0, _one_each(op.dim_names), rule)
    (kh, kw), (sh, sw), (ph, pw) = attr(op, "window"), attr(op, "stride"), attr(op, "pad")
    _, _, h, w = op.inputs[0].shape
    ceil = bool(attr(op, "ceil_mode"))
    _window_fits(op, where, 2, h, kh, sh, ph, "height", ceil)
    _window_fits(op, where, 3, w, kw, sw, pw, "width", ceil)
    return [("input", 0, 2), ("input", 0, 3)]


def _fc_rule(op: Op, where: str) -> list[PortAxis]:
    if len(op.dims) < 2 or op.dim_names[-2:] != ("n", "k"):
        raise GraphError(f"{where} has dims {_names(op.dim_names)}; an FC's dims are the input's "
                         f"leading axes, then 'n' (units) and 'k' (input features), last")
    lead = op.dim_names[:-2]
    rule = "an FC maps input (lead..., k), output (lead..., n) and weight (k, n)"
    _expect_map(op, where, "input", 0, _one_each(lead + ("k",)), rule)
    _expect_map(op, where, "output", 0, _one_each(lead + ("n",)), rule)
    _expect_map(op, where, "weight", 0, _one_each("kn"), rule)
    if attr(op, "bias") != (len(op.weights) == 2):
        raise GraphError(f"{where} has {len(op.weights)} weight(s) and bias: "
                         f"{str(attr(op, 'bias')).lower()}; an FC has its matrix, plus a bias "
                         f"(its second weight) exactly when bias is true")
    if len(op.weights) == 2:
        _check_bias(op, where, op.weights[1], ("n",))
    return []


def _einsum_rule(op: Op, where: str) -> list[PortAxis]:
    eq = attr(op, "eq")
    a, b, out = parse_einsum(eq)
    letters = sorted(set(a + b))
    if sorted(op.dim_names) != letters:
        extra = [ch for ch in letters if ch not in op.dim_names]
        missing = [n for n in op.dim_names if n not in letters]
        raise GraphError(f"{where} eq {eq!r} has letters {_names(letters)} but the op's dims are "
                         f"{_names(sorted(op.dim_names))} (letters that are no dim: "
                         f"{_names(extra)}; dims that are no letter: {_names(missing)}); each "
                         f"letter must be one dim and each dim a letter")
    weights = list(op.weights)
    if _has_attr(op, "bias") and attr(op, "bias"):
        if not weights:
            raise GraphError(f"{where} has bias: true but no weight; its bias is its last weight")
        _check_bias(op, where, weights.pop(), out)
    operands = list(op.inputs) + weights
    if len(operands) != 2:
        extra = " besides its bias" if len(weights) < len(op.weights) else ""
        raise GraphError(f"{where} has {len(op.inputs)} input(s) and {len(weights)} weight(s)"
                         f"{extra}; {_a(op.kind)} reads exactly 2 tensors (its two operands) in all")
    first = _one_each(a)
    second = _one_each(b)
    if {operands[0].dims, operands[1].dims} != {first, second}:
        got = " and ".join(_axes_text(p.dims) for p in operands)
        raise GraphError(f"{where} operands map their axes to {got}; eq {eq!r} needs one tensor "
                         f"mapped to {_axes_text(first)} and one to {_axes_text(second)}")
    _expect_map(op, where, "output", 0, _one_each(out),
                f"its output follows the output letters of eq {eq!r}")
    return []


def _has_attr(op: Op, name: str) -> bool:
    return any(a.name == name for a in schema_of(op).attrs)


def _check_bias(op: Op, where: str, port: Port, out: str | tuple[str, ...]) -> None:
    """A bias maps each axis to one output dim, in the output's order."""
    names = [axis[0] if len(axis) == 1 else None for axis in port.dims]
    order = [n for n in out if n in names]
    if not names or None in names or order != names:
        raise GraphError(f"{where} bias (its last weight) maps its axes to {_axes_text(port.dims)}; "
                         f"a bias maps each axis to one output dim ({_names(out)}), in that order")


def _lstm_rule(op: Op, where: str) -> list[PortAxis]:
    _expect_dims(op, where, ("l", "s", "b", "n", "k"))
    n, k = op.dims[3].size, op.dims[4].size
    if n != k:
        raise GraphError(f"{where} has dim 'n' of size {n} and dim 'k' of size {k}; an LSTM's "
                         f"units (n) must equal its input width (k)")
    _expect_pinned(op, where, "s", "time steps run in sequence")
    rule = "an LSTM maps input (b, s, k), output (b, s, n) and weight (l, k, n)"
    _expect_map(op, where, "input", 0, _one_each("bsk"), rule)
    _expect_map(op, where, "output", 0, _one_each("bsn"), rule)
    _expect_map(op, where, "weight", 0, _one_each("lkn"), rule)
    want = (op.dims[0].size, 2 * k, 4 * n)
    if op.weights[0].shape != want:
        raise GraphError(f"{where} weight 0 has shape {op.weights[0].shape}; an LSTM with "
                         f"l={want[0]}, k={k}, n={n} has a weight of shape (l, 2k, 4n) = {want}")
    return [("weight", 0, 1), ("weight", 0, 2)]


def _pointwise_rule(op: Op, where: str) -> list[PortAxis]:
    if not op.dims:
        raise GraphError(f"{where} has no dims; {_a(op.kind)} has one dim per axis of its input")
    rule = f"{_a(op.kind)} maps axis i of every input and output to dim i"
    for which in ("input", "output"):
        for i in range(len(_ports(op, which))):
            _expect_map(op, where, which, i, _one_each(op.dim_names), rule)
    return []


def _broadcast_weights(op: Op, where: str, what: str) -> list[PortAxis]:
    """Weights added to the output, aligned with its trailing axes as numpy broadcasts.

    Weight axis j of a rank-r weight stands for op axis ``n - r + j``: mapped to that
    dim, or unmapped (never split) with extent 1 (broadcast) or any other: the rows of
    a table read at constant indices (a position table longer than the sequence, two
    token types, T5's position buckets).
    """
    n = len(op.dims)
    exempt = []
    for j, port in enumerate(op.weights):
        r = len(port.shape)
        if r > n:
            raise GraphError(f"{where} weight {j} has {r} axes; {what} has at most the op's {n}")
        for a, axis in enumerate(port.dims):
            dim = op.dims[n - r + a]
            if axis == ():
                exempt.append(("weight", j, a))
            elif axis != (dim.name,):
                raise GraphError(f"{where} weight {j} maps axis {a} to {_axes_text((axis,))}; "
                                 f"{what} aligns its axes with the op's last {r} dims, so axis {a} "
                                 f"maps to [{dim.name}] or to nothing")
    return exempt


def _elementwise_rule(op: Op, where: str) -> list[PortAxis]:
    _pointwise_rule(op, where)
    fn = attr(op, "fn")
    if op.weights and fn != "add":
        raise GraphError(f"{where} has fn {fn!r} and {len(op.weights)} weight(s); only an add "
                         f"takes weights (parameters added to its output)")
    if fn == "mul" and len(op.inputs) < 2:
        raise GraphError(f"{where} has fn 'mul' and {len(op.inputs)} input; a product needs at "
                         f"least 2 inputs")
    if fn == "rotary":
        if len(op.inputs) != 1 or len(op.dims) < 2:
            raise GraphError(f"{where} has fn 'rotary'; a rotary embedding reads one input of "
                             f"rank >= 2 (positions on the second-last axis, features last)")
        last = op.dims[-1]
        _expect_pinned(op, where, [last.name], "rotary pairs feature i with i + d/2")
        if last.size % 2:
            raise GraphError(f"{where} dim {last.name!r} has size {last.size}; a rotary "
                             f"embedding rotates pairs of features, so it must be even")
    return _broadcast_weights(op, where, "an Elementwise weight")


def _norm_weights_rule(op: Op, where: str) -> list[PortAxis]:
    _pointwise_rule(op, where)
    if op.kind == "BatchNorm":
        if len(op.dims) < 2 and op.weights:
            raise GraphError(f"{where} has weights but one dim; a BatchNorm's scale and shift "
                             f"are per channel (dim 1)")
        dim, what = (op.dims[1].name if len(op.dims) > 1 else ""), "the channel dim (dim 1)"
    else:
        dim, what = op.dims[attr(op, "axis")].name, "the normalised axis's dim"
        if attr(op, "rms") and len(op.weights) > 1:
            raise GraphError(f"{where} has rms: true and {len(op.weights)} weights; an RMSNorm "
                             f"has a scale and no shift (at most 1 weight)")
    for j in range(len(op.weights)):
        _expect_map(op, where, "weight", j, ((dim,),),
                    f"a scale or shift is one value per entry of {what}")
    return []


def _softmax_rule(op: Op, where: str) -> list[PortAxis]:
    _pointwise_rule(op, where)
    if attr(op, "window") and not attr(op, "causal"):
        raise GraphError(f"{where} has window: {attr(op, 'window')} without causal: true; a "
                         f"sliding window keeps each query's last keys, so it needs causal")
    if attr(op, "causal"):
        n = len(op.dims)
        if n < 2 or attr(op, "axis") != n - 1 or op.dims[-1].size != op.dims[-2].size:
            raise GraphError(f"{where} has causal: true; a causal softmax runs along its last axis "
                             f"(keys) with queries on the second-last, both of one size")
    return []


def _topk_rule(op: Op, where: str) -> list[PortAxis]:
    _pointwise_rule(op, where)
    axis, k = attr(op, "axis"), attr(op, "k")
    if k > op.dims[axis].size:
        raise GraphError(f"{where} has k={k} but dim {op.dims[axis].name!r} has size "
                         f"{op.dims[axis].size}; k is at most the number of candidates")
    return []


def _moe_rule(dims: str, inputs: tuple[str, str], output: str, rule: str) -> Rule:
    """One group's dims ``dims`` and port letters, or, with routing groups (a dim ``g``
    after ``b``), ``g`` before the tokens ``l`` and the slots ``c`` on every port axis
    that holds them (:meth:`pase.builder.GraphBuilder.moe_dispatch`)."""
    def axes(letters: str, grouped: bool) -> tuple[tuple[str, ...], ...]:
        return tuple(("g", n) if grouped and n in "lc" else (n,) for n in letters)

    def check(op: Op, where: str) -> list[PortAxis]:
        grouped = "g" in op.dim_names
        at = dims.index("b") + 1
        _expect_dims(op, where, tuple(dims[:at] + "g" + dims[at:] if grouped else dims))
        for i, letters in enumerate(inputs):
            _expect_map(op, where, "input", i, axes(letters, grouped), rule)
        _expect_map(op, where, "output", 0, axes(output, grouped), rule)
        if grouped:
            _expect_pinned(op, where, "lc", "a routing group's tokens fill its slots in order")
        experts = op.dims[op.dim_names.index("x")].size
        if attr(op, "k") > experts:
            raise GraphError(f"{where} has k={attr(op, 'k')} but {experts} experts (dim 'x'); "
                             f"a token goes to at most every expert")
        return []
    return check


def _reduce_mean_rule(op: Op, where: str) -> list[PortAxis]:
    axes, keep = attr(op, "axes"), attr(op, "keepdims")
    names = op.dim_names
    rule = "a ReduceMean maps input axis i to dim i"
    _expect_map(op, where, "input", 0, _one_each(names), rule)
    if keep:
        want = tuple(() if i in axes else (n,) for i, n in enumerate(names))
        rule = "with keepdims its output keeps every axis, unmapped (size 1) at the reduced ones"
    else:
        want = tuple((n,) for i, n in enumerate(names) if i not in axes)
        rule = f"its output keeps the axes not in axes={list(axes)}"
    _expect_map(op, where, "output", 0, want, rule)
    if keep:
        shape = op.outputs[0].shape
        for i in axes:
            if shape[i] != 1:
                raise GraphError(f"{where} output 0 axis {i} has size {shape[i]}; with keepdims a "
                                 f"reduced axis has size 1")
    return []


def _size_one_pinned(op: Op, where: str, axis: int, what: str) -> str:
    dim = op.dims[axis]
    if dim.size != 1:
        raise GraphError(f"{where} dim {dim.name!r} (axis {axis}) has size {dim.size}; a "
                         f"{op.kind}'s {what} dim has size 1")
    _expect_pinned(op, where, [dim.name], f"the {what} dim is never split")
    return dim.name


def _concat_rule(op: Op, where: str) -> list[PortAxis]:
    axis = attr(op, "axis")
    _size_one_pinned(op, where, axis, "concatenated")
    rule = "a Concat maps axis i of every input and of its output to dim i"
    for which in ("input", "output"):
        for i in range(len(_ports(op, which))):
            _expect_map(op, where, which, i, _one_each(op.dim_names), rule)
    exempt: list[PortAxis] = []
    for j, port in enumerate(op.weights):
        want = tuple(() if a == axis or (port.shape[a:a + 1] == (1,) and port.dims[a:a + 1] == ((),))
                     else (n,) for a, n in enumerate(op.dim_names))
        if len(port.shape) != len(op.dims) or port.dims != want or port.dims[axis] != ():
            raise GraphError(f"{where} weight {j} maps its axes to {_axes_text(port.dims)}; a "
                             f"Concat weight has the op's rank, leaves the concatenated axis "
                             f"unmapped and maps every other axis to its dim (or leaves it "
                             f"unmapped with extent 1: broadcast)")
        exempt += [("weight", j, a) for a in range(len(port.shape)) if port.dims[a] == ()]
    total = sum(p.shape[axis] for p in op.inputs) + sum(p.shape[axis] for p in op.weights)
    if op.outputs[0].shape[axis] != total:
        raise GraphError(f"{where} output 0 axis {axis} has size {op.outputs[0].shape[axis]}; the "
                         f"inputs' and weights' sizes on that axis add up to {total}")
    exempt += [("input", i, axis) for i in range(len(op.inputs))]
    return exempt + [("output", 0, axis)]


def _slice_rule(op: Op, where: str) -> list[PortAxis]:
    axis, start, stop = attr(op, "axis"), attr(op, "start"), attr(op, "stop")
    _size_one_pinned(op, where, axis, "sliced")
    rule = "a Slice maps axis i of its input and of its output to dim i"
    for which in ("input", "output"):
        _expect_map(op, where, which, 0, _one_each(op.dim_names), rule)
    extent = op.inputs[0].shape[axis]
    if not start < stop <= extent:
        raise GraphError(f"{where} slices [{start}, {stop}) of an axis of extent {extent}; "
                         f"allowed: 0 <= start < stop <= {extent}")
    if op.outputs[0].shape[axis] != stop - start:
        raise GraphError(f"{where} output 0 axis {axis} has size {op.outputs[0].shape[axis]}; "
                         f"the slice [{start}, {stop}) has {stop - start}")
    return [("input", 0, axis), ("output", 0, axis)]


def _stack_rule(op: Op, where: str) -> list[PortAxis]:
    axis = attr(op, "axis")
    new = _size_one_pinned(op, where, axis, "stacking")
    rest = tuple(n for n in op.dim_names if n != new)
    for i in range(len(op.inputs)):
        _expect_map(op, where, "input", i, _one_each(rest),
                    "a Stack maps its inputs' axes to its dims other than the stacking one")
    _expect_map(op, where, "output", 0, _one_each(op.dim_names),
                "a Stack maps output axis i to dim i")
    if op.outputs[0].shape[axis] != len(op.inputs):
        raise GraphError(f"{where} output 0 axis {axis} has size {op.outputs[0].shape[axis]}; "
                         f"it stacks {len(op.inputs)} input(s)")
    return [("output", 0, axis)]


def _unstack_rule(op: Op, where: str) -> list[PortAxis]:
    axis = attr(op, "axis")
    gone = _size_one_pinned(op, where, axis, "unstacked")
    _expect_map(op, where, "input", 0, _one_each(op.dim_names),
                "an Unstack maps input axis i to dim i")
    rest = tuple(n for n in op.dim_names if n != gone)
    for i in range(len(op.outputs)):
        _expect_map(op, where, "output", i, _one_each(rest),
                    "an Unstack maps its outputs' axes to its dims other than the unstacked one")
    if op.inputs[0].shape[axis] != len(op.outputs):
        raise GraphError(f"{where} input 0 axis {axis} has size {op.inputs[0].shape[axis]}; it "
                         f"must equal the number of outputs, {len(op.outputs)}")
    return [("input", 0, axis)]


def _reshape_rule(flat: str) -> Rule:
    def rule(op: Op, where: str) -> list[PortAxis]:
        if not op.contiguous:
            raise GraphError(f"{where} must be contiguous (\"contiguous\": true): a reshape only "
                             f"keeps configs whose per-device blocks are contiguous")
        if not op.dims:
            raise GraphError(f"{where} has no dims; {_a(op.kind)} has one dim per axis of its "
                             f"{'input' if flat == 'output' else 'output'}")
        shaped = "input" if flat == "output" else "output"
        _expect_map(op, where, shaped, 0, _one_each(op.dim_names),
                    f"{_a(op.kind)} maps {shaped} axis i to dim i")
        _expect_map(op, where, flat, 0, (op.dim_names,),
                    f"{_a(op.kind)}'s flat {flat} is split by all its dims, in order")
        return []
    return rule


_PW = Attr("pw", COUNT, "point-wise ops (activations...) fused after the GEMM; each adds 3 "
           "FLOP per output element (1 forward, 2 backward)", default=0)
_PW_ELEMENTWISE = Attr("pw", COUNT, "further point-wise ops fused into this one; each adds 1 "
                       "FLOP per element", default=0)
_POINTWISE = ("one dim per axis of the input; every input and the output map axis i to dim i")
_ACT = Attr("act", ACTIVATION, "the point-wise function the `pw` FLOP stand for (exporters "
            "compute it when pw >= 1): its FLOP weight is in \"Model patterns\" below",
            default="relu")
_BIAS = Attr("bias", BOOL, "the last weight is a bias added to the output", default=False)
_TIED = Attr("tied", OP_NAME, "the op whose first weight is this op's matrix (a tied weight, "
             "counted once as a parameter)", default=None)
_MOE_K = Attr("k", POSITIVE_INT, "experts per token (top-k)", required=True)

OP_SCHEMAS: Mapping[str, OpSchema] = {s.kind: s for s in (
    OpSchema("Conv", "convolution (1-D, 2-D or 3-D; grouped, dilated or transposed) of an "
             "image (b, c, h, w) with filters (n, c, r, s)",
             "conv(x, (n, c, r, s), stride, pad, pw, groups=..., dilation=...)",
             (Attr("stride", POSITIVE_SPATIAL, "stride along each spatial axis (absent: 1 each)"),
              Attr("pad", NATURAL_SPATIAL, "zero padding along each spatial axis (absent: 0 "
                   "each)"),
              Attr("dilation", POSITIVE_SPATIAL, "spacing of the filter taps along each spatial "
                   "axis (absent: 1 each)"),
              Attr("transposed", BOOL, "a transposed convolution (the gradient of a convolution "
                   "with respect to its input)", default=False),
              Attr("output_padding", NATURAL_SPATIAL, "a transposed Conv's extra output rows at "
                   "the end of each spatial axis (absent: 0 each)"),
              _PW, _TIED),
             (1, 1), (1, 1), (1, 1), _conv_rule,
             "dims exactly `b c h w r s n` (h, w: the output's height and width; r, s: the "
             "filter's), `b c w s n` for 1-D, `b c d h w q r s n` for 3-D, with `g` (groups) "
             "after `b` when grouped (then c and n count channels per group; depthwise: c = 1); "
             "the output's spatial dims pinned; image maps to `[b] [c] [h] [w]` (grouped: "
             "`[b] [g c] [h] [w]`), output to `[b] [n] [h] [w]` (`[b] [g n] [h] [w]`), filter to "
             "`[n] [c] [r] [s]` (`[g n] [c] [r] [s]`; transposed: `[c] [n] [r] [s]`, "
             "`[g c] [n] [r] [s]`, as torch stores it); the image's spatial extents give the "
             "output's: `h = (H + 2 pad - dilation (r - 1) - 1) // stride + 1`, transposed "
             "`h = (H - 1) stride - 2 pad + dilation (r - 1) + output_padding + 1`; the geometry "
             "attributes have one entry per spatial axis"),
    OpSchema("Pooling", "max or average pooling of an image (b, c, h, w)",
             "pool(x, window, stride, pad)",
             (Attr("window", POSITIVE_PAIR, "pooling window (height, width)", required=True),
              Attr("stride", POSITIVE_PAIR, "stride (the builder's default: the window)",
                   required=True),
              Attr("pad", NATURAL_PAIR, "zero padding", default=(0, 0)),
              Attr("ceil_mode", BOOL, "output sizes rounded up (torch's ceil_mode): a last, "
                   "partial window", default=False)),
             (1, 1), (1, 1), (0, 0), _pooling_rule,
             "4 dims (batch, channel, output height, output width); input and output map axis "
             "i to dim i; the input's height and width give the output's as for Conv"),
    OpSchema("FC", "fully connected layer over the last axis of its input",
             "fc(x, units, pw, bias=..., act=...)", (_PW, _ACT, _BIAS, _TIED), (1, 1), (1, 1),
             (1, 2), _fc_rule,
             "dims: the input's leading axes, then `n` (units) and `k` (input features), last; "
             "input maps to `[lead...] [k]`, output to `[lead...] [n]`, weight to `[k] [n]`; "
             "with bias, a second weight of shape (n,) maps to `[n]`"),
    OpSchema("Einsum", "two-operand einsum, costed as a batched GEMM",
             "einsum(\"ble,ef->blf\", a, b, pw, roles=...)",
             (Attr("eq", EINSUM, "the equation; each letter is one dim of the op", required=True),
              _PW, _ACT, _BIAS, _TIED),
             (0, None), (1, 1), (0, None), _einsum_rule,
             "the dims are the letters of `eq` (the builder orders them: output letters, then "
             "contracted ones); 2 tensors in all (inputs made by ops, weights and graph inputs), "
             "one mapped letter by letter to each operand; the output maps to the output letters; "
             "with bias, a last weight maps each axis to one output letter, in output order"),
    OpSchema("Embedding", "embedding lookup: the einsum `abc,cd->abd` of one-hot ids with a "
             "weight", "embedding(ids, vocab, width)",
             (Attr("eq", EINSUM, "the equation; each letter is one dim of the op", required=True),
              _PW, _TIED),
             (0, None), (1, 1), (0, None), _einsum_rule, "as Einsum"),
    OpSchema("LSTM", "a stack of LSTM layers over x (b, s, e)", "lstm(x, units, layers)", (),
             (1, 1), (1, 1), (1, 1), _lstm_rule,
             "dims exactly `l s b n k` (layers, steps, batch, units, input width) with n = k; "
             "s pinned; input maps to `[b] [s] [k]`, output to `[b] [s] [n]`, weight of shape "
             "(l, 2k, 4n) to `[l] [k] [n]`"),
    OpSchema("Elementwise", "element-wise op of same-shaped tensors (add, multiply, rotary "
             "embedding...)", "elementwise(x, y, pw, fn=..., weights=...), rotary(x)",
             (_PW_ELEMENTWISE,
              Attr("fn", ELEMENTWISE_FN, "what it computes: the sum of its inputs and weights, "
                   "the product of its inputs, or a rotary position embedding of its one input",
                   default="add")),
             (1, None), (1, 1), (0, None), _elementwise_rule,
             _POINTWISE + "; weights (an add only: learned positions, biases) align with the "
             "output's last axes as numpy broadcasts, each axis mapped to that dim or unmapped "
             "(extent 1 to broadcast, or any other: the rows of a table read at constant indices); `rotary` "
             "reads one input of rank >= 2 (positions second-last, features last) and pins the "
             "last dim, of even size"),
    OpSchema("Norm", "layer normalisation over one axis (RMSNorm with rms)",
             "norm(x, axis, weights=..., rms=...)",
             (Attr("axis", AXIS, "the normalised axis", default=0),
              Attr("rms", BOOL, "RMSNorm: scale by the root mean square, no mean subtracted, no "
                   "shift", default=False)),
             (1, 1), (1, 1), (0, 2), _norm_weights_rule,
             _POINTWISE + "; up to 2 weights (scale, then shift; 1 with rms), each of shape "
             "(extent of the normalised axis,) mapped to its dim"),
    OpSchema("BatchNorm", "batch normalisation: Norm over the batch axis (the paper's model)",
             "batch_norm(x, weights=...)", (Attr("axis", AXIS, "the normalised axis", default=0),),
             (1, 1), (1, 1), (0, 2), _norm_weights_rule,
             _POINTWISE + "; up to 2 weights (scale, shift), each of shape (channels,) mapped "
             "to dim 1"),
    OpSchema("ReduceMean", "mean over some axes", "reduce_mean(x, axes, keepdims)",
             (Attr("axes", AXES, "the reduced axes", required=True),
              Attr("keepdims", BOOL, "keep reduced axes with size 1", default=False)),
             (1, 1), (1, 1), (0, 0), _reduce_mean_rule,
             "one dim per input axis; input maps axis i to dim i; the output keeps the other "
             "axes (with keepdims: every axis, the reduced ones unmapped and of size 1)"),
    OpSchema("Softmax", "softmax along one axis", "softmax(x, axis, causal=..., window=...)",
             (Attr("axis", AXIS, "the softmax axis", required=True),
              Attr("causal", BOOL, "mask keys after the query (entries above the diagonal of the "
                   "last two axes) before the softmax", default=False),
              Attr("window", NATURAL_INT, "sliding-window attention (with causal): each query "
                   "keeps its last `window` keys, itself included, and masks the earlier ones; "
                   "0: every key up to the query (cost models may price only the window)",
                   default=0)),
             (1, 1), (1, 1), (0, 0), _softmax_rule,
             _POINTWISE + "; causal: the axis is the last, the last two dims (queries, keys) "
             "have one size; a window > 0 needs causal"),
    OpSchema("TopK", "keep the k largest entries along one axis, zero the rest (MoE routing)",
             "top_k(x, k, axis, normalize)",
             (Attr("k", POSITIVE_INT, "entries kept per row", required=True),
              Attr("axis", AXIS, "the axis of candidates (experts)", required=True),
              Attr("normalize", BOOL, "divide the kept entries by their sum", default=False)),
             (1, 1), (1, 1), (0, 0), _topk_rule, _POINTWISE + "; k at most the axis's size"),
    OpSchema("MoEDispatch", "send each token to its top-k experts' buffers (mixture of experts)",
             "moe_dispatch(tokens, gates, capacity, k)", (_MOE_K,), (2, 2), (1, 1), (0, 0),
             _moe_rule("xbcel", ("ble", "blx"), "xbce",
                       "a MoEDispatch maps tokens (b, l, e), gates (b, l, x) and its expert "
                       "buffers (x, b, c, e)"),
             "dims exactly `x b c e l` (experts, batch, capacity slots per expert and sequence, "
             "width, tokens); input 0 (tokens) maps to `[b] [l] [e]`, input 1 (gates) to "
             "`[b] [l] [x]`, the output (expert buffers) to `[x] [b] [c] [e]`; k at most x; "
             "with routing groups `x b g c e l` (c and l one group's slots and tokens, both "
             "pinned), `[g l]` and `[g c]` in place of `[l]` and `[c]`"),
    OpSchema("MoECombine", "sum each token's expert outputs weighted by its gates",
             "moe_combine(expert_out, gates, k)", (_MOE_K,), (2, 2), (1, 1), (0, 0),
             _moe_rule("blexc", ("xbce", "blx"), "ble",
                       "a MoECombine maps expert outputs (x, b, c, e), gates (b, l, x) and its "
                       "output (b, l, e)"),
             "dims exactly `b l e x c`; input 0 (expert outputs) maps to `[x] [b] [c] [e]`, "
             "input 1 (gates) to `[b] [l] [x]`, the output to `[b] [l] [e]`; k at most x; "
             "with routing groups `b g l e x c` (l and c pinned), `[g l]` and `[g c]` in place "
             "of `[l]` and `[c]`"),
    OpSchema("SoftmaxCrossEntropy", "softmax and cross-entropy loss, classes on the last axis",
             "softmax_cross_entropy(x)", (), (1, 1), (1, 1), (0, 0), _pointwise_rule,
             _POINTWISE + "; the last dim is the classes"),
    OpSchema("Concat", "concatenation along one axis", "concat(xs, axis, weights=...)",
             (Attr("axis", AXIS, "the concatenated axis", required=True),),
             (1, None), (1, 1), (0, None), _concat_rule,
             "one dim per axis, the one at `axis` of size 1 and pinned; every input and the "
             "output map axis i to dim i; weights (parameters such as a class token) come first "
             "along `axis`, leave it unmapped and map every other axis to its dim or leave it "
             "unmapped with extent 1 (broadcast); the output's `axis` extent is the sum of the "
             "weights' and inputs'"),
    OpSchema("Slice", "entries start..stop-1 along one axis", "slice(x, axis, start, stop)",
             (Attr("axis", AXIS, "the sliced axis", required=True),
              Attr("start", NATURAL_INT, "first entry kept", required=True),
              Attr("stop", POSITIVE_INT, "one past the last entry kept", required=True)),
             (1, 1), (1, 1), (0, 0), _slice_rule,
             "one dim per axis, the one at `axis` of size 1 and pinned; input and output map "
             "axis i to dim i; the output's `axis` extent is `stop - start`"),
    OpSchema("Stack", "stacking along a new axis", "stack(xs, axis)",
             (Attr("axis", AXIS, "position of the new (stacking) dim", required=True),),
             (1, None), (1, 1), (0, 0), _stack_rule,
             "the inputs' dims with a new size-1 pinned dim at `axis`; inputs map to the other "
             "dims; the output maps axis i to dim i and has the number of inputs at `axis`"),
    OpSchema("Unstack", "splitting along one axis into one output per slice",
             "unstack(x, axis)", (Attr("axis", AXIS, "the unstacked axis", required=True),),
             (1, 1), (1, None), (0, 0), _unstack_rule,
             "one dim per input axis, the one at `axis` of size 1 and pinned; the input maps "
             "axis i to dim i and has one slice per output at `axis`; outputs map to the other "
             "dims"),
    OpSchema("Ravel", "flatten to 1-D (first half of a reshape)", "reshape(x, shape)", (),
             (1, 1), (1, 1), (0, 0), _reshape_rule("output"),
             "one dim per input axis; contiguous; the input maps axis i to dim i; the flat "
             "output's one axis maps to all dims, in order"),
    OpSchema("Unravel", "unflatten a 1-D tensor (second half of a reshape)",
             "reshape(x, shape)", (), (1, 1), (1, 1), (0, 0), _reshape_rule("input"),
             "one dim per output axis; contiguous; the flat input's one axis maps to all dims, "
             "in order; the output maps axis i to dim i"),
    OpSchema("Resize", "resizing (upsampling) of an image (b, c, h, w) by interpolation, "
             "1-D to 3-D", "resize(x, size, mode)",
             (Attr("mode", RESIZE_MODE, "interpolation: nearest (a copy), linear (linear, "
                   "bilinear, trilinear) or cubic (bicubic)", required=True),
              Attr("align_corners", BOOL, "torch's align_corners: corner pixels aligned "
                   "(else half-pixel centres)", default=False)),
             (1, 1), (1, 1), (0, 0), _resize_rule,
             "3 to 5 dims (batch, channel, then the output's 1 to 3 spatial dims); input and "
             "output map axis i to dim i; the input keeps the batch and channel extents, its "
             "spatial extents are free"),
)}
KINDS = tuple(OP_SCHEMAS)

# What each dim letter means: the fixed dims of the kinds above (Conv, Pooling, FC, LSTM,
# Embedding, the MoE kinds) and the letters the built-in models give Einsums and
# point-wise ops (pase.graphs). The one table behind the command's legend under a
# strategy and docs/glossary.md. A letter with another meaning in some kinds says so.
DIM_LETTERS: dict[str, str] = {
    "a": "batch (Embedding)",
    "b": "batch (Embedding: tokens)",
    "c": "channels (Conv: per group; MoE: capacity slots, Embedding: vocabulary)",
    "d": "embedding width (Embedding; Conv: output depth)",
    "e": "model width",
    "f": "feed-forward features",
    "g": "key-value heads (Conv: groups)",
    "h": "attention heads (Conv, Pooling, Resize: height)",
    "i": "input features",
    "k": "input features (attention: head width)",
    "l": "tokens (LSTM: layers)",
    "m": "key tokens",
    "n": "output features or classes (Conv: filters, per group when grouped)",
    "q": "Conv: filter depth",
    "r": "query heads per key-value head (Conv: filter height)",
    "s": "q/k/v (Conv: filter width, LSTM and FC: steps)",
    "v": "vocabulary",
    "w": "width (Conv, Pooling, Resize)",
    "x": "experts",
}


# Graph-level attributes with a meaning; any other graph attribute (``batch``...) is
# kept as information.
GRAPH_ATTRS: tuple[Attr, ...] = (
    Attr("cutoff", POSITIVE_INT, "the configuration space's default cutoff: the smallest "
         "per-device extent of a split dim (4 when absent)"),
)


# -- reading and checking --------------------------------------------------------

def check_graph_attrs(graph: str, attrs: Mapping[str, Any]) -> None:
    """Check the graph-level attributes pase reads (``cutoff``)."""
    for a in GRAPH_ATTRS:
        if a.name in attrs and a.type.check(attrs[a.name], 0) is not None:
            raise GraphError(f"graph {graph!r} attribute {a.name!r} is {_short(attrs[a.name])}; "
                             f"allowed: {a.allowed()}")


def where_op(op: Op) -> str:
    """How messages name an op: ``op 'fc1' (FC)``."""
    return f"op {op.name!r} ({op.kind})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def schema_of(op: Op) -> OpSchema:
    """The schema of ``op``'s kind; GraphError listing the known kinds otherwise."""
    try:
        return OP_SCHEMAS[op.kind]
    except (KeyError, TypeError):
        raise GraphError(f"op {op.name!r} has unknown kind {op.kind!r}; known kinds: "
                         f"{', '.join(KINDS)}") from None


def attr(op: Op, name: str) -> Any:
    """The value of attribute ``name`` of ``op``: the stored one, checked, or its default.

    Raises GraphError when the kind has no such attribute, or the value is missing
    (and required) or not allowed.
    """
    spec = schema_of(op)
    try:
        a = spec.attr(name)
    except KeyError:
        raise GraphError(f"{where_op(op)} has no attribute {name!r}; {_a(op.kind)} has: "
                         f"{_names(x.name for x in spec.attrs)}") from None
    if name not in op.attrs:
        if a.required:
            raise GraphError(f"{where_op(op)} lacks attribute {name!r} ({a.meaning}); allowed: "
                             f"{a.allowed(len(op.dims))}")
        return a.default
    value = op.attrs[name]
    why = a.type.check(value, len(op.dims))
    if why is not None:
        raise GraphError(f"{where_op(op)} attribute {name!r} is {_short(value)}"
                         f"{' (' + why + ')' if why else ''}; allowed: {a.allowed(len(op.dims))}")
    return value


def check_op(op: Op) -> None:
    """Check ``op`` against the schema of its kind; GraphError (one line) otherwise."""
    spec = schema_of(op)
    where = where_op(op)
    allowed = {a.name for a in spec.attrs}
    for name in op.attrs:
        if name not in allowed:
            raise GraphError(f"{where} has unknown attribute {name!r}; {_a(op.kind)} takes: "
                             f"{_names(a.name for a in spec.attrs)}")
    for a in spec.attrs:
        attr(op, a.name)
    for which, (least, most) in (("input", spec.inputs), ("output", spec.outputs),
                                 ("weight", spec.weights)):
        count = len(_ports(op, which))
        if count < least or (most is not None and count > most):
            allowed_count = (str(least) if least == most else
                             f"at least {least}" if most is None else f"{least} to {most}")
            raise GraphError(f"{where} has {count} {which}(s); {_a(op.kind)} has {allowed_count}")
    exempt = set(spec.rule(op, where))
    check_port_sizes(op, exempt)


def check_port_sizes(op: Op, exempt: Iterable[PortAxis] = ()) -> None:
    """Each port axis's extent must equal the product of the sizes of the dims mapped to it.

    ``exempt`` axes were checked by the kind's own rule. Axes mapped to no dim are
    never split and may have any extent.
    """
    skip = set(exempt)
    sizes = dict(zip(op.dim_names, op.shape))
    for which in ("input", "output", "weight"):
        for i, port in enumerate(_ports(op, which)):
            for a, (extent, names) in enumerate(zip(port.shape, port.dims)):
                if not names or (which, i, a) in skip:
                    continue
                product = math.prod(sizes[n] for n in names)
                if extent == product:
                    continue
                if len(names) == 1:
                    dims = f"dim {names[0]!r} has size {product}"
                else:
                    dims = (f"dims {' * '.join(names)} have sizes "
                            f"{' * '.join(str(sizes[n]) for n in names)} = {product}")
                raise GraphError(f"{where_op(op)} {which} {i} axis {a} has size {extent} but "
                                 f"{dims}; they must be equal")
