"""Check pase's predicted communication against what XLA compiles.

:func:`verify` exports a strategy with :func:`pase.export.to_jax`, compiles the
training step for ``p`` fake CPU devices in a subprocess (never running it, see
:func:`pase.export.equivalence.compile_programs`), reads every collective of the
compiled HLO (:mod:`pase.export.hlo`) and sets them next to pase's prediction,
per op, per edge and in total, forward and backward, in bytes per device:

- an op's row: the collectives of :func:`pase.work.op_work` at its config, each
  ``collective_bytes(kind, nbytes, q) x rounds`` with ``q`` its group size (halo
  ``exchange`` as a collective-permute); compiled, the collectives under the op's
  ``op/NAME`` scope and, forward, under ``out/NAME`` (its output's own layout);
- an edge's row ``SRC->DST``: :func:`pase.work.relayout.edge_bytes` forward and
  backward; compiled, the collectives under ``edge/SRC->DST`` and, backward, under
  ``out/SRC`` (where JAX turns the gradient into the producer's layout) when SRC
  has one consumer. A producer with several consumers sums their gradients
  before that re-layout (with ``relayout="xla"``; written out, each edge re-lays
  its own gradient under its ``edge/`` scope), so its edges' backward traffic is
  compared in one row ``grad/SRC``;
- a tied parameter's row ``tied/OWNER->USER``: the matrix kept in the owner's
  layout and re-laid for the other user, forward, and that user's gradient re-laid
  back (:func:`pase.costing.tied_connections`, priced like an edge); compiled, the
  collectives under ``tied/OWNER->USER``;
- ``unattributed``: collectives outside any pase scope (none expected).

A strategy's ZeRO stages count (:func:`predict`): stage 3's gathers of a parameter
land in its op's row. XLA on CPU compiles a gradient reduce-scatter as an
all-reduce and a slice, and keeps stage 3's forward gather for backward instead of
gathering again; each moves the same bytes per device in the same direction as
pase's reduce-scatter plus backward gather, so the rows still agree.

A row agrees when compiled and predicted bytes differ by at most 1% (of the
larger). The report also lists the collectives pase did not predict (compiled
bytes in a row and direction pase predicts none for) and those XLA did not emit.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pase.costing import connection_ports, tied_connections
from pase.errors import OptionError
from pase.export.configs import strategy_variants_of
from pase.export.hlo import HloCollective, parse_collectives
from pase.ir import Graph, Op
from pase.space import check_devices
from pase.work.relayout import collective_bytes, edge_bytes
from pase.work.variants import Variant

TOLERANCE = 0.01
DIRECTIONS = ("forward", "backward")
COST_OPTIONS = ("reduce_scatter",)
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def _config_row(op: Op, config: Mapping[str, int]) -> np.ndarray:
    return np.array([[int(config.get(d.name, 1)) for d in op.dims]], dtype=np.int64)


def predict(graph: Graph, configs: Mapping[str, Mapping[str, int]], devices: int, *,
            bytes_per_element: float = 4, reduce_scatter: bool | None = None,
            variants: Mapping[str, Variant] | None = None) -> dict[str, dict]:
    """pase's predicted bytes per device: ``{row: {"kind", "forward", "backward", "collectives"}}``.

    Rows are ``op/NAME``, ``edge/SRC->DST`` and ``grad/SRC`` (see the module docstring).
    ``variants`` (``{op: Variant}``) applies each op's ZeRO stage as the exporter
    writes it (:func:`pase.export.to_jax`): not to tied parameters, and without
    recomputation, which the exported step leaves to XLA.
    """
    from pase.work import op_work

    tied = {op.attrs["tied"] for op in graph.ops if op.attrs.get("tied") is not None}
    variants = dict(variants or {})

    rows: dict[str, dict] = {}

    def row(key: str, kind: str) -> dict:
        return rows.setdefault(key, {"kind": kind, "forward": 0.0, "backward": 0.0, "collectives": []})

    for op in graph.ops:
        work = op_work(op, _config_row(op, configs[op.name]), bytes_per_element)
        zero = variants[op.name].zero if op.name in variants else 0
        if zero and op.name not in tied and op.attrs.get("tied") is None:
            work = _as_exported(op, work, zero, configs[op.name], devices)
        _add_collectives(row(f"op/{op.name}", "op"), work)
    consumers: dict[str, int] = {}
    for c in graph.connections:
        consumers[c.src] = consumers.get(c.src, 0) + 1
    extra = {} if reduce_scatter is None else {"reduce_scatter": bool(reduce_scatter)}
    for c in graph.connections:
        src, dst = graph.op(c.src), graph.op(c.dst)
        fwd, bwd = edge_bytes(src, src.outputs[c.src_output], dict(configs[src.name]), dst,
                              dst.inputs[c.dst_input], dict(configs[dst.name]), devices,
                              bytes_per_element, **extra)
        r = row(f"edge/{src.name}->{dst.name}", "edge")
        back = r if consumers[src.name] == 1 else row(f"grad/{src.name}", "grad")
        _relayout(r, "forward", fwd, f"{src.name}->{dst.name}")
        _relayout(back, "backward", bwd, f"{src.name}->{dst.name}")
    for conn in tied_connections(graph):
        owner, matrix, user, use = connection_ports(graph, conn)
        fwd, bwd = edge_bytes(owner, matrix, dict(configs[owner.name]), user, use,
                              dict(configs[user.name]), devices, bytes_per_element, **extra)
        r = row(f"tied/{owner.name}->{user.name}", "tied")
        _relayout(r, "forward", fwd, f"{owner.name}->{user.name}")
        _relayout(r, "backward", bwd, f"{owner.name}->{user.name}")
    return rows


def _as_exported(op: Op, work: Any, zero: int, config: Mapping[str, int], devices: int) -> Any:
    """``work`` at ZeRO stage ``zero`` as :func:`pase.export.to_jax` writes it: at stage 3 a
    weight that the mesh cannot shard (:func:`zero3_spec` is None) is stored whole, its
    gradient all-reduced as at stage 0."""
    from pase.export.configs import zero3_spec
    from pase.export.mesh import assign_axes, mesh_axes
    from pase.work.variants import apply_variant, data_parallel_groups

    out = apply_variant(work, zero)
    if zero != 3:
        return out
    cfg = {d.name: int(config.get(d.name, 1)) for d in op.dims}
    axes = mesh_axes(devices)
    assigned = assign_axes(op, cfg, axes)
    whole = {j for j in data_parallel_groups(work) if zero3_spec(op, j, cfg, assigned, axes) is None}
    colls = [c for c in out.collectives if c.weight not in whole]
    return dataclasses.replace(out, collectives=tuple(colls + [c for c in work.collectives
                                                               if c.weight in whole]))


def _add_collectives(r: dict, work: Any) -> None:
    """Add the bytes per device of ``work``'s collectives (one config) to row ``r``; a group
    of one device or an empty buffer moves nothing."""
    for c in work.collectives:
        q = int(work.group_size(c)[0])
        n = float(c.nbytes[0])
        if q <= 1 or n <= 0:
            continue
        kind = "collective-permute" if c.kind == "exchange" else c.kind
        moved = collective_bytes(kind, n, q) * float(c.rounds[0])
        direction = "forward" if c.phase == "forward" else "backward"
        r[direction] += moved
        r["collectives"].append({"kind": kind, "label": c.label, "phase": c.phase,
                                 "direction": direction, "buffer_bytes": n, "group_size": q,
                                 "rounds": float(c.rounds[0]), "bytes": moved})


def _relayout(row: dict, direction: str, value: float, label: str) -> None:
    """Add a predicted re-layout's bytes to ``row`` in ``direction``."""
    row[direction] += float(value)
    if value > 0:
        row["collectives"].append({"kind": "re-layout", "label": label, "direction": direction,
                                   "bytes": float(value)})


