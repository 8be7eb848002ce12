"""Per-op, per-device work for every config: FLOP, collectives, memory, tiles.

FLOP are standard units, as device peaks and MFU count them: a multiply-add is
TWO FLOP. A GEMM of per-device sizes ``m' n' k'`` does ``2 m'n'k'`` FLOP forward
and ``4 m'n'k'`` backward (input and weight gradients); ``matmul_flop`` is the
forward part of that (``2 m'n'k'``). What is not a multiply-add stays one FLOP
per element operation, with the PaSE paper's counts (``docs/cost-model.md``): a
GEMM's ``pw`` point-wise ops on its output (``pw m'n'`` forward, ``2 pw m'n'``
backward) and its bias (one add per output element forward, two backward), and
the other ops' element counts, one third forward and two thirds backward. The
paper's own model (``cost_models/paper.py``) has its own formulas and keeps the
paper's unit (a multiply-add is one FLOP); nothing here feeds it.

An Embedding is a gather, not a product: no FLOP, but memory traffic
(``forward_traffic``, ``backward_traffic``: bytes per device, that the seconds-based
models price at memory speed). Forward it reads the looked-up rows and writes the
output (``2 x`` its output tile); backward it scatter-adds the output's gradient
into the table's gradient (reads the gradient, reads and writes those rows of the
table's gradient: ``3 x``), as the performance model's kernels count it. It keeps
the collectives of the one-hot product it is written as (``abc,cd->abd``): the
output's all-reduce over a split vocabulary (Megatron's vocabulary-parallel
embedding) and the table's gradient sync over the token dims.

Collectives follow from the GEMM view ``C[m, n] = A[m, k] B[k, n]``:

- forward, all-reduce of the output tile over the devices splitting ``k``;
- backward, all-reduce of ``dA`` (A's tile) over the devices splitting ``n``;
- ``dB`` (B's tile) all-reduced over the devices splitting ``m`` (the batch-like
  dims): phase ``gradient`` when B is a parameter (it may overlap later backward
  compute), ``backward`` when B is an activation (its producer waits for it).

An all-reduce over several split dims is one all-reduce per dim, in turn (as
XLA compiles it; see :func:`_per_dim`).

An operand gets no gradient when it is neither a parameter nor made by an op
(the embedding's one-hot ids). A parameter is a weight port with no batch-role
axis. Non-GEMM ops carry the paper's all-reduces (norms, softmaxes, mean), halo
exchanges (pooling) and the LSTM's per-step cell re-layout; see each function.

Memory per device, by the rules of :mod:`pase.work.memory` (the performance model's
too): each parameter's weight and gradient at ``bytes_per_element``, the optimizer's
fp32 state (Adam's two moments; an fp32 master copy under 16-bit weights), plus the
activations kept for the backward pass (each op's output tiles) at ``bytes_per_element``.

Attributes are read through :func:`pase.schema.attr`; the formulas rely on the
structure each kind's schema guarantees (``docs/ops.md``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pase.errors import GraphError, OptionError
from pase.ir import Op, Port
from pase.schema import attr, conv_form, parse_einsum
from pase.work.memory import OPTIMIZER_STATE, kept_bytes, state_split
from pase.work.tiles import overlap_elements, port_tiles

PHASES = ("forward", "backward", "gradient")


@dataclass(frozen=True)
class Collective:
    """A collective an op needs, per config.

    ``nbytes`` is the buffer per device for one round; ``rounds`` sequential
    repetitions (LSTM time steps); ``dims`` the op dims whose devices form the
    group (devices differing only in those coordinates). ``phase`` is one of
    ``forward``, ``backward`` (blocks the producer's backward) or ``gradient``
    (a parameter-gradient sync that only the end of the step waits for).
    ``port`` names the tensor a GEMM's all-reduce produces whole when its
    neighbour may only slice it: ``"out"`` (the forward output over the
    reduction-split devices) or ``"in<i>"`` (input ``i``'s gradient); the
    alpha-beta model's ``reduce_scatter`` option prices those on the edge.
    """

    kind: str
    phase: str
    nbytes: np.ndarray
    dims: tuple[int, ...]
    rounds: np.ndarray
    label: str
    port: str | None = None  # "out": the op's output, "in<i>": input i's gradient (reduce_scatter)
    weight: int | None = None  # a parameter-gradient sync: the index of the weight it syncs


@dataclass(frozen=True)
class OpWork:
    """What each device does for each config of ``op`` (arrays of length K).

    ``matmul_flop`` is the part of ``forward_flop`` that is the op's matrix
    products (2 FLOP per multiply-add; no bias, no point-wise tail), 0 for ops
    that are not products. ``forward_traffic`` and ``backward_traffic`` are the bytes
    of memory traffic of the work that is priced by memory, not FLOP (an Embedding's
    gather and scatter-add; 0 for every other kind, whose FLOP carry its cost)."""

    op: Op
    configs: np.ndarray
    forward_flop: np.ndarray
    backward_flop: np.ndarray
    matmul_flop: np.ndarray
    forward_traffic: np.ndarray
    backward_traffic: np.ndarray
    collectives: tuple[Collective, ...]
    parameter_bytes: np.ndarray
    state_bytes: np.ndarray
    activation_bytes: np.ndarray
    input_tiles: tuple[np.ndarray, ...]
    output_tiles: tuple[np.ndarray, ...]
    bytes_per_element: float = 4.0
    # state bytes per parameter byte (pase.work.memory: fp32 Adam keeps 4 copies' worth)
    state_factor: float = OPTIMIZER_STATE["adam"]

    @property
    def flop(self) -> np.ndarray:
        return self.forward_flop + self.backward_flop

    @property
    def traffic(self) -> np.ndarray:
        """Bytes of memory traffic per device, forward plus backward."""
        return self.forward_traffic + self.backward_traffic

    @property
    def memory(self) -> np.ndarray:
        """Bytes per device: parameter and optimizer state plus kept activations."""
        return self.state_bytes + self.activation_bytes

    @property
    def devices(self) -> np.ndarray:
        return np.prod(self.configs, axis=1)

    def group_size(self, c: Collective) -> np.ndarray:
        return np.prod(self.configs[:, list(c.dims)], axis=1) if c.dims else np.ones(len(self.configs))


def op_work(op: Op, configs: np.ndarray, bytes_per_element: float = 4,
            optimizer: str = "adam") -> OpWork:
    """The per-device work of ``op`` for each row of ``configs`` (``(K, ndims)``)."""
    if not bytes_per_element > 0:
        raise OptionError(f"bytes_per_element must be positive, got {bytes_per_element!r}")
    try:
        formula = _KINDS[op.kind]
    except KeyError:
        raise GraphError(f"no work formula for op {op.name!r} of kind {op.kind!r}; known kinds: "
                         f"{', '.join(sorted(_KINDS))}") from None
    configs = np.asarray(configs, dtype=np.int64)
    cfg = configs.astype(np.float64)
    flop, colls = formula(op, cfg, float(bytes_per_element))
    colls = [one for c in colls for one in _per_dim(c)]
    fwd, bwd, matmul = flop
    traffic = _TRAFFIC.get(op.kind, _no_traffic)(op, cfg, float(bytes_per_element))
    weight, gradient, state = state_split(bytes_per_element, optimizer)
    elements = sum((np.prod(port_tiles(op, p, configs), axis=1) for p in owned_parameters(op)),
                   start=np.zeros(len(configs)))
    outs = tuple(port_tiles(op, p, configs) for p in op.outputs)
    acts = kept_bytes(outs, len(configs), bytes_per_element)
    per_parameter = weight + gradient + state
    return OpWork(op, configs, fwd, bwd, matmul, *traffic, tuple(colls),
                  elements * bytes_per_element, elements * per_parameter, acts,
                  tuple(port_tiles(op, p, configs) for p in op.inputs), outs,
                  float(bytes_per_element), per_parameter / float(bytes_per_element))


# -- helpers -------------------------------------------------------------------

def _per_dim(c: Collective) -> list[Collective]:
    """An all-reduce over several split dims runs as one all-reduce per dim, in turn,
    each over the devices splitting that dim: XLA's partitioner reduces a partial sum
    one sharded dim at a time (``x@W`` with two contracted dims split on two mesh axes
    compiles to two chained all-reduces of the whole tile), which moves more than one
    all-reduce over the combined group (2 x 2(2-1)/2 = 2 tiles vs 2(4-1)/4 = 1.5)."""
    if c.kind != "all-reduce" or len(c.dims) < 2:
        return [c]
    return [Collective(c.kind, c.phase, c.nbytes, (d,), c.rounds, c.label, c.port, c.weight)
            for d in c.dims]


def owned_parameters(op: Op) -> list[Port]:
    """Parameters this op holds in memory: a tied matrix (``tied``) belongs to its owner."""
    params = [p for p in op.weights if op.is_parameter(p)]
    if "tied" in op.attrs and op.weights and params and params[0] is op.weights[0]:
        params = params[1:]
    return params


def _weight_syncs(op: Op, cfg: np.ndarray, dt: float, ports) -> list[Collective]:
    """Gradient all-reduces of parameter ``ports`` over the dims they do not map."""
    colls = []
    for port in ports:
        if not op.is_parameter(port):
            continue
        mapped = {n for axis in port.dims for n in axis}
        others = tuple(i for i, n in enumerate(op.dim_names) if n not in mapped)
        colls.append(_ar("gradient", _tile_elems(op, port, cfg) * dt, others, "dW (parameters)",
                         weight=_weight_index(op, port)))
    return colls


def _bias(op: Op, cfg: np.ndarray, dt: float, out_dims) -> tuple[np.ndarray, list[Collective]]:
    """A GEMM's bias: one add per output element forward, its gradient summed over the
    devices splitting output dims it does not span."""
    if not attr(op, "bias"):
        return np.zeros(len(cfg)), []
    port = op.weights[-1]
    mapped = {n for axis in port.dims for n in axis}
    group = tuple(i for i in out_dims if op.dim_names[i] not in mapped)
    out = _tile_elems(op, op.outputs[0], cfg)
    return out, [_ar("gradient", _tile_elems(op, port, cfg) * dt, group, "dbias (weights)",
                     weight=_weight_index(op, port))]


def _idx(op: Op, names) -> tuple[int, ...]:
    return tuple(op.dim_index(n) for n in names)


def _prod(cfg: np.ndarray, op: Op, idx: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(per-device extent, group size) of the dims ``idx``."""
    sizes = np.asarray([op.dims[i].size for i in idx], dtype=np.float64)
    split = np.prod(cfg[:, list(idx)], axis=1) if idx else np.ones(len(cfg))
    return float(np.prod(sizes)) / split, split


def _tile_elems(op: Op, port: Port, cfg: np.ndarray) -> np.ndarray:
    return np.prod(port_tiles(op, port, cfg.astype(np.int64)), axis=1)


def _split13(total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, backward, matmul) FLOP of an op that is no product: a third of
    ``total`` forward, two thirds backward."""
    return total / 3.0, 2.0 * total / 3.0, np.zeros_like(total)


def _ar(phase: str, nbytes, dims, label: str, rounds=1.0, kind: str = "all-reduce",
        port: str | None = None, weight: int | None = None) -> Collective:
    nbytes = np.asarray(nbytes, dtype=np.float64)
    return Collective(kind, phase, nbytes, tuple(dims), np.broadcast_to(
        np.asarray(rounds, dtype=np.float64), nbytes.shape), label, port, weight)


def _weight_index(op: Op, port: Port | None) -> int | None:
    """The index of ``port`` among ``op``'s weights (None when it is not one)."""
    return next((j for j, w in enumerate(op.weights) if w is port), None)


# A formula returns ((forward, backward, matmul) FLOP, collectives).
Formula = Callable[[Op, np.ndarray, float],
                   tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[Collective]]]


def _gemm(op: Op, cfg: np.ndarray, dt: float, batch, m, n, k, a: Port | None, b: Port | None):
    """A (batched) GEMM: FLOP and the three all-reduces of the module docstring.
    Backward is twice forward: the products for dA and dB, the point-wise tail's
    gradient twice as in the paper."""
    bt, _ = _prod(cfg, op, batch)
    mt, _ = _prod(cfg, op, m)
    nt, _ = _prod(cfg, op, n)
    kt, _ = _prod(cfg, op, k)
    pw = attr(op, "pw")
    matmul = 2.0 * bt * mt * nt * kt  # 2 FLOP per multiply-add
    fwd = matmul + bt * pw * mt * nt
    colls = [_ar("forward", bt * mt * nt * dt, k, "output", port="out")]
    for port, dims, name in ((a, n, "dA"), (b, m, "dB")):
        if port is None:
            continue
        if op.is_parameter(port):
            colls.append(_ar("gradient", _tile_elems(op, port, cfg) * dt, dims, f"{name} (weights)",
                             weight=_weight_index(op, port)))
        elif port.source is not None:
            colls.append(_ar("backward", _tile_elems(op, port, cfg) * dt, dims, name,
                             port=next((f"in{i}" for i, q in enumerate(op.inputs) if q is port), None)))
    return (fwd, 2.0 * fwd, matmul), colls


def _conv(op: Op, cfg: np.ndarray, dt: float):
    """A GEMM per group (``g`` batches it, sharding the filters with no reduction, like n):
    m = b and the output pixels, n = filters, k = channels and filter taps. Dilation
    spaces the taps and costs nothing more. A transposed Conv does its multiply-adds per
    *input* pixel (each scatters a filter-sized patch), as torch's FlopCounterMode counts."""
    f = conv_form(op)
    gemm = _gemm(op, cfg, dt, _idx(op, "g" if f.grouped else ""), _idx(op, "b" + f.out),
                 _idx(op, "n"), _idx(op, "c" + f.kernel), op.inputs[0], op.weights[0])
    if not f.transposed:
        return gemm
    (fwd, _, matmul), colls = gemm
    ratio = math.prod(op.inputs[0].shape[2:]) / math.prod(op.shape[op.dim_index(c)] for c in f.out)
    fwd = fwd + (ratio - 1.0) * matmul
    return (fwd, 2.0 * fwd, ratio * matmul), colls


def _with_bias(op: Op, cfg: np.ndarray, dt: float, result, out_dims):
    (fwd, bwd, matmul), colls = result
    extra, syncs = _bias(op, cfg, dt, out_dims)
    return (fwd + extra, bwd + 2.0 * extra, matmul), colls + syncs


def _fc(op: Op, cfg: np.ndarray, dt: float):
    lead = tuple(range(len(op.dims) - 2))
    gemm = _gemm(op, cfg, dt, (), lead, _idx(op, "n"), _idx(op, "k"), op.inputs[0], op.weights[0])
    return _with_bias(op, cfg, dt, gemm, lead + _idx(op, "n"))


def _einsum(op: Op, cfg: np.ndarray, dt: float):
    la, lb, out = parse_einsum(attr(op, "eq"))
    names = op.dim_names
    batch = [c for c in names if c in la and c in lb and c in out]
    ms = [c for c in names if c in la and c not in lb]
    ns = [c for c in names if c in lb and c not in la]
    ks = [c for c in names if c in la and c in lb and c not in out]
    weights = list(op.weights)
    if op.kind == "Einsum" and attr(op, "bias"):
        weights.pop()
    ports = list(op.inputs) + weights
    a = next(p for p in ports if p.dims == tuple((c,) for c in la))
    b = next(p for p in ports if p.dims == tuple((c,) for c in lb) and p is not a)
    gemm = _gemm(op, cfg, dt, _idx(op, batch), _idx(op, ms), _idx(op, ns), _idx(op, ks), a, b)
    if not ks:  # no contracted dim: a broadcast multiply, not a matrix product (as torch counts)
        (fwd, bwd, matmul), colls = gemm
        gemm = (fwd, bwd, np.zeros_like(matmul)), colls
    if op.kind != "Einsum":
        return gemm
    return _with_bias(op, cfg, dt, gemm, _idx(op, out))


def _embedding(op: Op, cfg: np.ndarray, dt: float):
    """A lookup: the collectives of its one-hot product (module docstring), none of that
    product's FLOP; a point-wise tail (``pw``) keeps its per-element FLOP."""
    (fwd, bwd, matmul), colls = _einsum(op, cfg, dt)
    return (fwd - matmul, bwd - 2.0 * matmul, np.zeros_like(matmul)), colls


def _embedding_traffic(op: Op, cfg: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) bytes per device: read the looked-up rows and write the output;
    backward, read the output's gradient and add it into those rows of the table's
    gradient (read and write)."""
    out = _tile_elems(op, op.outputs[0], cfg) * dt
    return 2.0 * out, 3.0 * out


def _no_traffic(op: Op, cfg: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    zero = np.zeros(len(cfg))
    return zero, zero


def _lstm(op: Op, cfg: np.ndarray, dt: float):
    """The paper's GEMM per layer (m = s*b, n = 4e, k = 2e, pw = 3; 2 FLOP per
    multiply-add, 1 per point-wise op) plus per-step traffic.

    Each device runs ``l/cl`` layers of ``s`` steps; per step it all-reduces its
    gate tile over the k-split devices and re-lays its cell output (split b, n)
    as the next step's input (split b, k), forward and backward.
    """
    size = dict(zip(op.dim_names, op.shape))
    c = {name: cfg[:, op.dim_index(name)] for name in op.dim_names}
    e = size["n"]
    bt, mt = size["l"] / c["l"], size["s"] * size["b"] / (c["s"] * c["b"])
    nt, kt = 4 * e / c["n"], 2 * e / c["k"]
    matmul = 2.0 * bt * mt * nt * kt
    fwd = matmul + 3 * bt * mt * nt
    steps = bt * size["s"] / c["s"]
    rows = size["b"] / c["b"]
    relayout = overlap_elements((size["b"], e), np.stack([c["b"], c["n"]], axis=1),
                                np.stack([c["b"], c["k"]], axis=1))
    colls = [_ar("forward", rows * nt * dt, _idx(op, "k"), "gates", steps),
             _ar("forward", relayout * dt, _idx(op, "nk"), "cell re-layout", steps, "exchange"),
             _ar("backward", rows * kt * dt, _idx(op, "n"), "dA", steps),
             _ar("backward", relayout * dt, _idx(op, "nk"), "cell re-layout", steps, "exchange"),
             _ar("gradient", bt * nt * kt * dt, _idx(op, "sb"), "dB (weights)",
                 weight=next((j for j, w in enumerate(op.weights) if op.is_parameter(w)), None))]
    return (fwd, 2.0 * fwd, matmul), colls


def _elems(op: Op, cfg: np.ndarray) -> np.ndarray:
    return np.prod(np.asarray(op.shape, dtype=np.float64) / cfg, axis=1)


def _pooling(op: Op, cfg: np.ndarray, dt: float):
    """Output elements; a halo exchange with the h/w neighbours, forward and backward."""
    _, _, h, w = op.inputs[0].shape
    kh, kw = attr(op, "window")
    cb, cc, ch, cw = (cfg[:, i] for i in range(4))
    bt, ct, ht, wt = op.shape[0] / cb, op.shape[1] / cc, h / ch, w / cw
    halo = ((ht + np.where(ch > 1, kh, 0)) * (wt + np.where(cw > 1, kw, 0)) - ht * wt) * bt * ct
    hw = _idx(op, op.dim_names[2:4])
    return _split13(_elems(op, cfg)), [_ar("forward", halo * dt, hw, "halo", kind="exchange"),
                                       _ar("backward", halo * dt, hw, "halo", kind="exchange")]


# FLOP per output element of a Resize, and the input rows a split spatial axis needs from
# its neighbours (both sides together): a copy; 2 taps per axis; 4 taps per axis.
RESIZE_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
RESIZE_HALO = {"nearest": 0, "linear": 2, "cubic": 4}


def resize_weight(op: Op) -> float:
    """FLOP per output element: 1 for nearest (a copy), else a multiply-add per tap."""
    mode, rank = attr(op, "mode"), len(op.dims) - 2
    return 1.0 if mode == "nearest" else 2.0 * RESIZE_TAPS[mode] ** rank


def resize_halo(op: Op, cfg: np.ndarray) -> np.ndarray:
    """Input elements a device receives from its spatial neighbours, per config."""
    grow = RESIZE_HALO[attr(op, "mode")]
    tiles = np.asarray(op.inputs[0].shape, dtype=np.float64) / cfg
    grown = tiles.copy()
    grown[:, 2:] += np.where(cfg[:, 2:] > 1, grow, 0)
    spatial = np.prod(grown[:, 2:], axis=1) - np.prod(tiles[:, 2:], axis=1)
    return spatial * tiles[:, 0] * tiles[:, 1]


def _resize(op: Op, cfg: np.ndarray, dt: float):
    """Pooling in reverse: output elements times the mode's weight; a halo exchange with
    the spatial neighbours (linear and cubic modes), forward and backward."""
    halo = resize_halo(op, cfg)
    sp = tuple(range(2, len(op.dims)))
    return _split13(resize_weight(op) * _elems(op, cfg)), [
        _ar("forward", halo * dt, sp, "halo", kind="exchange"),
        _ar("backward", halo * dt, sp, "halo", kind="exchange")]


def _elementwise(op: Op, cfg: np.ndarray, dt: float):
    """The paper's ``1 + pw`` FLOP per element (add, product, rotary alike); parameter
    operands (learned positions, biases) sync their gradients over the dims they skip."""
    return _split13((1.0 + attr(op, "pw")) * _elems(op, cfg)), _weight_syncs(op, cfg, dt, op.weights)


def _norm(op: Op, cfg: np.ndarray, dt: float):
    """16 FLOP/element; the paper's 4 all-reduces of row statistics (2 forward,
    2 backward) over the normalised axis. RMSNorm (``rms``) has one statistic:
    12 FLOP/element and half of those. Gradient syncs only for the parameters the
    op has (scale, shift): a weightless norm has none to sync (the paper's model
    charges 4 per-feature sums regardless; XLA compiles none)."""
    axis = attr(op, "axis")
    tile = np.asarray(op.shape, dtype=np.float64) / cfg
    elems = np.prod(tile, axis=1)
    rms = op.kind == "Norm" and attr(op, "rms")
    flop, rounds = (12.0, 1) if rms else (16.0, 2)
    return _split13(flop * elems), [
        _ar("forward", elems / tile[:, axis] * dt, (axis,), "statistics", rounds),
        _ar("backward", elems / tile[:, axis] * dt, (axis,), "statistics", rounds),
        *_weight_syncs(op, cfg, dt, op.weights)]


def _reduce_mean(op: Op, cfg: np.ndarray, dt: float):
    zero = np.zeros(len(cfg))
    return (zero, zero, zero), [_ar("forward", _elems(op, cfg) * dt, tuple(attr(op, "axes")), "mean")]


def _softmax(op: Op, cfg: np.ndarray, dt: float):
    axis = attr(op, "axis")
    tile = np.asarray(op.shape, dtype=np.float64) / cfg
    elems = np.prod(tile, axis=1)
    rows = elems / tile[:, axis]
    full = float(op.shape[axis])
    mask = elems if attr(op, "causal") else 0.0  # one select per element
    return _split13(4.0 * elems + elems * full + mask), [
        _ar("forward", rows * dt, (axis,), "max and sum", 2),
        _ar("backward", rows * full * dt, (axis,), "rows")]


def _top_k(op: Op, cfg: np.ndarray, dt: float):
    """k passes of a max along the axis: ``3k`` FLOP per element in all, and ``k``
    all-reduces of the row maxima when the axis is split."""
    axis, k = attr(op, "axis"), float(attr(op, "k"))
    tile = np.asarray(op.shape, dtype=np.float64) / cfg
    elems = np.prod(tile, axis=1)
    return _split13(3.0 * k * elems), [_ar("forward", elems / tile[:, axis] * dt, (axis,),
                                           "top-k maxima", k)]


def _moe(op: Op, cfg: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per device, the FLOP of one multiply-add (2) per token, chosen expert and
    width entry (``2 b l k e`` in all, spread over every split), and each port's
    tile elements."""
    size = dict(zip(op.dim_names, op.shape))  # grouped routing: g groups of l tokens
    dense = 2.0 * size["b"] * size.get("g", 1) * size["l"] * size["e"] * float(attr(op, "k"))
    tiles = {"in0": _tile_elems(op, op.inputs[0], cfg), "in1": _tile_elems(op, op.inputs[1], cfg),
             "out": _tile_elems(op, op.outputs[0], cfg)}
    return dense / np.prod(cfg, axis=1), tiles


