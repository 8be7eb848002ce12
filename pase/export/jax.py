"""Export a pase strategy as a self-contained JAX training step (source text).

:func:`to_jax` writes a Python program that imports only jax and numpy. It holds
seeded parameter and data initialisation (``init_params``, ``make_batch``), a
``forward`` that computes every op of the graph and a scalar loss,
``make_step(mesh)`` that jits ``jax.value_and_grad`` of it, and ``step(params,
batch)`` on the default mesh. On a mesh every op's inputs, weights and outputs
are pinned to pase's layout with ``jax.lax.with_sharding_constraint``, so XLA
inserts the collectives each op's split implies; each re-layout between ops is
written out as the collectives pase prices (:mod:`pase.export.jax_relayout`;
``relayout="xla"`` leaves them to XLA). The mesh and the dims' mesh axes follow
pase's device mapping (:mod:`pase.export.mesh`).

With ``local=True`` the program is instead what ONE device of the strategy
computes: every op at its per-device tile shape, no mesh, no communication. A
tensor whose producer's tile differs from its consumer's is cropped or
zero-padded (``fit``), a memory-bound stand-in for the re-layout.

Op kinds and how exactly they are reproduced:

- exact: ``FC``, ``Einsum``, ``Conv`` (NCHW, OIHW filters), ``Elementwise`` (an
  add), ``Softmax``, ``ReduceMean``, ``Concat``, ``Stack``, ``Unstack``, ``Ravel``
  and ``Unravel`` (row-major reshapes), ``SoftmaxCrossEntropy`` (log-softmax
  output, mean negative log-likelihood of seeded integer labels into the loss);
- ``Embedding``: computed as pase models it, the one-hot of seeded token ids
  times the table (the same values as a gather, and pase's FLOP);
- ``Resize``: ``jax.image.resize`` of the tile (half-pixel centres, torch's
  ``align_corners=False``; nearest, linear or cubic);
- ``Pooling``: max pooling, or average pooling (padding counted, as torch's
  default) when the op's ``mode`` attribute says ``avg`` or, lacking one, its
  name contains ``avg``: the graph IR does not record which;
- ``Norm`` and ``BatchNorm``: layer normalisation over the op's axis and
  training-mode batch normalisation over every axis but channels, without
  affine parameters (the graphs give these ops no weights);
- ``pw`` (point-wise ops per output element, a FLOP count in pase) becomes the
  op's ``act`` (ReLU by default; GELU, SiLU, tanh, squared ReLU) when it is at least
  1; biases, norm scales and shifts, parameter operands of adds (learned positions) and of
  Concats (class tokens) are parameters; a ``tied`` op reads its owner's parameter;
- ``Elementwise`` ``mul`` (a product) and ``rotary`` (base 10000, positions on the
  second-last axis); ``Softmax`` ``causal`` and ``window``; ``TopK`` (the ``k`` largest kept,
  renormalised when ``normalize``); ``MoEDispatch`` and ``MoECombine`` as GShard's
  einsums with the one-hot slot tensor recomputed from the gates (first come, first
  served; tokens over capacity dropped; with routing groups each run of tokens fills its
  own share of the slots; the combine routes each token's expert outputs first and weighs
  them by the gates after, the same values); ``Slice``;
- ``LSTM``: a real LSTM stack (``jax.lax.scan`` over time, four gates), with the
  weight's rows and columns interleaved so that splitting them in blocks splits
  features and units as pase's ``k`` and ``n`` dims do (see ``lstm`` in the
  program).

The loss is the sum of the cross-entropies plus half the mean square of every
other output no op reads (a pooler beside an MLM head is trained, not removed
as dead code). An op kind not listed raises a
GraphError naming the op and its kind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pase.errors import GraphError, OptionError
from pase.export import jax_runtime
from pase.export.configs import fan_in, strategy_configs, strategy_variants_of, tile, zero3_spec
from pase.export.jax_relayout import RELAYOUT
from pase.export.mesh import assign_axes, mesh_axes, port_spec
from pase.ir import Graph, Op, Port
from pase.schema import conv_form
from pase.space import check_devices
from pase.work.variants import DEFAULT, Variant

DTYPES = ("float32", "bfloat16", "float16", "float64")
RELAYOUTS = ("pase", "xla")
KINDS = ("BatchNorm", "Concat", "Conv", "Einsum", "Elementwise", "Embedding", "FC", "LSTM",
         "MoECombine", "MoEDispatch", "Norm", "Pooling", "Ravel", "ReduceMean", "Resize", "Slice",
         "Softmax",
         "SoftmaxCrossEntropy", "Stack", "TopK", "Unravel", "Unstack")


def op_scope(name: str) -> str:
    """The ``jax.named_scope`` of op ``name``'s computation in a mesh program."""
    return f"op/{name}"


