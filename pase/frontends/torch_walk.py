"""The walk over an exported program: values, ops, fusion, names, and the result.

:class:`Walk` keeps the atoms, the pending ops and the value of every FX node;
the handlers of each ATen op are in :mod:`pase.frontends.torch_ops`.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from pase.errors import PaseError
from pase.frontends.torch_ir import Atoms, Conflict, Pending, PortSpec, emit
from pase.frontends.torch_values import TV

# FLOP weight per element of each activation, as the model zoo's (graphs/zoo.py ACT_PW).
ACT_PW = {"relu": 1, "silu": 4, "tanh": 4, "gelu": 8}

# ATen ops that only change a tensor's view (shape, order, dtype, copies, dropout).
VIEW_OPS = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze",
            "permute", "transpose", "t", "expand", "expand_as", "contiguous", "clone", "alias",
            "detach", "dropout", "feature_dropout", "alpha_dropout", "_to_copy", "to",
            "type_as", "lift_fresh_copy", "view_as", "reshape_as", "movedim", "swapaxes",
            "_assert_tensor_metadata", "native_dropout"}


# Modules whose one op is named after the module's path (``h.0.mlp.c_fc``).
LEAF_MODULES = {"Linear", "Conv2d", "LayerNorm", "RMSNorm", "Embedding", "BatchNorm2d",
                "BatchNorm1d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveAvgPool1d",
                "AdaptiveMaxPool1d", "GELU", "ReLU",
                "SiLU", "Tanh", "Dropout", "Softmax", "Flatten", "Conv1D"}


class ModelImportError(PaseError, ValueError):
    """A module that cannot be imported: unsupported ops, shapes the IR cannot hold."""


@dataclass
class OpInfo:
    """Where an IR op came from: its ATen ops, module path, and parameter names per weight."""

    name: str
    aten: list[str]
    module: str
    params: list[str | None]
    counted: bool


@dataclass
class Imported:
    """The graph and what the importer knows about it."""

    graph: Any
    ops: dict[str, OpInfo] = field(default_factory=dict)
    parameters: dict[str, int] = field(default_factory=dict)  # unique parameter -> numel
    approximated: list[str] = field(default_factory=list)
    # Real reshapes the IR holds as Ravel + Unravel (exact, with their re-layout's cost):
    # the class token's concatenation onto a ViT's flattened patches, say. No warning.
    relayouts: list[str] = field(default_factory=list)
    # Where tensors the user can name live in the graph, per torch axis the IR dims
    # (op, [[(dim name or None, extent), ...] per torch axis]): parameters at the op
    # holding them, module outputs at the op making them, inputs at their first reader.
    parameter_axes: dict[str, tuple[str, list]] = field(default_factory=dict)
    activation_axes: dict[str, tuple[str, list]] = field(default_factory=dict)
    input_axes: list[tuple[str, list] | None] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)  # modules called more than once
    module_input_axes: dict[str, tuple[str, list]] = field(default_factory=dict)


def source_line(node: Any) -> str:
    """``file.py:LINE`` of the innermost user frame of ``node`` (not torch's own)."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    user = [f for f in frames if "/torch/" not in f[0]]
    chosen = (user or frames or [("?", "?")])[-1]
    return f"{chosen[0].rsplit('/', 1)[-1]}:{chosen[1]}"


def module_path(node: Any) -> tuple[str, str]:
    """(dotted path, class name) of the innermost module that ran ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    path = re.sub(r"^L__self__\.?", "", str(path)).replace("L['self'].", "")
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return path.strip("."), cls.rsplit(".", 1)[-1]


class Walk:
    """State of one import."""

    def __init__(self, fuse: bool, unsupported: str):
        self.atoms = Atoms()
        self.ops: list[Pending] = []
        self.values: dict[Any, Any] = {}
        self.fuse = fuse
        self.unsupported = unsupported
        self.node: Any = None
        self.names: dict[str, int] = {}  # op name base -> the next number to try
        self.used: set[str] = set()  # every op name given
        self.reserved: set[str] = set()  # the first op name of every FX node
        self.owner: dict[str, Pending] = {}  # parameter -> the op that holds it
        self.param_numel: dict[str, int] = {}
        self.param_alias: dict[str, str] = {}  # placeholder -> canonical parameter name
        self.approximated: list[str] = []
        self.approximated_nodes: set[Any] = set()  # unsupported FX nodes approximated
        self.relayouts: list[str] = []
        self.refused: list[tuple[Any, str]] = []  # (FX node, why) of ops known but refused
        self.batch_atoms: list[int] = []
        self.inputs: list[Any] = []  # the model's tensor inputs (TVs), in order
        self.param_tvs: dict[str, Any] = {}  # parameter -> its placeholder's TV
        self.read_params: set[str] = set()  # parameters the program reads (canonical names)
        self.module_out: dict[str, Any] = {}  # module path -> the last value made inside it
        # A parameter torch reads in another op than the IR op holding it (a conv's bias,
        # held by an add after the Conv): placed by the op torch reads it in.
        self.param_site: dict[str, Pending] = {}
        self.module_calls: dict[str, set[str]] = {}  # module path -> its calls' keys
        self.module_in: dict[str, Any] = {}  # module path -> (input TV, first op, its port)
        self.cats: list[tuple[int, tuple, Any]] = []  # (dim, input FX nodes, output TV)

    # -- naming -------------------------------------------------------------------------
    def reserve(self, nodes: list) -> None:
        """Keep the name each FX node's first op will have for it: a numbered name made for
        another op (``gather`` split into two ops: ``gather``, ``gather_1``) never takes
        what torch.export called a later node (``gather_1``), nor a module's path (a
        ``fc`` called twice, and a module ``fc_1``)."""
        self.reserved |= {_base(n) for n in nodes}

    def op_name(self, suffix: str = "") -> str:
        return self.unique(_base(self.node) + suffix)

    def unique(self, base: str) -> str:
        """``base``, or ``base_N`` with the first N that names no op and no reserved one."""
        n = self.names.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self.used or (n and name in self.reserved):
            n += 1
            name = f"{base}_{n}"
        self.names[base] = n + 1
        self.used.add(name)
        return name

    # -- ops ----------------------------------------------------------------------------
    def add(self, kind: str, inputs: list[PortSpec], outputs: list[PortSpec], *,
            weights: list[PortSpec] | None = None, order: str = "einsum", counted: bool = False,
            suffix: str = "", **attrs: Any) -> Pending:
        p = Pending(self.op_name(suffix), kind, inputs, outputs, weights or [], attrs, order=order,
                    counted=counted)
        p.aten.append(_target_name(self.node))
        p.node = self.node
        p.module = module_path(self.node)[0]
        self.ops.append(p)
        return p

    def port(self, tv: TV, alias: list[tuple[int, int]] | None = None) -> PortSpec:
        """An input port reading ``tv``'s data."""
        user = tv.extra.get("input") if tv.kind == "act" and tv.source is None else None
        return PortSpec(list(tv.data), tv.source, list(alias or []), tv.param, user=user)

    def weight_port(self, tv: TV, op_kind: str) -> tuple[PortSpec | None, str | None]:
        """A weight port for parameter ``tv`` and, when it is already held elsewhere,
        the op to tie to (Einsum/Embedding/Conv only); None when it must be left out."""
        name = tv.param
        if name is None:
            return PortSpec(list(tv.data)), None
        owner = self.owner.get(name)
        if owner is None:
            return PortSpec(list(tv.data), param=name), None
        if op_kind in ("Einsum", "Embedding", "Conv") and not owner.dead:
            return PortSpec(list(tv.data), param=name), owner.name
        return None, None

    def claim(self, op: Pending) -> None:
        for w in op.weights:
            if w.param is not None and w.param not in self.owner:
                self.owner[w.param] = op

    # -- new tensors ----------------------------------------------------------------------
    def fresh(self, shape: tuple[int, ...], role: str = "other") -> list[list[int]]:
        return [[self.atoms.new(s, role)] for s in shape]

    def real_users(self, node: Any) -> int:
        count = 0
        for user in node.users:
            name = _target_name(user)
            if name in VIEW_OPS or name == "getitem":
                count += self.real_users(user)
            else:
                count += 1
        return count

    def fusable(self, tv: TV, kinds: tuple[str, ...]) -> Pending | None:
        """The op making ``tv`` when an element-wise op may fold into it."""
        if not self.fuse or tv.kind != "act" or tv.source is None:
            return None
        producer = tv.source[0]
        if producer.kind not in kinds or producer.dead:
            return None
        data_node = tv.extra.get("node")
        if data_node is None or self.real_users(data_node) != 1:
            return None
        return producer

    def approximate(self, why: str) -> None:
        self.approximated.append(why)

    # -- the result ---------------------------------------------------------------------
    def finish(self, name: str, params: dict[str, int]) -> Imported:
        from pase.ir import Graph

        live = [p for p in self.ops if not p.dead]
        ops, infos = [], {}
        for p in live:
            try:
                op = emit(self.atoms, p)
            except Conflict as exc:
                raise ModelImportError(f"cannot import op {p.name!r}: {exc}") from None
            ops.append(op)
            infos[p.name] = OpInfo(p.name, p.aten, p.module, [w.param for w in p.weights],
                                   p.counted)
        if not ops:
            raise ModelImportError("the module computes nothing pase can model (no op reads its "
                               "inputs)")
        _check_parameters_unbatched(ops, infos)
        held = {n for info in infos.values() for n in info.params if n}
        lost = sorted(self.read_params - held)
        if lost:  # read only with constants (no activation): said, never silently dropped
            self.approximated.append(f"{len(lost)} parameter(s) that no op holds, left out of "
                                     f"the counts ({', '.join(lost[:5])}"
                                     f"{', ...' if len(lost) > 5 else ''}): each is read only "
                                     "in a product with constants")
        batch = math.prod(self.atoms.size[a] for a in self.batch_atoms[:1]) if self.batch_atoms else None
        attrs = {"cutoff": 1, "source": "torch.export"}
        if batch:
            attrs["batch"] = batch
        graph = Graph(name, ops, attrs)
        if self.approximated:
            warnings.warn("pase.from_torch approximated " + "; ".join(self.approximated),
                          stacklevel=3)
        result = Imported(graph, infos, params, list(self.approximated),
                          relayouts=list(self.relayouts))
        self._axes(result, {p.name: op for p, op in zip(live, ops)})
        return result

    def _axes(self, result: Imported, emitted: dict[str, Any]) -> None:
        atoms = self.atoms

        def group(view: list[list[int]], names: dict[int, str | None]) -> list:
            return [[(names.get(leaf), atoms.size[leaf]) for leaf in atoms.leaf_list(axis)]
                    for axis in view]

        def port_names(spec: PortSpec, port: Any) -> dict[int, str | None]:
            if spec.raw is not None:
                return {atoms.leaves(a)[0]: (n[0] if n else None)
                        for (_, a), n in zip(spec.raw, port.dims) if a is not None}
            return {leaf: (n[0] if n else None)
                    for leaf, n in zip(atoms.leaf_list(spec.atoms), port.dims)}

        for name, tv in self.param_tvs.items():
            site = self.param_site.get(name)
            if site is not None and site.name in emitted:
                names = {leaf: site.names.get(leaf) for leaf in atoms.leaf_list(tv.data)}
                result.parameter_axes[name] = (site.name, group(tv.view, names))
                continue
            owner = self.owner.get(name)
            if owner is None or owner.dead or owner.name not in emitted:
                continue
            i = next(i for i, w in enumerate(owner.weights) if w.param == name)
            names = port_names(owner.weights[i], emitted[owner.name].weights[i])
            result.parameter_axes[name] = (owner.name, group(tv.view, names))
        for path, tv in self.module_out.items():
            if tv.source is None or tv.source[0].name not in emitted:
                continue
            if len(self.module_calls.get(path, ())) > 1:  # called twice: no one layout
                result.reused.append(path)
                continue
            p, i = tv.source
            names = port_names(p.outputs[i], emitted[p.name].outputs[i])
            result.activation_axes[path] = (p.name, group(tv.view, names))
        for path, (tv, p, spec) in self.module_in.items():
            if p.dead or p.name not in emitted or len(self.module_calls.get(path, ())) > 1:
                continue
            op = emitted[p.name]
            ports = list(zip(p.inputs, op.inputs)) + list(zip(p.weights, op.weights))
            port = next(q for s_, q in ports if s_ is spec)
            result.module_input_axes[path] = (p.name, group(tv.view, port_names(spec, port)))
        for index, tv in enumerate(self.inputs):
            found = None
            for p in self.ops:
                if p.dead or p.name not in emitted:
                    continue
                op = emitted[p.name]
                specs = list(zip(p.inputs, op.inputs)) + list(zip(p.weights, op.weights))
                for spec, port in specs:
                    if spec.user == index:
                        found = (p.name, group(tv.view, port_names(spec, port)))
                        break
                if found:
                    break
            result.input_axes.append(found)


def _base(node: Any) -> str:
    """The name of the first op made from ``node``: its module's path for a leaf module
    (``h.0.mlp.c_fc``), else the path and the node's name (``h.0.attn.bmm``)."""
    path, cls = module_path(node)
    if path and cls in LEAF_MODULES:
        return path
    return f"{path}.{node.name}" if path else node.name


def _target_name(node: Any) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", str(target))
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return name.split(".")[0]


target_name = _target_name


def _check_parameters_unbatched(ops: list, infos: dict) -> None:
    """The first input's leading axis is the batch; a parameter reading it (an example
    input without a batch axis, such as ``Linear(16, 8)`` on ``randn(16)``) would stop
    being a parameter, and its memory and gradient sync would vanish from every cost."""
    for op in ops:
        roles = {d.name: (d.role, d.size) for d in op.dims}
        for port, param in zip(op.weights, infos[op.name].params):
            batch = [roles[n][1] for axis in port.dims for n in axis if roles[n][0] == "batch"]
            if param is not None and batch:
                raise ModelImportError(
                    f"parameter {param!r} of op {op.name!r} reads the first input's leading axis "
                    f"(size {batch[0]}), which pase takes as the batch: give an example input "
                    f"whose first axis is the batch")