def compiled_rows(graph: Graph, collectives: Sequence[HloCollective]) -> dict[str, dict]:
    """The compiled collectives grouped into the rows of :func:`predict`."""
    consumers: dict[str, list[str]] = {}
    for c in graph.connections:
        consumers.setdefault(c.src, []).append(c.dst)
    rows: dict[str, dict] = {}
    for c in collectives:
        if c.scope == "op" or (c.scope == "out" and c.direction == "forward"):
            key, kind = f"op/{c.target}", "op"
        elif c.scope == "out" or (c.scope == "edge" and c.direction == "backward"):
            src = c.target if c.scope == "out" else c.target.split("->")[0]
            dsts = consumers.get(src, [])
            if len(dsts) == 1:
                key, kind = f"edge/{src}->{dsts[0]}", "edge"
            else:
                key, kind = f"grad/{src}", "grad"
        elif c.scope == "edge":
            key, kind = f"edge/{c.target}", "edge"
        elif c.scope == "tied":
            key, kind = f"tied/{c.target}", "tied"
        else:
            key, kind = "unattributed", "other"
        r = rows.setdefault(key, {"kind": kind, "forward": 0.0, "backward": 0.0, "collectives": []})
        r[c.direction] += c.bytes
        r["collectives"].append({"kind": c.kind, "direction": c.direction, "buffer_bytes": c.buffer_bytes,
                                 "group_size": c.group_size, "bytes": c.bytes, "line": c.line})
    return rows


