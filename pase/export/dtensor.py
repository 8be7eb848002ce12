"""A pase strategy as a PyTorch DTensor plan: a DeviceMesh and Shard/Replicate placements.

:func:`to_dtensor` reads a strategy for a graph imported from a module
(:func:`pase.frontends.import_torch`) and gives, for every parameter, for every
module's output and for the model's inputs, one placement per mesh dim. The mesh
is pase's device mapping (:mod:`pase.work.layout`): one mesh dim per prime
factor of ``p`` (``x0, x1, ...``, the first slowest). A tensor takes the layout
its op has in the strategy: parameters at the op that holds them, a module's
output at the op that makes it, an input at the first op that reads it. Each
split dim of that op takes its mesh dims (:func:`pase.work.layout.assign_axes`)
and becomes ``Shard(axis)`` on them; the other mesh dims ``Replicate()``.

Some layouts have no DTensor placement, and the plan says so instead of
replicating silently (``exact: false`` with the reason; :attr:`DTensorPlan.inexpressible`):

- a torch axis made of several IR dims (GPT-2's fused ``(3 e, e)`` q/k/v weight:
  ``(3, heads, head size)``) split on an inner dim: each device holds strided
  pieces, while ``Shard`` holds one contiguous block;
- such an axis split on dims whose mesh dims are not in ascending order
  (``Shard`` on several mesh dims orders blocks by mesh dim).

There those mesh dims are ``Replicate()``: the program stays correct, and the
tensor is larger per device than pase priced.

:meth:`DTensorPlan.apply` distributes the parameters with
``torch.distributed.tensor.distribute_tensor`` and redistributes each planned
module's output in a forward hook (gradients follow in the backward pass);
:meth:`DTensorPlan.distribute_inputs` places the inputs. torch is imported only
by those two methods.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from pase.errors import OptionError, StrategyError
from pase.export.configs import strategy_configs
from pase.work.layout import assign_axes, mesh_axes

__all__ = ["DTensorPlan", "TensorPlan", "to_dtensor"]


@dataclass
class TensorPlan:
    """One tensor's placements: ``placements[i]`` for mesh dim ``i``."""

    name: str
    op: str
    shape: tuple[int, ...]
    placements: list[str]
    exact: bool = True
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shape": list(self.shape), "placements": list(self.placements),
                "exact": self.exact, "note": self.note}