def out_scope(name: str) -> str:
    """The ``jax.named_scope`` pinning op ``name``'s outputs: forward it is the op's own
    layout; backward it turns the summed gradient of its consumers into that layout."""
    return f"out/{name}"


def edge_scope(src: str, dst: str) -> str:
    """The ``jax.named_scope`` of the re-layout of ``src``'s output for its consumer ``dst``."""
    return f"edge/{src}->{dst}"


def tied_scope(owner: str, user: str) -> str:
    """The ``jax.named_scope`` of the re-layout of ``owner``'s tied parameter for ``user``
    (kept in the owner's layout; forward re-laid for the user, its gradient back)."""
    return f"tied/{owner}->{user}"


def _groups(op: Op) -> int:
    """A MoEDispatch's or MoECombine's routing groups (1 without a ``g`` dim)."""
    return next((d.size for d in op.dims if d.name == "g"), 1)


def _pool_mode(op: Op) -> str:
    mode = str(op.attrs.get("mode", "avg" if "avg" in op.name.lower() else "max")).lower()
    if mode not in ("max", "avg"):
        raise GraphError(f"op {op.name!r} (Pooling) has mode {mode!r}; allowed: max, avg")
    return mode


class _Writer:
    """Turns a graph and its configs into the ``forward`` body and the tables."""

    def __init__(self, graph: Graph, configs: dict[str, dict[str, int]], devices: int, local: bool,
                 variants: Mapping[str, Variant] | None = None, relayout: str = "pase"):
        self.graph, self.configs, self.local, self.relayout = graph, configs, local, relayout
        self.variants = dict(variants or {})
        self.tied = {op.attrs["tied"] for op in graph.ops if op.attrs.get("tied") is not None}
        self.axes = mesh_axes(devices)
        self.assigned = {op.name: ({} if local else assign_axes(op, configs[op.name], self.axes))
                         for op in graph.ops}
        self.params: dict[str, tuple] = {}
        self.data: dict[str, tuple] = {}
        self.lines: list[str] = []
        self.var: dict[tuple[str, int], str] = {}
        self.out_tile: dict[tuple[str, int], tuple[int, ...]] = {}
        self.losses: list[str] = []

    # -- tensors -----------------------------------------------------------------------
    def shape(self, op: Op, port: Port) -> tuple[int, ...]:
        return tile(op, port, self.configs[op.name]) if self.local else tuple(port.shape)

    def spec(self, op: Op, port: Port) -> tuple:
        return port_spec(op, port, self.assigned[op.name])

    def pin(self, expr: str, spec: tuple) -> str:
        return expr if self.local else f"pin({expr}, {spec!r})"

    def input(self, op: Op, i: int) -> str:
        port = op.inputs[i]
        if port.source is None:
            key = f"{op.name}:x{i}"
            self.data[key] = (self.shape(op, port), self.spec(op, port), "normal", 0)
            return self.pin(f"batch[{key!r}]", self.spec(op, port))
        expr = self.var[port.source]
        if self.local:
            tile = self.shape(op, port)
            return expr if self.out_tile[port.source] == tile else f"fit({expr}, {tile!r})"
        src = self.graph.op(port.source[0])
        return self.pin_from(expr, self.spec(src, src.outputs[port.source[1]]), self.spec(op, port),
                             edge_scope(port.source[0], op.name))

    def pin_from(self, expr: str, src: tuple, dst: tuple, scope: str, pinned: bool = True) -> str:
        """``expr``, laid out as ``src`` (already pinned there unless ``pinned`` is false),
        re-laid as ``dst`` under ``scope``: written out (``relayout="pase"``) or left to XLA
        (``"xla"``; an unpinned source is pinned first, so that backward XLA re-lays the
        gradient back under the same scope)."""
        if self.relayout == "xla":
            inner = expr if pinned else f"pin({expr}, {src!r}, {scope!r})"
            return f"pin({inner}, {dst!r}, {scope!r})"
        return f"pin({expr}, {dst!r}, {scope!r}, src={src!r})"

    def weight(self, op: Op, j: int) -> str:
        port = op.weights[j]
        key = self._tied_key(op, j) or f"{op.name}:w{j}"
        if key in self.params and not self.local:  # a tied parameter, stored in its owner's
            # layout, re-laid for this op (and backward its gradient re-laid back) under one scope
            return self.pin_from(f"params[{key!r}]", self.params[key][1], self.spec(op, port),
                                 tied_scope(op.attrs["tied"], op.name), pinned=False)
        if op.is_parameter(port):
            stored = self._zero3_spec(op, j)  # ZeRO 3: kept sharded over the data-parallel group
            self.params[key] = (self.shape(op, port), stored or self.spec(op, port), fan_in(op, port))
            return self.pin(f"params[{key!r}]", self.spec(op, port))
        self.data[key] = (self.shape(op, port), self.spec(op, port), "normal", 0)
        return self.pin(f"batch[{key!r}]", self.spec(op, port))

    def _zero3_spec(self, op: Op, j: int) -> tuple | None:
        """Weight ``j``'s stored layout under ZeRO stage 3 (:func:`zero3_spec`), or None."""
        if self.local or self.variants.get(op.name, DEFAULT).zero != 3:
            return None
        if op.name in self.tied or op.attrs.get("tied") is not None:
            return None  # a tied parameter stays in its owner's layout
        return zero3_spec(op, j, self.configs[op.name], self.assigned[op.name], self.axes)

    def _tied_key(self, op: Op, j: int) -> str | None:
        """The owner's parameter name when weight ``j`` is ``op``'s tied (first) parameter."""
        tied = op.attrs.get("tied")
        params = [i for i, p in enumerate(op.weights) if op.is_parameter(p)]
        if tied is None or not params or params[0] != j:
            return None
        owner = self.graph.op(tied)
        first = next(i for i, p in enumerate(owner.weights) if owner.is_parameter(p))
        return f"{tied}:w{first}"

    def weights(self, op: Op, first: int = 0) -> str:
        return "(" + "".join(f"{self.weight(op, j)}, " for j in range(first, len(op.weights))) + ")"

    def operands(self, op: Op) -> list[tuple[Port, str]]:
        return ([(p, self.input(op, i)) for i, p in enumerate(op.inputs)]
                + [(p, self.weight(op, j)) for j, p in enumerate(op.weights)])

    # -- ops ---------------------------------------------------------------------------
    def op(self, op: Op) -> None:
        k = self.graph.index(op.name)
        outs = [f"t{k}" if len(op.outputs) == 1 else f"t{k}_{j}" for j in range(len(op.outputs))]
        split = {d: f for d, f in self.configs[op.name].items() if f > 1}
        self.lines.append(f"    # {op.name}: {op.kind}, split {split or 'none'}")
        if op.kind not in KINDS:
            raise GraphError(f"op {op.name!r} has kind {op.kind!r}, which the JAX exporter cannot "
                             f"write; known kinds: {', '.join(KINDS)}")
        first = len(self.lines)
        expr = getattr(self, "kind_" + op.kind)(op, outs)
        if expr is not None:
            self.lines.append(f"    {', '.join(outs)} = {expr}")
        for j, (name, port) in enumerate(zip(outs, op.outputs)):
            self.var[(op.name, j)] = name
            self.out_tile[(op.name, j)] = self.shape(op, port)
            if not self.local:
                scope = out_scope(op.name)
                self.lines.append(f"    {name} = pin({name}, {self.spec(op, port)!r}, {scope!r})")
        if not self.local:  # the op's computation under its own name in the compiled HLO
            self.lines[first:] = [f"    with jax.named_scope({op_scope(op.name)!r}):"] + [
                "    " + line for line in self.lines[first:]]

    def attr(self, op: Op, name: str, default: Any = None) -> Any:
        value = op.attrs.get(name, default)
        return tuple(value) if isinstance(value, list) else value

    def _tail(self, op: Op) -> str:
        return f"pw={self.attr(op, 'pw', 0)!r}, fn={self.attr(op, 'act', 'relu')!r}"

    def kind_FC(self, op: Op, outs):
        bias = f", bias={self.weight(op, 1)}" if self.attr(op, "bias", False) else ""
        return f"fc({self.input(op, 0)}, {self.weight(op, 0)}, {self._tail(op)}{bias})"

    def kind_Einsum(self, op: Op, outs):
        eq = op.attrs["eq"]
        la, lb = eq.split("->")[0].split(",")
        has_bias = bool(self.attr(op, "bias", False))
        ports = ([(p, self.input(op, i)) for i, p in enumerate(op.inputs)]
                 + [(p, self.weight(op, j)) for j, p in enumerate(op.weights[:-1] if has_bias
                                                                    else op.weights)])
        a = next((x for x in ports if x[0].dims == tuple((c,) for c in la)), None)
        b = next((x for x in ports if x[0].dims == tuple((c,) for c in lb) and x is not a), None)
        if a is None or b is None or len(ports) != 2:
            raise GraphError(f"op {op.name!r} ({op.kind}): its ports do not match equation {eq!r}")
        bias = ""
        if has_bias:
            letters = "".join(axis[0] for axis in op.weights[-1].dims)
            bias = f", bias={self.weight(op, len(op.weights) - 1)}, letters={letters!r}"
        return f"einsum({eq!r}, {a[1]}, {b[1]}, {self._tail(op)}{bias})"

    def kind_Embedding(self, op: Op, outs):
        eq = op.attrs["eq"]
        la = eq.split("->")[0].split(",")[0]
        hot = [p for p in op.weights if not op.is_parameter(p)]
        table = [j for j, p in enumerate(op.weights) if op.is_parameter(p)]
        if op.inputs or len(hot) != 1 or len(table) != 1 or hot[0].dims != tuple((c,) for c in la):
            raise GraphError(f"op {op.name!r} (Embedding): expected a one-hot graph input for "
                             f"{la!r} and one parameter table ({eq!r})")
        shape, spec = self.shape(op, hot[0]), self.spec(op, hot[0])
        key = f"{op.name}:ids"
        self.data[key] = (shape[:-1], spec[:-1], "ids", shape[-1])
        return (f"embedding({eq!r}, {self.pin(f'batch[{key!r}]', spec[:-1])}, "
                f"{self.weight(op, table[0])}, {shape[-1]}, {spec!r}, pin)")

    def kind_Conv(self, op: Op, outs):
        f = conv_form(op)
        extra = [why for why, on in (("grouped", f.grouped), ("transposed", f.transposed),
                                     (f"{len(f.out)}-D", len(f.out) != 2),
                                     ("dilated", any(d != 1 for d in f.dilation))) if on]
        if extra:
            raise GraphError(f"op {op.name!r} (Conv) is {', '.join(extra)}; the JAX exporter "
                             f"writes 2-D convolutions with no groups, dilation 1, not transposed")
        out = self.shape(op, op.outputs[0])[2:]
        return (f"conv({self.input(op, 0)}, {self.weight(op, 0)}, stride={self.attr(op, 'stride', (1, 1))!r}, "
                f"pad={self.attr(op, 'pad', (0, 0))!r}, out={out!r}, pw={self.attr(op, 'pw', 0)!r})")

    def kind_Pooling(self, op: Op, outs):
        out = self.shape(op, op.outputs[0])[2:]
        window = self.attr(op, "window")
        return (f"pool({self.input(op, 0)}, {window!r}, {self.attr(op, 'stride', window)!r}, "
                f"{self.attr(op, 'pad', (0, 0))!r}, {out!r}, {_pool_mode(op)!r})")

    def kind_Resize(self, op: Op, outs):
        out = self.shape(op, op.outputs[0])[2:]
        return f"resize({self.input(op, 0)}, {out!r}, {self.attr(op, 'mode', 'nearest')!r})"

    def kind_LSTM(self, op: Op, outs):
        a = self.assigned[op.name]
        hspec = tuple(a.get(n) for n in ("b", "n"))
        return f"lstm({self.input(op, 0)}, {self.weight(op, 0)}, {hspec!r}, pin)"

    def kind_Elementwise(self, op: Op, outs):
        args = [self.input(op, i) for i in range(len(op.inputs))]
        fn = self.attr(op, "fn", "add")
        if fn == "rotary":
            return f"rotary({args[0]})"
        if fn == "mul":
            return " * ".join(args)
        if len(args) == 1:
            expr = f"act({args[0]}, {self.attr(op, 'pw', 0)!r})"
        else:
            expr = args[0]
            for other in args[1:]:
                expr = f"elementwise({expr}, {other}, pw={self.attr(op, 'pw', 0)!r})"
        for j in range(len(op.weights)):
            expr = f"add_weight({expr}, {self.weight(op, j)})"
        return expr

    def kind_Norm(self, op: Op, outs):
        rms = bool(self.attr(op, "rms", False))
        return (f"norm({self.input(op, 0)}, axis={self.attr(op, 'axis', len(op.dims) - 1)!r}, "
                f"rms={rms!r}, weights={self.weights(op)})")

    def kind_BatchNorm(self, op: Op, outs):
        return f"batch_norm({self.input(op, 0)}, weights={self.weights(op)})"

    def kind_Softmax(self, op: Op, outs):
        window = self.attr(op, "window", 0)
        return (f"softmax({self.input(op, 0)}, axis={self.attr(op, 'axis', len(op.dims) - 1)!r}, "
                f"masked={bool(self.attr(op, 'causal', False))!r}"
                + (f", window={window!r})" if window else ")"))

    def kind_TopK(self, op: Op, outs):
        return (f"top_k({self.input(op, 0)}, {self.attr(op, 'k')!r}, {self.attr(op, 'axis')!r}, "
                f"{bool(self.attr(op, 'normalize', False))!r}, {self.spec(op, op.inputs[0])!r}, pin)")

    def kind_MoEDispatch(self, op: Op, outs):
        capacity = self.shape(op, op.outputs[0])[2]
        return (f"moe_dispatch({self.input(op, 0)}, {self.input(op, 1)}, {capacity!r}, "
                f"{_groups(op)!r})")

    def kind_MoECombine(self, op: Op, outs):
        return f"moe_combine({self.input(op, 0)}, {self.input(op, 1)}, {_groups(op)!r})"

    def kind_Slice(self, op: Op, outs):
        return (f"slice_axis({self.input(op, 0)}, {self.attr(op, 'axis')!r}, "
                f"{self.attr(op, 'start')!r}, {self.attr(op, 'stop')!r})")

    def kind_SoftmaxCrossEntropy(self, op: Op, outs):
        port = op.inputs[0]
        shape, spec = self.shape(op, port), self.spec(op, port)
        key = f"{op.name}:labels"
        self.data[key] = (shape[:-1], spec[:-1], "labels", shape[-1])
        loss = f"loss{len(self.losses)}"
        self.losses.append(loss)
        self.lines.append(f"    {outs[0]}, {loss} = softmax_xent({self.input(op, 0)}, "
                          f"{self.pin(f'batch[{key!r}]', spec[:-1])})")
        return None

    def kind_ReduceMean(self, op: Op, outs):
        return (f"reduce_mean({self.input(op, 0)}, {tuple(self.attr(op, 'axes'))!r}, "
                f"{bool(self.attr(op, 'keepdims', False))!r})")

    def _many(self, op: Op) -> str:
        return "[" + ", ".join(self.input(op, i) for i in range(len(op.inputs))) + "]"

    def kind_Concat(self, op: Op, outs):
        return f"concat({self._many(op)}, {self.attr(op, 'axis')!r}, weights={self.weights(op)})"

    def kind_Stack(self, op: Op, outs):
        return f"stack({self._many(op)}, {self.attr(op, 'axis')!r})"

    def kind_Unstack(self, op: Op, outs):
        return f"unstack({self.input(op, 0)}, {self.attr(op, 'axis')!r})" + ("[0]" if len(outs) == 1 else "")

    def kind_Ravel(self, op: Op, outs):
        return f"reshape({self.input(op, 0)}, {self.shape(op, op.outputs[0])!r})"

    kind_Unravel = kind_Ravel

    # -- the loss ----------------------------------------------------------------------
    def loss(self) -> None:
        read = {p.source for op in self.graph.ops for p in op.inputs if p.source is not None}
        losses = {op.name for op in self.graph.ops if op.kind == "SoftmaxCrossEntropy"}
        # Every other output no op reads (a pooler beside an MLM loss) joins the loss,
        # so it is trained (and its traffic compiled) rather than removed as dead code.
        sinks = [v for key, v in self.var.items() if key not in read and key[0] not in losses]
        terms = list(self.losses) + [f"0.5 * jnp.mean(jnp.square({v}.astype(jnp.float32)))" for v in sinks]
        self.lines.append(f"    return {' + '.join(terms)}")


