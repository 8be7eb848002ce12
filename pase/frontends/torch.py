"""Import a PyTorch module into pase's graph IR through ``torch.export``.

>>> import torch                                                  # doctest: +SKIP
>>> graph = pase.from_torch(model, (tokens,))                     # doctest: +SKIP
>>> pase.solve(graph, devices=8, cost_model="alpha-beta")          # doctest: +SKIP

The module is exported to its ATen graph (``torch.export.export``); each ATen op
becomes IR ops with an iteration space and dim roles, weights become parameters
(a tied weight counted once), views cost nothing where the IR can follow them,
and chains of element-wise ops fold into the op before them. The mapping,
op by op, and its limits are in ``docs/pytorch.md``.
"""
from __future__ import annotations

import math
from typing import Any

from pase.errors import PaseError
from pase.frontends.torch_flops import check_flops
from pase.frontends.torch_handlers import constant, integral
from pase.frontends.torch_ir import Conflict
from pase.frontends.torch_moe import find_moe
from pase.frontends.torch_moe_emit import emit_region
from pase.frontends.torch_values import TV
from pase.frontends.torch_walk import Imported, ModelImportError, Walk, source_line, target_name

__all__ = ["ModelImportError", "Imported", "TorchMissingError", "from_torch", "import_torch",
           "UNSUPPORTED_CHOICES"]

UNSUPPORTED_CHOICES = ("error", "elementwise")


class TorchMissingError(PaseError, ImportError):
    """torch is not installed."""


def need_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise TorchMissingError('importing a PyTorch model needs torch: pip install "pase[torch]"'
                                ) from exc
    return torch


def from_torch(module: Any, example_args: Any, *, name: str | None = None,
               fuse_elementwise: bool = True, unsupported: str = "error",
               strict: bool = False) -> Any:
    """The pase Graph of ``module`` called on ``example_args`` (a tuple, or one tensor).

    ``fuse_elementwise`` folds activations into the product before them and chains
    of element-wise ops into one op. ``unsupported="error"`` (default) refuses a
    module with ATen ops pase cannot model, listing each with its source line;
    ``"elementwise"`` approximates each such op as an element-wise op of its first
    input, with a warning. ``strict`` is ``torch.export.export``'s.
    """
    return import_torch(module, example_args, name=name, fuse_elementwise=fuse_elementwise,
                        unsupported=unsupported, strict=strict).graph


def export_program(module: Any, args: tuple, strict: bool = False) -> Any:
    """``torch.export.export(module, args)``; a failure is one line with a hint."""
    torch = need_torch()
    try:
        return torch.export.export(module, args, strict=strict)
    except Exception as exc:  # torch raises many types; each becomes one line
        text = " ".join(str(exc).split())
        text = text if len(text) <= 300 else text[:297] + "..."
        hint = ("try strict=False (model option strict=false)" if strict else
                "check that the module runs on its example inputs; strict=True (model option "
                "strict=true) tries torch.export's strict mode")
        raise ModelImportError(f"torch.export failed: {type(exc).__name__}: {text} ({hint})") from exc