@dataclass
class DTensorPlan:
    """The mesh and the placements of a strategy for one module."""

    devices: int
    mesh_shape: tuple[int, ...]
    mesh_dim_names: tuple[str, ...]
    parameters: dict[str, TensorPlan] = field(default_factory=dict)
    activations: dict[str, TensorPlan] = field(default_factory=dict)
    module_inputs: dict[str, TensorPlan] = field(default_factory=dict)
    inputs: list[TensorPlan | None] = field(default_factory=list)

    @property
    def inexpressible(self) -> list[str]:
        """One line per tensor whose pase layout DTensor cannot hold (replicated there)."""
        rows = list(self.parameters.values()) + list(self.activations.values()) + \
            list(self.module_inputs.values()) + [t for t in self.inputs if t is not None]
        return [f"{t.name}: {t.note}" for t in rows if not t.exact]

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "engine": "torch.distributed.tensor", "devices": self.devices,
                "mesh": {"shape": list(self.mesh_shape), "dim_names": list(self.mesh_dim_names)},
                "parameters": {k: v.to_dict() for k, v in self.parameters.items()},
                "activations": {k: v.to_dict() for k, v in self.activations.items()},
                "module_inputs": {k: v.to_dict() for k, v in self.module_inputs.items()},
                "inputs": [None if t is None else t.to_dict() for t in self.inputs],
                "inexpressible": self.inexpressible}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def table(self) -> str:
        mesh = " x ".join(f"{n}={s}" for n, s in zip(self.mesh_dim_names, self.mesh_shape))
        lines = [f"DeviceMesh('cpu'|'cuda', {self.devices} devices, {mesh})", "",
                 f"{'tensor':44s} {'placements':40s} op"]
        groups = [("parameter", self.parameters.values()),
                  ("output of", self.activations.values()),
                  ("input of", self.module_inputs.values()),
                  ("input", [t for t in self.inputs if t is not None])]
        for label, rows in groups:
            for t in rows:
                flag = "" if t.exact else "   NOT EXPRESSIBLE: " + t.note
                lines.append(f"{label + ' ' + t.name:44s} {'[' + ', '.join(t.placements) + ']':40s} "
                             f"{t.op}{flag}")
        bad = self.inexpressible
        lines += ["", f"{len(bad)} tensor(s) whose pase layout DTensor cannot express "
                      f"(replicated on those mesh dims)" if bad else
                  "every tensor's layout is expressed exactly"]
        return "\n".join(lines)

    # -- torch -------------------------------------------------------------------------
    def mesh(self, device_type: str = "cpu") -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.mesh_shape, mesh_dim_names=self.mesh_dim_names)

    def apply(self, module: Any, mesh: Any) -> Any:
        """Distribute ``module``'s parameters and pin its planned module outputs (in place)."""
        import torch
        from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

        made = {}  # id(old parameter) -> its DTensor parameter
        for name, plan in self.parameters.items():
            owner, _, leaf = name.rpartition(".")
            sub = module.get_submodule(owner) if owner else module
            tensor = getattr(sub, leaf)
            dist = distribute_tensor(tensor.detach(), mesh, _placements(plan.placements))
            made[id(tensor)] = torch.nn.Parameter(dist, requires_grad=tensor.requires_grad)
            setattr(sub, leaf, made[id(tensor)])
        for sub in module.modules():  # a tied parameter (an LM head's) is one DTensor too
            for key, param in list(sub._parameters.items()):
                if param is not None and id(param) in made:
                    sub._parameters[key] = made[id(param)]
        replicated = [Replicate()] * len(self.mesh_shape)
        for sub in module.modules():  # buffers (batch norm statistics) replicated
            for key, buf in list(sub._buffers.items()):
                if buf is not None and not isinstance(buf, DTensor):
                    sub._buffers[key] = distribute_tensor(buf, mesh, replicated)
        for path, plan in self.module_inputs.items():
            placements = _placements(plan.placements)

            def pre_hook(mod: Any, args: Any, placements=placements, path=path) -> Any:
                if args and isinstance(args[0], DTensor):
                    return (args[0].redistribute(mesh, placements),) + tuple(args[1:])
                _not_applied(f"module {path!r}'s first input")
                return None
            module.get_submodule(path).register_forward_pre_hook(pre_hook)
        for path, plan in self.activations.items():
            placements = _placements(plan.placements)

            def hook(mod: Any, args: Any, out: Any, placements=placements, path=path) -> Any:
                if isinstance(out, DTensor):
                    return out.redistribute(mesh, placements)
                _not_applied(f"module {path!r}'s output")
                return out
            module.get_submodule(path).register_forward_hook(hook)
        return module

    def distribute_inputs(self, args: tuple, mesh: Any) -> tuple:
        """The model's tensor inputs as DTensors in their planned placements."""
        import torch
        from torch.distributed.tensor import Replicate, distribute_tensor

        out, i = [], 0
        for a in args:
            if isinstance(a, torch.Tensor):
                plan = self.inputs[i] if i < len(self.inputs) else None
                placements = _placements(plan.placements) if plan else \
                    [Replicate()] * len(self.mesh_shape)
                out.append(distribute_tensor(a, mesh, placements))
                i += 1
            else:
                out.append(a)
        return tuple(out)


def _placements(texts: list[str]) -> list[Any]:
    from torch.distributed.tensor import Replicate, Shard

    return [Replicate() if t == "Replicate()" else Shard(int(t[6:-1])) for t in texts]


def to_dtensor(module: Any, graph: Any, strategy: Any, *, devices: int | None = None,
               example_args: Any = None) -> DTensorPlan:
    """The DTensor plan of ``strategy`` (for ``graph``, imported from ``module``).

    ``graph`` is what :func:`pase.frontends.import_torch` returned for the module, or
    the Graph itself with ``example_args`` (the module is imported again to find
    where its parameters and module outputs live). ``devices`` defaults to the
    strategy's own (a Strategy or a ``pase solve --format json`` object).
    """
    from pase.frontends.torch import import_torch
    from pase.frontends.torch_walk import Imported

    if isinstance(graph, Imported):
        imported = graph
    else:
        if example_args is None:
            raise OptionError("to_dtensor needs what the importer knows about the module: pass "
                              "pase.frontends.import_torch(module, args) as graph, or the module's "
                              "example_args")
        imported = import_torch(module, example_args, name=getattr(graph, "name", None))
        if graph is not None and [op.name for op in imported.graph.ops] != \
                [op.name for op in graph.ops]:
            raise StrategyError("the graph was not imported from this module and these inputs")
    devices = _devices(strategy, devices)
    configs = strategy_configs(imported.graph, strategy, devices)
    axes = mesh_axes(devices)
    plan = DTensorPlan(devices, tuple(s for _, s in axes), tuple(n for n, _ in axes))
    assigned = {op.name: assign_axes(op, configs[op.name], axes) for op in imported.graph.ops}
    index = {n: i for i, (n, _) in enumerate(axes)}
    for name, (op, spec) in imported.parameter_axes.items():
        plan.parameters[name] = _tensor(name, op, spec, configs[op], assigned[op], index)
        why = _unnamed_split(imported.graph.op(op), spec, configs[op])
        if why:
            plan.parameters[name].exact, plan.parameters[name].note = False, why
    for path, (op, spec) in imported.activation_axes.items():
        plan.activations[path] = _tensor(path, op, spec, configs[op], assigned[op], index)
    for path, (op, spec) in imported.module_input_axes.items():
        plan.module_inputs[path] = _tensor(path, op, spec, configs[op], assigned[op], index)
    for i, found in enumerate(imported.input_axes):
        plan.inputs.append(None if found is None else
                           _tensor(f"input {i}", found[0], found[1], configs[found[0]],
                                   assigned[found[0]], index))
    return plan