def _order(graph: Graph) -> list[Op]:
    from pase.sim.tasks import topological_order

    return [graph.ops[i] for i in topological_order(graph)]


def to_jax(model: str | Path | Graph, strategy: Any, devices: int, *, batch: int | None = None,
           dtype: str = "float32", local: bool = False,
           model_options: Mapping[str, Any] | None = None, relayout: str = "pase") -> str:
    """Python source of a self-contained JAX training step of ``strategy`` on ``devices``.

    Args:
        model: a registered model name, a graph JSON path or a Graph.
        strategy: ``{op: {dim: factor}}`` (ops it does not name stay unsplit), a
            Strategy, or a parsed ``pase solve --format json`` object.
        devices: ``p``; the program's mesh has ``p`` devices in prime-sized axes.
        batch: the model's batch size (registered models only).
        dtype: ``float32``, ``bfloat16``, ``float16`` or ``float64`` (parameters,
            data and activations; the cross-entropy is taken in float32).
        local: write one device's share instead: every op at its tile shape, no
            mesh, no communication (see the module docstring).
        model_options: other options of a registered model (``layers=1``...).
        relayout: ``pase`` (default) writes every re-layout between ops out as the
            collectives pase prices (see :mod:`pase.export.jax_relayout`); ``xla`` only
            pins both layouts and leaves the re-layout to XLA's partitioner.

    A strategy's variants (``pase solve --zero``): an op at ZeRO stage 3 keeps each
    parameter sharded over its data-parallel group and gathers it for use (see
    ``_zero3_spec``); stages 1 and 2 change only the optimizer update, which the
    step does not contain, so their step is stage 0's; recomputation is left to
    XLA (the step does not force it).
    """
    from pase.api import load_graph

    devices = check_devices(devices)
    if dtype not in DTYPES:
        raise OptionError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if relayout not in RELAYOUTS:
        raise OptionError(f"relayout must be one of {', '.join(RELAYOUTS)}, got {relayout!r}")
    options = dict(model_options or {})
    if batch is not None:
        options["batch"] = batch
    graph = load_graph(model, **options)
    configs = strategy_configs(graph, strategy, devices)
    w = _Writer(graph, configs, devices, bool(local), strategy_variants_of(graph, strategy), relayout)
    for op in _order(graph):
        w.op(op)
    w.loss()
    return _program(graph, configs, devices, dtype, bool(local), w)