def _agrees(predicted: float, compiled: float) -> bool:
    return abs(compiled - predicted) <= TOLERANCE * max(abs(predicted), abs(compiled))


def _ratio(predicted: float, compiled: float) -> float | None:
    if predicted == 0:
        return 1.0 if compiled == 0 else None
    return compiled / predicted


def compare(graph: Graph, predicted: Mapping[str, dict], compiled: Mapping[str, dict]) -> dict[str, Any]:
    """Rows side by side, totals, and what either side lacks."""
    order = ([f"op/{op.name}" for op in graph.ops]
             + sorted(k for k in set(predicted) | set(compiled) if not k.startswith("op/")))
    rows, unpredicted, not_emitted = [], [], []
    total = {f"{side}_{d}": 0.0 for side in ("predicted", "compiled") for d in DIRECTIONS}
    for key in order:
        p = predicted.get(key, {"kind": "other", "forward": 0.0, "backward": 0.0, "collectives": []})
        c = compiled.get(key, {"kind": p["kind"], "forward": 0.0, "backward": 0.0, "collectives": []})
        if not (p["forward"] or p["backward"] or c["forward"] or c["backward"]):
            continue
        pt, ct = p["forward"] + p["backward"], c["forward"] + c["backward"]
        row = {"row": key, "kind": p["kind"] if key in predicted else c["kind"],
               "predicted_forward": p["forward"], "predicted_backward": p["backward"],
               "compiled_forward": c["forward"], "compiled_backward": c["backward"],
               "predicted": pt, "compiled": ct, "ratio": _ratio(pt, ct), "within": _agrees(pt, ct),
               "predicted_collectives": p["collectives"], "compiled_collectives": c["collectives"]}
        rows.append(row)
        for d in DIRECTIONS:
            total[f"predicted_{d}"] += p[d]
            total[f"compiled_{d}"] += c[d]
            if c[d] > 0 and p[d] == 0:
                unpredicted += [dict(x, row=key) for x in c["collectives"] if x["direction"] == d]
            if p[d] > 0 and c[d] == 0:
                not_emitted += [dict(x, row=key) for x in p["collectives"] if x["direction"] == d]
    pt = total["predicted_forward"] + total["predicted_backward"]
    ct = total["compiled_forward"] + total["compiled_backward"]
    total.update(predicted=pt, compiled=ct, ratio=_ratio(pt, ct), within=_agrees(pt, ct))
    return {"rows": rows, "total": total, "unpredicted": unpredicted, "not_emitted": not_emitted,
            "rows_within": sum(r["within"] for r in rows), "rows_total": len(rows)}


def _check_cost_options(cost_options: Mapping[str, Any] | None) -> bool | None:
    options = dict(cost_options or {})
    unknown = sorted(set(options) - set(COST_OPTIONS))
    if unknown:
        raise OptionError(f"unknown cost option {unknown[0]!r} for pase verify; allowed: "
                          f"{', '.join(COST_OPTIONS)}")
    value = options.get("reduce_scatter")
    if value is None:
        return None
    from pase.options import coerce

    return coerce(value, ("bool",), "cost option reduce_scatter")


def _prepare(model, strategy, devices, batch, dtype, model_options, relayout="pase"):
    from pase.api import load_graph
    from pase.export.configs import strategy_configs
    from pase.export.jax import to_jax

    devices = check_devices(devices)
    options = dict(model_options or {})
    if batch is not None:
        options["batch"] = batch
    text = to_jax(model, strategy, devices, dtype=dtype, model_options=options, relayout=relayout)
    graph = model if isinstance(model, Graph) else load_graph(model, **options)
    return graph, strategy_configs(graph, strategy, devices), text


def verify_many(cases: Sequence[Mapping[str, Any]], *, timeout: float = 1200) -> list[dict[str, Any]]:
    """:func:`verify` for several cases, compiled in one subprocess (one JAX start-up).

    Each case is a mapping of :func:`verify`'s arguments (``model``, ``strategy``,
    ``devices`` and optionally ``batch``, ``dtype``, ``model_options``,
    ``cost_options``, ``relayout``); ``run`` is not available here.
    """
    from pase.export.equivalence import compile_programs

    prepared = []
    for case in cases:
        dtype = case.get("dtype", "float32")
        graph, configs, text = _prepare(case["model"], case["strategy"], case["devices"],
                                        case.get("batch"), dtype, case.get("model_options"),
                                        case.get("relayout", "pase"))
        prepared.append((case, graph, configs, text, dtype,
                         _check_cost_options(case.get("cost_options"))))
    if not prepared:
        return []
    most = max(int(case["devices"]) for case, *_ in prepared)
    hlos = compile_programs([text for _, _, _, text, _, _ in prepared], most, timeout=timeout)
    out = []
    for (case, graph, configs, _, dtype, rs), hlo in zip(prepared, hlos):
        devices = int(case["devices"])
        predicted = predict(graph, configs, devices, bytes_per_element=_BYTES[dtype], reduce_scatter=rs,
                            variants=strategy_variants_of(graph, case["strategy"]))
        found = parse_collectives(hlo, devices)
        report = compare(graph, predicted, compiled_rows(graph, found))
        report.update(model=graph.name, devices=devices, dtype=dtype,
                      strategy={op: {d: f for d, f in cfg.items() if f > 1} for op, cfg in configs.items()},
                      collectives=len(found))
        out.append(report)
    return out


