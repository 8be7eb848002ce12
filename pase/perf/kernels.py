"""One op's work on one device for one micro-batch: kernels, FLOP, collectives.

Per op kind (a roofline per kernel, :class:`Pricer`):

- **Einsum** (GEMMs): forward ``2 B M N K`` FLOP (``B`` the batched letters, ``M``
  and ``N`` the letters of one operand and the output, ``K`` the contracted ones),
  backward one GEMM per operand that needs a gradient, each with its own shape.
  A bias or activation adds one memory-bound kernel each way (fused epilogue).
- **Fused attention** (a scores einsum, its softmax and the context einsum, when
  the layout's attention is ``fused``): one kernel forward, one backward; the model
  FLOP are the two einsums' (``4 B H L M K``, backward twice that), the work done
  skips the masked half of a causal softmax and the backward recomputes the scores
  (2.5x the forward), and no ``L x M`` tensor is stored or moved.
- **Memory-bound** ops (norms, softmax, element-wise, embedding lookups, the loss):
  bytes read and written at achieved HBM bandwidth.
- Views (Unstack, Stack) are free. Other kinds (convolutions, pooling, LSTM)
  fall back to :func:`pase.work.op_work`'s FLOP at GEMM efficiency.

Every kernel adds the device type's fixed kernel cost.

Tensor-parallel collectives follow the GEMM view: an einsum whose contracted
letters are split all-reduces its output forward; one whose ``N`` letters (the
second operand's) are split all-reduces the first operand's gradient backward;
an embedding with a split vocabulary all-reduces its output; a softmax or loss
split along its reduction axis all-reduces two statistics per row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pase.cluster import Device
from pase.ir import Op, Port
from pase.perf.hardware import Achieved
from pase.perf.layout import experts_of
from pase.schema import attr, parse_einsum

VIEWS = ("Unstack", "Stack", "Ravel", "Unravel")  # free: a view of their input
MEMORY_BOUND = ("Norm", "BatchNorm", "ReduceMean", "Softmax", "Elementwise", "Embedding",
                "SoftmaxCrossEntropy", "TopK", "MoEDispatch", "MoECombine", "Pooling", "Resize",
                "Concat", "Slice")


@dataclass
class OpTime:
    """One op on one device, one micro-batch: seconds and FLOP each way."""

    name: str
    forward_s: float = 0.0
    backward_s: float = 0.0
    weight_s: float = 0.0  # the weight-gradient GEMMs of backward_s (zero-bubble schedules)
    model_flop: float = 0.0  # forward FLOP as MFU counts them (2 per multiply-add, dense attention)
    forward_flop: float = 0.0  # what the hardware runs forward
    backward_flop: float = 0.0
    kernels: int = 0
    tp_forward: list = field(default_factory=list)  # (kind, bytes) over the tp group
    tp_backward: list = field(default_factory=list)
    ep_forward: list = field(default_factory=list)  # all-to-alls over the ep group
    ep_backward: list = field(default_factory=list)
    ring_bytes: float = 0.0  # context parallelism: key/value bytes sent per ring step, forward


# Block-scaled and low-precision formats: bytes per element of a quantised copy, the
# scales included (MXFP8: one 8-bit scale per 32 elements; NVFP4: one 8-bit scale per 16).
QUANTISED_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
LOW_PRECISIONS = tuple(QUANTISED_BYTES)


@dataclass(frozen=True)
class Pricer:
    """Roofline times of kernels on one device type at one precision.

    ``peak_flops`` is the rate of the GEMMs that stay in 16 bits (attention's two
    einsums, the router, the LM head) or run in fp32. Under a low precision (fp8,
    mxfp8, nvfp4) the linear layers' GEMMs run at ``linear_flops`` with efficiency
    ``linear_gemm``, and each of their activation inputs (forward) and output
    gradients (backward) is quantised to ``quantised_bytes`` per element twice (row-
    and column-wise, for the two GEMMs that read it), as Transformer Engine does.
    """

    device: Device
    hw: Achieved
    peak_flops: float
    element_bytes: float
    linear_flops: float = 0.0  # 0: the linear layers run at peak_flops
    linear_gemm: float = 0.0  # 0: the device type's gemm efficiency
    quantised_bytes: float = 0.0  # 0: no quantisation

    @property
    def hbm(self) -> float:
        return (self.device.hbm_gbps or 1000.0) * 1e9 * self.hw.hbm

    @property
    def top_flops(self) -> float:
        """The dense peak at the run's precision (what MFU divides by)."""
        return max(self.peak_flops, self.linear_flops)

    def gemm(self, batch: float, m: float, n: float, k: float, linear: bool = False,
             grouped: bool = False) -> float:
        """A GEMM's seconds; ``grouped``: one GEMM per local expert in one kernel (MoE)."""
        flop = 2.0 * batch * m * n * k
        low = linear and self.linear_flops > 0
        eff = self.hw.gemm_efficiency(m, n, k, batch) * (self.hw.grouped if grouped else 1.0)
        if low:
            eff = eff * self.linear_gemm / self.hw.gemm
        element = self.quantised_bytes if low else self.element_bytes
        moved = batch * (m * k + k * n) * element + batch * m * n * self.element_bytes
        rate = self.linear_flops if low else self.peak_flops
        return np.maximum(flop / (rate * eff), moved / self.hbm) + self.hw.launch_s

    def quantise(self, elements: float) -> float:
        """Seconds to quantise ``elements`` 16-bit values into two low-precision copies."""
        if not self.quantised_bytes:
            return 0.0
        return self.memory(elements * (self.element_bytes + 2 * self.quantised_bytes))

    def memory(self, nbytes: float, kernels: int = 1) -> float:
        return nbytes / self.hbm + kernels * self.hw.launch_s

    def attention(self, flop: float) -> float:
        return flop / (self.peak_flops * self.hw.attention) + self.hw.launch_s