def _table(name: str, rows: Mapping[str, tuple]) -> str:
    body = "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(rows.items()))
    return f"{name} = {{\n{body}}}\n"


def _program(graph: Graph, configs, devices: int, dtype: str, local: bool, w: _Writer) -> str:
    split = sum(1 for c in configs.values() if any(f > 1 for f in c.values()))
    what = ("one device's share (every op at its tile shape, no communication)" if local
            else f"pinned to pase's layouts on a mesh of {devices} devices")
    doc = (f'"""Training step of pase graph {graph.name!r} ({len(graph)} ops, {split} split), {what}.\n\n'
           f"Written by pase.export.to_jax for p = {devices}, {dtype}. "
           + ("It needs one device.\n" if local else
              f"It needs {devices} devices; on a CPU\nset XLA_FLAGS=--xla_force_host_platform_device_count="
              f"{devices} before JAX starts.\n")
           + '"""\n')
    x64 = 'jax.config.update("jax_enable_x64", True)\n' if dtype == "float64" else ""
    meta = (f"MODEL = {graph.name!r}\nDEVICES = {devices}\nMESH_AXES = {w.axes!r}\n"
            f"DTYPE = jnp.{dtype}\nLOCAL = {local!r}\n"
            f"# the strategy: {{op: {{dim: factor}}}} (factors > 1 only)\n"
            f"STRATEGY = {({k: {d: f for d, f in v.items() if f > 1} for k, v in configs.items()})!r}\n")
    tables = ("# parameters: name -> (shape, PartitionSpec entries, fan-in)\n" + _table("PARAMS", w.params)
              + "# data: name -> (shape, PartitionSpec entries, kind, upper bound of ids/labels)\n"
              + _table("DATA", w.data))
    says = ("One device's share of the loss (``pin`` is unused)." if local
            else "The scalar loss; ``pin(x, spec)`` fixes a tensor's layout on the mesh.")
    forward = ("\n\ndef forward(params, batch, pin):\n"
               f'    """{says}"""\n'
               + "\n".join(w.lines) + "\n")
    return "\n".join([doc + jax_runtime.HEADER + x64, meta, tables, jax_runtime.OPS, RELAYOUT,
                      forward, "", jax_runtime.FOOTER])