def _moe_dispatch(op: Op, cfg: np.ndarray, dt: float):
    """GShard's dispatch einsum ``blxc,ble->xbce`` with a k-sparse mask: partial
    buffers summed over the devices splitting tokens (l), token gradients over the
    devices splitting experts or slots. The all-to-all of expert parallelism is the
    re-distribution from this op (tokens split by batch) to the experts (split by x)."""
    fwd, t = _moe(op, cfg)
    return (fwd, fwd, fwd), [_ar("forward", t["out"] * dt, _idx(op, "l"), "partial buffers"),
                        _ar("backward", t["in0"] * dt, _idx(op, "xc"), "dtokens")]


def _moe_combine(op: Op, cfg: np.ndarray, dt: float):
    """GShard's combine einsum ``blxc,xbce->ble`` with k-sparse gates: outputs summed
    over the devices splitting experts or slots; expert-output gradients over those
    splitting tokens, gate gradients over those splitting the width."""
    fwd, t = _moe(op, cfg)
    return (fwd, 2.0 * fwd, fwd), [_ar("forward", t["out"] * dt, _idx(op, "xc"), "partial tokens"),
                              _ar("backward", t["in0"] * dt, _idx(op, "l"), "dexperts"),
                              _ar("backward", t["in1"] * dt, _idx(op, "e"), "dgates")]