def make_pricer(device: Device, hw: Achieved, precision: str) -> Pricer:
    """The pricer of ``device`` (achieving ``hw``) at ``precision``: bf16, fp16 and fp32
    price every GEMM at that peak; fp8, mxfp8 and nvfp4 price the linear layers at the
    format's peak and keep the rest in bf16, activations between kernels in bf16."""
    if precision not in LOW_PRECISIONS:
        return Pricer(device, hw, device.peak(precision) * 1e12, 4.0 if precision == "fp32" else 2.0)
    return Pricer(device, hw, device.peak("bf16") * 1e12, 2.0, device.peak(precision) * 1e12,
                  hw.low_precision_gemm(precision), QUANTISED_BYTES[precision])


def is_linear(op: Op) -> bool:
    """A linear layer's GEMM, the ones low-precision training quantises: an einsum with a
    weight, not the LM head (vocabulary) nor the router (scores every expert)."""
    if op.kind != "Einsum" or not op.weights:
        return False
    roles = {d.role for d in op.dims}
    if "vocabulary" in roles:
        return False
    if "expert" in roles:  # the router holds all experts but its data input carries none
        expert = next(d.name for d in op.dims if d.role == "expert")
        return any(expert in axis for port in op.inputs if not op.is_parameter(port)
                   for axis in port.dims)
    return True


def port_elements(op: Op, port: Port, tile: dict[str, float], splits: dict[str, int]) -> float:
    """Elements of ``port``'s per-device tile (an array when the splits are arrays of configs)."""
    total = 1.0
    for size, names in zip(port.shape, port.dims):
        total = total * np.ceil(size / math.prod(splits[n] for n in names))
    return total


def _has_grad(op: Op, port: Port) -> bool:
    return op.is_parameter(port) or port.source is not None


def einsum_time(op: Op, tile: dict, splits: dict, pr: Pricer, out: OpTime,
                collectives: bool = True) -> None:
    """An einsum's GEMMs each way (``tile``/``splits``: scalars, or arrays over configs with
    ``collectives=False``, as the roofline of the alpha-beta model asks)."""
    a, b, o = parse_einsum(attr(op, "eq"))
    ports = (list(op.inputs) + list(op.weights))[:2]
    batch = [c for c in o if c in a and c in b]
    m = [c for c in o if c in a and c not in b]
    n = [c for c in o if c in b and c not in a]
    k = [c for c in a if c in b and c not in o]
    size = {name: math.prod(tile[c] for c in letters) for name, letters in
            (("B", batch), ("M", m), ("N", n), ("K", k))}
    B, M, N, K = size["B"], size["M"], size["N"], size["K"]
    flop = 2.0 * B * M * N * K
    linear = pr.linear_flops > 0 and is_linear(op)
    grouped = experts_of(op) is not None
    out.model_flop += flop
    out.forward_flop += flop
    out.forward_s += pr.gemm(B, M, N, K, linear, grouped)
    out.kernels += 1
    out_elems = B * M * N
    if linear:  # the activation input forward, the output gradient backward
        out.forward_s += pr.quantise(B * M * K)
        out.backward_s += pr.quantise(out_elems)
        out.kernels += 2
    if attr(op, "bias") or attr(op, "pw"):
        out.forward_s += pr.memory(2 * out_elems * pr.element_bytes)
        out.backward_s += pr.memory(3 * out_elems * pr.element_bytes)
        out.kernels += 2
    if _has_grad(op, ports[0]):  # dA = dC B^T: M x K, contracting N
        gemm = pr.gemm(B, M, K, N, linear, grouped)
        out.backward_s += gemm
        if op.is_parameter(ports[0]):
            out.weight_s += gemm
        out.backward_flop += flop
        out.kernels += 1
    if _has_grad(op, ports[1]):  # dB = A^T dC: K x N, contracting M
        gemm = pr.gemm(B, K, N, M, linear, grouped)
        out.backward_s += gemm
        if op.is_parameter(ports[1]):  # a weight's gradient: what ZB-H1 and DualPipe defer
            out.weight_s += gemm
        out.backward_flop += flop
        out.kernels += 1
    if not collectives:
        return
    out_bytes = out_elems * pr.element_bytes
    if any(splits[c] > 1 for c in k):
        out.tp_forward.append(("all-reduce", out_bytes))
    if any(splits[c] > 1 for c in n) and ports[0].source is not None:
        out.tp_backward.append(("all-reduce", port_elements(op, ports[0], tile, splits) * pr.element_bytes))


