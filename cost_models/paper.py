"""The PaSE paper's cost model (Elango, IPDPS 2021), reproduced exactly.

Costs are FLOP. Communication is converted to FLOP with the FLOP-to-word ratio
``r = peak_tflops * 1000 / (bandwidth_GBps / 8)`` (a word is 8 bytes). Every
formula is the paper's, simplifications included (BatchNorm normalised over the
batch axis, spatial conv dims never split, one costed edge per producer-consumer
pair); ``docs/cost-model.md`` writes them out. Better models belong in other cost
models.

All formulas are vectorised over an op's configs: ``cfg`` is a ``(K, ndims)``
float array and each function returns a ``(K,)`` array. Attributes are read
through :func:`pase.schema.attr`, and each formula relies on the structure the
op's schema guarantees (``docs/ops.md``): a Conv's dims are ``b [g] c h w r s n``, an
Einsum's dims are the letters of its ``eq``, an axis is in range.
"""
from __future__ import annotations

import math

import numpy as np

from pase.costing import CostModel, array_key, op_signature, pairwise
from pase.errors import GraphError, OptionError
from pase.ir import Graph, Op, Port
from pase.registry import COST_MODELS
from pase.schema import attr, conv_form, parse_einsum
from pase.work.ops import RESIZE_TAPS, resize_halo
from pase.work.tiles import overlap_elements, port_factors


def flop_per_word(tflops: float, bandwidth_gbps: float) -> float:
    """FLOP a device computes in the time one 8-byte word crosses a link."""
    return tflops * 1000.0 / (bandwidth_gbps / 8.0)