def _softmax_xent(op: Op, cfg: np.ndarray, dt: float):
    tile = np.asarray(op.shape, dtype=np.float64) / cfg
    rows = np.prod(tile[:, :-1], axis=1)
    last = len(op.dims) - 1
    # A split class axis needs the row max, the picked label logit and the sum of
    # exponentials from every shard forward, and the gradient's row sum backward.
    # The loss mean (one scalar) is summed once per split row dim, as XLA compiles it.
    scalar = np.full(len(cfg), dt)
    return _split13(4.0 * np.prod(tile, axis=1) + 2.0 * rows), [
        _ar("forward", rows * dt, (last,), "max and sum", 2),
        _ar("forward", rows * dt, (last,), "label logit"),
        _ar("backward", rows * dt, (last,), "row sum of the gradient"),
        *(_ar("forward", scalar, (d,), "loss mean") for d in range(last))]


def _free(op: Op, cfg: np.ndarray, dt: float):
    """Layout ops compute nothing; parameter operands (a class token) sync gradients."""
    zero = np.zeros(len(cfg))
    return (zero, zero, zero), _weight_syncs(op, cfg, dt, op.weights)


_KINDS: dict[str, Formula] = {
    "Conv": _conv, "FC": _fc, "Einsum": _einsum, "Embedding": _embedding, "LSTM": _lstm,
    "Pooling": _pooling, "Resize": _resize, "Elementwise": _elementwise, "Norm": _norm,
    "BatchNorm": _norm,
    "ReduceMean": _reduce_mean, "Softmax": _softmax, "SoftmaxCrossEntropy": _softmax_xent,
    "TopK": _top_k, "MoEDispatch": _moe_dispatch, "MoECombine": _moe_combine,
    "Concat": _free, "Slice": _free, "Stack": _free, "Unstack": _free, "Ravel": _free,
    "Unravel": _free,
}
KNOWN_KINDS = tuple(sorted(_KINDS))
# Kinds priced by their memory traffic: (forward, backward) bytes per device.
_TRAFFIC = {"Embedding": _embedding_traffic}