def attention_share(causal: bool, window: int, queries: int, keys: int) -> float:
    """The share of the ``queries x keys`` scores a fused kernel computes: all, the causal
    half (with its diagonal), or under a sliding ``window`` each query's last ``window`` keys."""
    if not causal:
        return 1.0
    if not window or window >= keys:
        return 0.5
    w = float(window)
    return (w * (w + 1) / 2 + (queries - w) * w) / (queries * keys) if queries > w else 0.5


def value_share(scores: Op, context: Op) -> float:
    """The context product's work over the scores product's: its value head size over the
    scores' query-key one (1, or DeepSeek's 128 over 192)."""
    return math.prod(d.size for d in context.dims) / math.prod(d.size for d in scores.dims)


def attention_time(scores: Op, values: float, causal: bool, tile_s: dict, pr: Pricer,
                   out: OpTime, window: int = 0) -> None:
    """The fused attention kernel standing for scores, softmax and context (``values``:
    the context's :func:`value_share`; a sliding ``window`` skips the keys outside it)."""
    a, b, o = parse_einsum(attr(scores, "eq"))
    work = math.prod(tile_s[c] for c in set(a) | set(b))  # B H L M K (every letter once)
    flop = 2.0 * work * (1 + values)
    out.model_flop += flop
    o_dims = {d.name: d.size for d in scores.dims}
    done = attention_share(causal, window, o_dims[o[-2]], o_dims[o[-1]])
    out.forward_flop += flop * done
    out.backward_flop += 2.5 * flop * done
    out.forward_s += pr.attention(flop * done)
    out.backward_s += pr.attention(2.5 * flop * done)
    out.kernels += 2


def memory_bound_time(op: Op, tile: dict, splits: dict, pr: Pricer, out: OpTime,
                      reduce_axis_split: bool, collectives: bool = True) -> None:
    """Norms, softmax, element-wise ops, lookups and the loss: bytes at HBM speed."""
    e = pr.element_bytes
    ins = sum(port_elements(op, p, tile, splits) for p in op.inputs)
    outs = sum(port_elements(op, p, tile, splits) for p in op.outputs)
    if op.kind == "SoftmaxCrossEntropy":  # logits in, fp32 probabilities kept, gradient out
        out.forward_s += pr.memory(ins * (e + 8), 2)
        out.backward_s += pr.memory(ins * (4 + e), 1)
        out.kernels += 3
    elif op.kind == "Embedding":
        out.forward_s += pr.memory(2 * outs * e)
        out.backward_s += pr.memory(3 * outs * e)
        out.kernels += 2
    else:
        out.forward_s += pr.memory((ins + outs) * e)
        out.backward_s += pr.memory((2 * outs + ins) * e)
        out.kernels += 2
    if op.kind == "MoEDispatch" and pr.hw.moe_copy_s:  # routing's fixed cost per token copy
        width = tile[next(d.name for d in op.dims if d.role == "channel")]
        copies = outs / width
        out.forward_s += copies * pr.hw.moe_copy_s
        out.backward_s += 2 * copies * pr.hw.moe_copy_s
    if not collectives:
        return
    if reduce_axis_split:  # row statistics over a split axis (softmax max and sum; vocab-parallel loss)
        rows = outs / max(1.0, tile[op.dims[_axis(op)].name]) if op.outputs else 0.0
        out.tp_forward.append(("all-reduce", 2 * rows * 4))
    if op.kind == "Embedding" and any(splits[d.name] > 1 for d in op.dims if d.role == "vocabulary"):
        out.tp_forward.append(("all-reduce", outs * e))


def _axis(op: Op) -> int:
    """The op dim a softmax (or the loss) reduces over."""
    if op.kind == "SoftmaxCrossEntropy":
        return next(i for i, d in enumerate(op.dims) if d.role == "vocabulary")
    return int(attr(op, "axis"))