def _unnamed_split(op: Any, spec: list, config: Mapping[str, int]) -> str:
    """Why a parameter the importer recorded no dims for (an embedding's table) is not
    placed as pase splits it: its op's one weight of the same shape is split; else ''."""
    if any(n for axis in spec for n, _ in axis):
        return ""
    shape = tuple(math.prod(size for _, size in axis) for axis in spec)
    ports = [w for w in op.weights if tuple(w.shape) == shape]
    split = [f"{n}={config[n]}" for w in ports[:1] for axis in w.dims for n in axis
             if config.get(n, 1) > 1]
    if len(ports) != 1 or not split:
        return ""
    return (f"the importer recorded no dims for its axes, so its split "
            f"({', '.join(split)}) is not placed")


def _devices(strategy: Any, devices: int | None) -> int:
    found = getattr(strategy, "devices", None)
    if found is None and isinstance(strategy, Mapping):
        found = strategy.get("devices") if isinstance(strategy.get("devices"), int) else None
    if devices is None:
        if found is None:
            raise OptionError("the number of devices is not in the strategy; pass devices=")
        return int(found)
    if found is not None and int(found) != int(devices):
        raise OptionError(f"the strategy is for {found} devices, not {devices}")
    return int(devices)


def _tensor(name: str, op: str, spec: list, config: Mapping[str, int],
            assigned: Mapping[str, tuple[str, ...]], index: Mapping[str, int]) -> TensorPlan:
    """Placements of one tensor whose torch axis ``a`` is the IR dims ``spec[a]``."""
    placements = ["Replicate()"] * len(index)
    notes = []
    shape = tuple(math.prod(size for _, size in axis) for axis in spec)
    for a, axis in enumerate(spec):
        sizes = [size for _, size in axis]
        factors = [config.get(n, 1) if n else 1 for n, _ in axis]
        mesh = [index[m] for n, _ in axis if n for m in assigned.get(n, ())]
        if not mesh:
            continue
        why = _inexpressible(sizes, factors, mesh)
        if why:
            dims = ", ".join(f"{n}={f}" for (n, _), f in zip(axis, factors) if n and f > 1)
            notes.append(f"axis {a} is {' x '.join(map(str, sizes))} split {dims}: {why}")
            continue
        for m in mesh:
            placements[m] = f"Shard({a})"
    return TensorPlan(name, op, shape, placements, not notes, "; ".join(notes))


def _inexpressible(sizes: list[int], factors: list[int], mesh: list[int]) -> str:
    """Why a torch axis of IR dims ``sizes`` split ``factors`` on mesh dims ``mesh`` (in
    order) is not one ``Shard``; empty when it is."""
    tiles = [-(-s // f) for s, f in zip(sizes, factors)]
    # One contiguous block: the dims before some j whole-split (tile 1), those after it unsplit.
    if not any(all(t == 1 for t in tiles[:j]) and tiles[j + 1:] == sizes[j + 1:]
               for j in range(len(sizes))):
        return "each device's part is strided, a Shard is one contiguous block"
    if mesh != sorted(mesh):
        return "its mesh dims are not in ascending order, as several Shards of one axis need"
    return ""


def _not_applied(what: str) -> None:
    """A planned layout the hooks cannot apply (the tensor is not one DTensor: a tuple
    output, a plain tensor) is said, not skipped silently."""
    import warnings

    warnings.warn(f"pase DTensor plan: {what} is not a DTensor (a tuple or a plain tensor), "
                  f"so its planned layout is not applied", stacklevel=3)