def check_args(module: Any, example_args: Any) -> tuple:
    torch = need_torch()
    if not isinstance(module, torch.nn.Module):
        raise ModelImportError(f"expected a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_args, torch.Tensor):
        example_args = (example_args,)
    if isinstance(example_args, list):
        example_args = tuple(example_args)
    if not isinstance(example_args, tuple) or not example_args:
        raise ModelImportError(f"example_args must be a tuple of tensors (or one tensor), got "
                           f"{type(example_args).__name__}")
    for i, x in enumerate(example_args):
        if not isinstance(x, (torch.Tensor, int, float, bool)) and x is not None:
            raise ModelImportError(f"example_args[{i}] is a {type(x).__name__}; allowed: tensors "
                               f"(and Python numbers)")
    if not any(isinstance(x, torch.Tensor) for x in example_args):
        raise ModelImportError("example_args holds no tensor; pass the model's example inputs")
    return example_args


def import_torch(module: Any, example_args: Any, *, name: str | None = None,
                 fuse_elementwise: bool = True, unsupported: str = "error",
                 strict: bool = False) -> Imported:
    """:func:`from_torch` with what the importer knows: per op its ATen ops, module path
    and parameter names (:class:`Imported`)."""
    from pase.errors import OptionError
    from pase.frontends.torch_ops import HANDLERS

    if unsupported not in UNSUPPORTED_CHOICES:
        raise OptionError(f"unsupported must be one of {', '.join(UNSUPPORTED_CHOICES)}, "
                          f"got {unsupported!r}")
    args = check_args(module, example_args)
    was_training = module.training
    program = export_program(module, args, strict=strict)
    module.train(was_training)
    nodes = [n for n in program.graph.nodes if n.op == "call_function"]
    moe = find_moe(nodes, unsupported)  # experts layers, imported whole (torch_moe)
    missing = [n for n in nodes if n in moe.unknown or (
        n not in moe and _handler(HANDLERS, target_name(n)) is None
        and target_name(n) != "getitem" and not integral(n))]
    if not missing:
        moe.check()
    walk = Walk(fuse_elementwise, unsupported)
    walk.reserve(nodes)
    params = _placeholders(walk, program, module)
    for node in nodes:
        walk.node = node
        before = len(walk.ops)
        try:
            walk.values[node] = value = moe.run(walk, node, emit_region) if node in moe else \
                _run(walk, node, HANDLERS)
        except Exception:
            if missing or walk.refused:  # a walk past refused ops: what was found is the error
                break
            raise
        _module_inputs(walk, node, before)
        if isinstance(value, TV) and value.kind == "act":
            for key, path in _paths(node):
                walk.module_out[path] = value
                walk.module_calls.setdefault(path, set()).add(key.split("@")[0] + "@" +
                                                              key.partition("@")[2])
    if unsupported == "error" and (missing or walk.refused):
        raise ModelImportError(_refusal(missing, walk.refused, moe))
    graph_name = name or type(module).__name__
    imported = walk.finish(graph_name, params)
    check_flops(imported, walk)
    return imported


def _refusal(missing: list, refused: list[tuple[Any, str]], moe: Any) -> str:
    """One line for every op the walk could not import: unknown ATen ops, then ops
    known but called in a way pase cannot model (with why)."""
    parts = []
    if missing:
        parts.append(f"{len(missing)} unsupported ATen op(s): {_listed(missing, moe)}")
    lines: dict[tuple[str, str], dict[str, None]] = {}
    for n, why in refused:
        lines.setdefault((target_name(n), why), {})[source_line(n)] = None
    parts += [f"cannot import {name} at {', '.join(where)}: {why}"
              for (name, why), where in lines.items()]
    return "; ".join(parts) + " (pass unsupported=\"elementwise\" to approximate them)"


def _listed(nodes: list, moe: Any) -> str:
    """Each unsupported op once, with its distinct source lines and how many calls."""
    lines: dict[str, dict[str, None]] = {}
    calls: dict[str, int] = {}
    for n in nodes:
        name = target_name(n)
        lines.setdefault(name, {})[source_line(n) + moe.where(n)] = None
        calls[name] = calls.get(name, 0) + 1
    return "; ".join(f"aten.{name} at {', '.join(where)}" +
                     (f" ({calls[name]} calls)" if calls[name] > 1 else "")
                     for name, where in lines.items())


def _placeholders(walk: Walk, program: Any, module: Any) -> dict[str, int]:
    """Values of the program's inputs; returns the module's unique parameters' numel."""
    atoms = walk.atoms
    sig = program.graph_signature
    kinds = {spec.arg.name: (spec.kind.name, spec.target) for spec in sig.input_specs
             if hasattr(spec.arg, "name")}
    seen: dict[int, str] = {}
    params: dict[str, int] = {}
    for pname, p in module.named_parameters():
        params[pname] = p.numel()
    state = program.state_dict
    first_input = True
    for node in program.graph.nodes:
        if node.op != "placeholder":
            continue
        kind, target = kinds.get(node.name, ("USER_INPUT", None))
        val = node.meta.get("val")
        shape = tuple(int(s) for s in getattr(val, "shape", ()))
        if kind == "PARAMETER":
            tensor = state.get(target)
            key = id(tensor) if tensor is not None else id(node)
            canonical = seen.setdefault(key, target)
            view = walk.fresh(shape)
            walk.values[node] = TV(view, [a[0] for a in view], "param", None, canonical)
            walk.param_tvs.setdefault(canonical, walk.values[node])
            if node.users:
                walk.read_params.add(canonical)
        elif kind == "USER_INPUT" and hasattr(val, "shape"):
            integer = not val.dtype.is_floating_point
            view = walk.fresh(shape)
            if first_input and view:
                _input_roles(atoms, view, integer)
                walk.batch_atoms = [view[0][0]]
                first_input = False
            elif view and walk.batch_atoms and shape[0] == atoms.size[walk.batch_atoms[0]]:
                atoms.set_role(view[0][0], "batch")
            walk.values[node] = TV(view, [a[0] for a in view], "act", None, integer=integer,
                                   extra={"node": node, "input": len(walk.inputs)})
            walk.inputs.append(walk.values[node])
        else:  # buffers, constants, non-tensor inputs
            walk.values[node] = TV(walk.fresh(shape), [], "const") if shape or \
                hasattr(val, "shape") else val
    return params


def _module_inputs(walk: Walk, node: Any, before: int) -> None:
    """The first op each module runs on its input: that port's layout is the module's input's."""
    paths = [path for _, path in _paths(node) if path not in walk.module_in]
    if not paths:
        return
    for arg in node.all_input_nodes:
        tv = walk.values.get(arg)
        if not isinstance(tv, TV) or tv.kind != "act" or not tv.data:
            continue
        for p in walk.ops[before:]:
            for spec in p.inputs + p.weights:
                if spec.atoms == tv.data and spec.raw is None:
                    for path in paths:
                        walk.module_in[path] = (tv, p, spec)
                    return
    return


def _paths(node: Any) -> list[tuple[str, str]]:
    """``(call key, dotted path)`` of every module whose forward ran ``node``, outermost
    first (a module called twice has two keys: ``pool`` and ``pool@1``)."""
    from pase.frontends.torch_walk import module_path

    stack = node.meta.get("nn_module_stack") or {}
    out = []
    for key, (path, cls) in stack.items():
        single = {key: (path, cls)}
        name, _ = module_path(type("N", (), {"meta": {"nn_module_stack": single}})())
        if name:
            out.append((str(key), name))
    return out


def _input_roles(atoms: Any, view: list[list[int]], integer: bool) -> None:
    rank = len(view)
    roles = {1: ["batch"], 2: ["batch", "sequence" if integer else "channel"],
             3: ["batch", "sequence", "channel"],
             4: ["batch", "channel", "spatial", "spatial"]}.get(rank, ["batch"])
    for axis, role in zip(view, roles):
        atoms.set_role(axis[0], role)


def _bind(node: Any) -> dict[str, Any]:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {f"arg{i}": a for i, a in enumerate(node.args)} | dict(node.kwargs)
    out = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _resolve(walk: Walk, value: Any) -> Any:
    import torch.fx

    if isinstance(value, torch.fx.Node):
        return walk.values.get(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(walk, v) for v in value)
    return value


def _run(walk: Walk, node: Any, handlers: dict) -> Any:
    name = target_name(node)
    if name == "getitem":
        seq, i = _resolve(walk, node.args[0]), node.args[1]
        return seq[i] if isinstance(seq, (tuple, list)) else seq
    args = {k: _own_atoms(walk, _resolve(walk, v)) for k, v in _bind(node).items()}
    handler = _handler(handlers, name)
    try:
        if handler is None and integral(node):  # indices, masks, positions: no gradient
            return constant(walk, node)
        if handler is None:  # refused up front unless approximating: the walk goes on
            return _approximate(walk, node, args)
        return handler(walk, node, args)
    except Conflict as exc:
        if walk.unsupported == "error":
            walk.refused.append((node, str(exc)))  # listed with every other at the end
        return _approximate(walk, node, args, str(exc))


def _own_atoms(walk: Walk, value: Any) -> Any:
    """A parameter another op already holds, read again (a layer applied twice, ALBERT's
    shared layers, a tied LM head), with atoms of its own: its axes meet this op's
    tensors, not the first reader's (a square weight's rows would meet its columns)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_own_atoms(walk, v) for v in value)
    if not isinstance(value, TV) or value.kind != "param" or value.param not in walk.owner:
        return value
    atoms = walk.atoms
    fresh = {leaf: atoms.new(atoms.size[leaf], atoms.role[leaf])
             for leaf in atoms.leaf_list([a for axis in value.view for a in axis] + value.data)}
    return value.with_view([[fresh[q] for q in atoms.leaf_list(axis)] for axis in value.view],
                           data=[fresh[q] for q in atoms.leaf_list(value.data)])


def _handler(handlers: dict, name: str) -> Any:
    """The handler of ``name``; an in-place ``op_`` without one of its own is ``op``'s."""
    return handlers.get(name) or (handlers.get(name[:-1]) if name.endswith("_") else None)


def _approximate(walk: Walk, node: Any, args: dict, why: str = "unsupported") -> Any:
    """An op pase cannot model, as an element-wise op of its first tensor input (left
    out where the shapes do not allow it). In an import that refuses such ops this only
    lets the walk go on to find every other one; the import then fails."""
    from pase.frontends.torch_layout import ravel_unravel, unary

    walk.approximated_nodes.add(node)
    first = next((v for v in args.values() if isinstance(v, TV) and v.kind == "act"), None)
    val = node.meta.get("val")
    if first is None or not hasattr(val, "shape"):
        shape = tuple(getattr(val, "shape", ()))
        walk.approximate(f"aten.{target_name(node)} at {source_line(node)} ({why}): left out")
        return TV(walk.fresh(shape), [], "const")
    walk.approximate(f"aten.{target_name(node)} at {source_line(node)} ({why}): element-wise")
    shape = tuple(int(s) for s in val.shape)
    if shape == first.shape(walk.atoms):
        return unary(walk, first, 1)
    if math.prod(shape) == math.prod(first.shape(walk.atoms)):
        return ravel_unravel(walk, unary(walk, first, 1), shape)
    walk.approximated[-1] = (f"aten.{target_name(node)} at {source_line(node)} ({why}): left "
                             f"out, its output {shape} has not the elements of its input "
                             f"{first.shape(walk.atoms)}")  # what reads it reads a constant
    return constant(walk, node)