def allreduce(r: float, words: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Ring all-reduce of ``words`` among ``q`` devices, in FLOP (0 when q = 1)."""
    return r * (words / q) * 2.0 * (q - 1.0)


def gemm(r: float, m, n, k, cm, cn, ck, pw: int = 0, batch=1.0) -> np.ndarray:
    """A (batched) GEMM's compute (forward + two backward) plus its three all-reduces."""
    mt, nt, kt = m / cm, n / cn, k / ck
    compute = 3.0 * mt * nt * kt + 3.0 * pw * mt * nt
    comm = allreduce(r, mt * nt, ck) + allreduce(r, mt * kt, cn) + allreduce(r, nt * kt, cm)
    return batch * (compute + comm)


def _cols(op: Op, cfg: np.ndarray, names: str | list[str]) -> tuple[np.ndarray, float]:
    """Product of the configs and of the sizes of the named dims."""
    names = list(names)
    idx = [op.dim_index(n) for n in names]
    return np.prod(cfg[:, idx], axis=1), float(math.prod(op.dims[i].size for i in idx))


# -- layer costs, one function per op kind ---------------------------------------

def conv_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """The paper's GEMM (m = b h w, n, k = c r s), one per group when grouped; a
    transposed Conv's multiply-adds run per input pixel (``pase.work.ops._conv``)."""
    f = conv_form(op)
    cm, m = _cols(op, cfg, "b" + f.out)
    cn, n = _cols(op, cfg, "n")
    ck, k = _cols(op, cfg, "c" + f.kernel)
    cg, g = _cols(op, cfg, "g" if f.grouped else "")
    if f.transposed:  # the input's pixels stand for the output's in m (spatial dims are pinned)
        m = m * math.prod(op.inputs[0].shape[2:]) / math.prod(op.shape[op.dim_index(c)]
                                                             for c in f.out)
    return gemm(r, m, n, k, cm, cn, ck, attr(op, "pw"), batch=g / cg)


def _weight_allreduce(r: float, op: Op, cfg: np.ndarray, port: Port) -> np.ndarray:
    """All-reduce of a parameter's gradient tile over the devices splitting dims it lacks."""
    mapped = {n for axis in port.dims for n in axis}
    tile = np.prod(np.asarray(port.shape, dtype=np.float64) / port_factors(op, port, cfg.astype(np.int64)), axis=1)
    others = [i for i, n in enumerate(op.dim_names) if n not in mapped]
    return allreduce(r, tile, np.prod(cfg[:, others], axis=1))


def bias_cost(r: float, op: Op, cfg: np.ndarray, out: list[str]) -> np.ndarray:
    """A GEMM's bias (``bias: true``): 3 FLOP per output element (as one ``pw``) plus the
    all-reduce of its gradient over the devices splitting output dims it does not span."""
    if not attr(op, "bias"):
        return np.zeros(cfg.shape[0])
    port = op.weights[-1]
    spanned = {n for axis in port.dims for n in axis}
    tile = np.prod(_tile(op, cfg)[:, [op.dim_index(n) for n in out]], axis=1)
    others = [op.dim_index(n) for n in out if n not in spanned]
    bias_tile = np.prod(np.asarray(port.shape, dtype=np.float64)
                        / port_factors(op, port, cfg.astype(np.int64)), axis=1)
    return 3.0 * tile + allreduce(r, bias_tile, np.prod(cfg[:, others], axis=1))


def fc_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    lead = list(op.dim_names[:-2])
    cm, m = _cols(op, cfg, lead)
    cn, n = _cols(op, cfg, "n")
    ck, k = _cols(op, cfg, "k")
    return gemm(r, m, n, k, cm, cn, ck, attr(op, "pw")) + bias_cost(r, op, cfg, lead + ["n"])


def einsum_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    a, b, out = parse_einsum(attr(op, "eq"))
    batch = [ch for ch in op.dim_names if ch in a and ch in b and ch in out]
    ms = [ch for ch in op.dim_names if ch in a and ch not in b]
    ns = [ch for ch in op.dim_names if ch in b and ch not in a]
    ks = [ch for ch in op.dim_names if ch in a and ch in b and ch not in out]
    cb, bsize = _cols(op, cfg, batch)
    cm, m = _cols(op, cfg, ms)
    cn, n = _cols(op, cfg, ns)
    ck, k = _cols(op, cfg, ks)
    cost = gemm(r, m, n, k, cm, cn, ck, attr(op, "pw"), batch=bsize / cb)
    return cost + bias_cost(r, op, cfg, list(out)) if op.kind == "Einsum" else cost


def lstm_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    sizes = dict(zip(op.dim_names, op.shape))
    layers, seq, bsz, e = sizes["l"], sizes["s"], sizes["b"], sizes["n"]
    c = {n: cfg[:, op.dim_index(n)] for n in op.dim_names}
    cost = gemm(r, seq * bsz, 4 * e, 2 * e, c["s"] * c["b"], c["n"], c["k"], pw=3,
                batch=layers / c["l"])
    # Re-layout between a cell's output (split b, n) and the next step's input (split b, k).
    src = np.stack([c["b"], c["n"]], axis=1)
    dst = np.stack([c["b"], c["k"]], axis=1)
    words = overlap_elements((bsz, e), src, dst)
    return cost + layers * seq * r * words


def pooling_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    elems = np.prod(np.asarray(op.shape, dtype=np.float64) / cfg, axis=1)
    _, _, h, w = op.inputs[0].shape
    kh, kw = attr(op, "window")
    cb, cc, ch, cw = (cfg[:, i] for i in range(4))
    b_tile, c_tile, h_tile, w_tile = op.shape[0] / cb, op.shape[1] / cc, h / ch, w / cw
    h_grown = h_tile + np.where(ch > 1, kh, 0)
    w_grown = w_tile + np.where(cw > 1, kw, 0)
    halo = (h_grown * w_grown - h_tile * w_tile) * b_tile * c_tile
    return elems + r * halo


def resize_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """Pooling in reverse: output elements times the mode's weight (1 per tap, the paper's
    unit: a multiply-add is one FLOP; nearest copies one), plus the halo."""
    elems = np.prod(np.asarray(op.shape, dtype=np.float64) / cfg, axis=1)
    mode = attr(op, "mode")
    weight = 1.0 if mode == "nearest" else RESIZE_TAPS[mode] ** (len(op.dims) - 2)
    return weight * elems + r * resize_halo(op, cfg)


def _tile(op: Op, cfg: np.ndarray) -> np.ndarray:
    return np.asarray(op.shape, dtype=np.float64) / cfg


def _weights_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    return sum((_weight_allreduce(r, op, cfg, p) for p in op.weights), start=np.zeros(len(cfg)))


def elementwise_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """``(1 + pw)`` per element (add, product, rotary); parameter operands (learned
    positions) add the all-reduce of their gradients."""
    cost = (1.0 + attr(op, "pw")) * np.prod(_tile(op, cfg), axis=1)
    return cost + _weights_cost(r, op, cfg) if op.weights else cost


def norm_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """The paper's LayerNorm; RMSNorm (``rms``: one statistic, one parameter) costs
    12 per element and half the all-reduces. Scale and shift weights add nothing: the
    per-feature sums already charged are their gradients."""
    axis = attr(op, "axis")
    tile = _tile(op, cfg)
    elems = np.prod(tile, axis=1)
    others = np.prod(np.delete(cfg, axis, axis=1), axis=1)
    flop, stats = (12.0, 2.0) if op.kind == "Norm" and attr(op, "rms") else (16.0, 4.0)
    return (flop * elems + stats * allreduce(r, elems / tile[:, axis], cfg[:, axis])
            + stats * allreduce(r, tile[:, axis], others))


def reduce_mean_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    elems = np.prod(_tile(op, cfg), axis=1)
    return allreduce(r, elems, np.prod(cfg[:, list(attr(op, "axes"))], axis=1))


def softmax_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    axis = attr(op, "axis")
    tile = _tile(op, cfg)
    elems = np.prod(tile, axis=1)
    rows = elems / tile[:, axis]
    full = float(op.shape[axis])
    q = cfg[:, axis]
    mask = elems if attr(op, "causal") else 0.0  # causal: one select per element
    return (4.0 * elems + elems * full + allreduce(r, rows, q) + allreduce(r, rows * full, q)
            + allreduce(r, rows, q) + mask)


def top_k_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """k passes of a max: ``k * (3 elems + allreduce(rows, q))`` (q: the axis's split)."""
    axis, k = attr(op, "axis"), float(attr(op, "k"))
    tile = _tile(op, cfg)
    elems = np.prod(tile, axis=1)
    return k * (3.0 * elems + allreduce(r, elems / tile[:, axis], cfg[:, axis]))


def _moe_terms(op: Op, cfg: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    sizes = dict(zip(op.dim_names, op.shape))
    tokens = sizes["b"] * sizes.get("g", 1) * sizes["l"]  # grouped routing: g groups of l
    dense = tokens * sizes["e"] * float(attr(op, "k")) / np.prod(cfg, axis=1)
    tiles = [np.prod(np.asarray(p.shape, dtype=np.float64)
                     / port_factors(op, p, cfg.astype(np.int64)), axis=1)
             for p in (op.inputs[0], op.inputs[1], op.outputs[0])]
    return dense, tiles


def moe_dispatch_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """GShard's ``blxc,ble->xbce`` with a k-sparse mask: ``b l k e`` multiply-adds
    forward and one gradient backward, the buffers all-reduced over the l split and
    the token gradients over the x and c splits."""
    dense, (tokens, _, out) = _moe_terms(op, cfg)
    c = {n: cfg[:, op.dim_index(n)] for n in "xcl"}
    return 2.0 * dense + allreduce(r, out, c["l"]) + allreduce(r, tokens, c["x"] * c["c"])


def moe_combine_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """GShard's ``blxc,xbce->ble`` with k-sparse gates: ``b l k e`` multiply-adds
    forward and two gradients backward, outputs all-reduced over the x and c splits,
    expert-output gradients over the l split, gate gradients over the e split."""
    dense, (experts, gates, out) = _moe_terms(op, cfg)
    c = {n: cfg[:, op.dim_index(n)] for n in "xcle"}
    return (3.0 * dense + allreduce(r, out, c["x"] * c["c"]) + allreduce(r, experts, c["l"])
            + allreduce(r, gates, c["e"]))


def softmax_xent_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    tile = _tile(op, cfg)
    elems = np.prod(tile, axis=1)
    rows = np.prod(tile[:, :-1], axis=1)
    return 4.0 * elems + 2.0 * rows + np.where(cfg[:, -1] > 1, r * 2.0 * rows, 0.0)


def free_cost(r: float, op: Op, cfg: np.ndarray) -> np.ndarray:
    """Layout-only ops (concat, stack, reshape...) cost nothing in this model; parameter
    operands (a concatenated class token) add the all-reduce of their gradients."""
    return _weights_cost(r, op, cfg)


LAYER_COSTS = {
    "Conv": conv_cost, "FC": fc_cost, "Einsum": einsum_cost, "Embedding": einsum_cost,
    "LSTM": lstm_cost, "Pooling": pooling_cost, "Resize": resize_cost,
    "Elementwise": elementwise_cost,
    "Norm": norm_cost, "BatchNorm": norm_cost, "ReduceMean": reduce_mean_cost,
    "Softmax": softmax_cost, "SoftmaxCrossEntropy": softmax_xent_cost, "TopK": top_k_cost,
    "MoEDispatch": moe_dispatch_cost, "MoECombine": moe_combine_cost,
    "Concat": free_cost, "Slice": free_cost, "Stack": free_cost, "Unstack": free_cost,
    "Ravel": free_cost, "Unravel": free_cost,
}


@COST_MODELS.register("paper", "the PaSE paper's FLOP model (one link speed, ring all-reduce)")
class PaperCostModel(CostModel):
    """The paper's model: layer costs plus re-distribution costs, in FLOP.

    Args:
        tflops: peak TFLOP/s of one device (default 10).
        bandwidth: link bandwidth in GB/s (default 16).
    """

    name = "paper"
    unit = "FLOP"
    edges_read_port_splits = True

    def __init__(self, tflops: float = 10.0, bandwidth: float = 16.0):
        for label, value in (("tflops", tflops), ("bandwidth", bandwidth)):
            if not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
                raise OptionError(f"{label} must be a positive number, got {value!r}")
        self.tflops = float(tflops)
        self.bandwidth = float(bandwidth)
        self.r = flop_per_word(self.tflops, self.bandwidth)

    def layer_costs(self, op: Op, configs: np.ndarray) -> np.ndarray:
        try:
            formula = LAYER_COSTS[op.kind]
        except KeyError:
            raise GraphError(f"the paper cost model has no formula for op {op.name!r} of kind "
                             f"{op.kind!r}; known kinds: {', '.join(sorted(LAYER_COSTS))}") from None
        return formula(self.r, op, configs.astype(np.float64))

    def edge_costs(self, producer: Op, output: Port, src_configs: np.ndarray,
                   consumer: Op, input: Port, dst_configs: np.ndarray) -> np.ndarray:
        src = port_factors(producer, output, src_configs)
        dst = port_factors(consumer, input, dst_configs)
        # Each entry depends on its two rows only, so computing it once per distinct
        # pair of rows (pairwise) gives the same bits as the full broadcast.
        # Factor 2: the activation forward and its gradient backward.
        return pairwise(src, dst, lambda a, b: self.r * 2.0 * overlap_elements(output.shape, a, b))

    def edge_key(self, producer: Op, output: Port, src_configs: np.ndarray,
                 consumer: Op, input: Port, dst_configs: np.ndarray) -> tuple:
        """Exactly what :meth:`edge_costs` reads: the tensor's shape and both ports'
        split factors per config (``r`` is the model's own)."""
        return array_key(output.shape, port_factors(producer, output, src_configs),
                         port_factors(consumer, input, dst_configs))

    def vertex_key(self, op: Op, configs: np.ndarray) -> tuple:
        """The op without its name (no formula reads it) and its configs."""
        return (op_signature(op), array_key(configs))

    def edges(self, graph: Graph) -> list[tuple[int, int, int, int]]:
        """One edge per (producer, consumer) pair: the paper costs only the last input."""
        last: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        for c in graph.connections:
            u, v = graph.index(c.src), graph.index(c.dst)
            last.pop((u, v), None)  # re-insert so the order follows the costed input
            last[(u, v)] = (u, c.src_output, v, c.dst_input)
        return sorted(last.values(), key=lambda e: (e[2], e[0]))