def verify(model: str | Path | Graph, strategy: Any, devices: int, *, batch: int | None = None,
           dtype: str = "float32", model_options: Mapping[str, Any] | None = None,
           cost_options: Mapping[str, Any] | None = None, run: bool = False,
           timeout: float = 1200, relayout: str = "pase") -> dict[str, Any]:
    """Compare pase's predicted bytes per device with XLA's compiled collectives.

    Args:
        model, strategy, devices, batch, dtype, model_options, relayout: as
            :func:`pase.export.to_jax` takes them (``relayout="xla"``: XLA's own
            re-layouts, compared with the same prediction).
        cost_options: ``reduce_scatter`` (true/false) for the re-distribution model.
        run: also run the step sharded and unsharded at the given sizes (pass small
            ``model_options``) and report how far loss and gradients differ
            (``report["run"]``, the keys of :func:`pase.export.check_programs`, with
            ``equal``: both within 1e-5).

    Returns the report: ``rows`` (per op, edge and gradient group: predicted and
    compiled bytes forward and backward, ratio, ``within`` 1%, the collectives of
    each side), ``total``, ``unpredicted`` and ``not_emitted`` collectives.
    """
    report = verify_many([{"model": model, "strategy": strategy, "devices": devices, "batch": batch,
                           "dtype": dtype, "model_options": model_options,
                           "cost_options": cost_options, "relayout": relayout}], timeout=timeout)[0]
    if run:
        from pase.export.equivalence import run_equivalence

        result = run_equivalence(model, strategy, devices, batch=batch, dtype=dtype,
                                 model_options=model_options, timeout=timeout, relayout=relayout)
        result["equal"] = bool(result["loss_rel_diff"] <= 1e-5 and result["grad_max_rel_diff"] <= 1e-5)
        report["run"] = result
    return report


def _mib(x: float) -> str:
    return f"{x / 2**20:.4f}"


def format_table(report: Mapping[str, Any]) -> str:
    """The report as a text table (MiB per device)."""
    head = (f"{report['model']} on p = {report['devices']}: bytes per device (MiB), "
            f"pase's prediction vs XLA's compiled HLO ({report['collectives']} collectives)")
    lines = [head, f"{'row':<44} {'pred fwd':>10} {'pred bwd':>10} {'xla fwd':>10} {'xla bwd':>10} "
                   f"{'ratio':>7}  ok"]
    for r in report["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.4f}"
        lines.append(f"{r['row'][:44]:<44} {_mib(r['predicted_forward']):>10} "
                     f"{_mib(r['predicted_backward']):>10} {_mib(r['compiled_forward']):>10} "
                     f"{_mib(r['compiled_backward']):>10} {ratio:>7}  {'yes' if r['within'] else 'NO'}")
    t = report["total"]
    ratio = "-" if t["ratio"] is None else f"{t['ratio']:.4f}"
    lines.append(f"{'total':<44} {_mib(t['predicted_forward']):>10} {_mib(t['predicted_backward']):>10} "
                 f"{_mib(t['compiled_forward']):>10} {_mib(t['compiled_backward']):>10} {ratio:>7}  "
                 f"{'yes' if t['within'] else 'NO'}")
    lines.append(f"rows within 1%: {report['rows_within']}/{report['rows_total']}")
    for x in report["unpredicted"]:
        lines.append(f"not predicted by pase ({x['row']}, {x['direction']}): {x['line'][:160]}")
    for x in report["not_emitted"]:
        lines.append(f"not emitted by XLA ({x['row']}, {x['direction']}): {x['kind']} "
                     f"{x.get('label', '')} {_mib(x['bytes'])} MiB")
    if "run" in report:
        r = report["run"]
        lines.append(f"run: loss rel diff {r['loss_rel_diff']:.2e}, gradients {r['grad_max_rel_diff']:.2e} "
                     f"({'equal' if r['equal'] else 'NOT equal'} to an unsharded run within 1e-5)")
    return "\n".join(lines)
