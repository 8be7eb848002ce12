"""Strategy: the config chosen for every op, with its cost broken down."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pase import text
from pase.errors import OptionError, StrategyError
from pase.files import regular_file, write_text_atomic
from pase.ir import Graph
from pase.problem import Problem, Solution, Status
from pase.space import PADDED_ROLES, ConfigSpace
from pase.strictjson import DuplicateKeyError
from pase.strictjson import loads as strict_loads
from pase.work.variants import DEFAULT, Variant, variant_from_json

# Version of the JSON that `pase solve/evaluate --format json` print; bump on a breaking change.
OUTPUT_VERSION = 1
# How many known op names an unknown-op message lists.
NAMES_SHOWN = 5


class UnknownOpError(StrategyError, KeyError):
    """A Strategy lookup names an op the graph does not have (also a KeyError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OpMapping(dict):
    """A dict keyed by op name whose unknown keys raise UnknownOpError listing known ops.

        >>> OpMapping({"conv1": 1.0, "fc6": 2.0}, "op_costs")["nope"]
        Traceback (most recent call last):
        ...
        pase.strategy.UnknownOpError: op_costs has no op 'nope'; ops: conv1, fc6
    """

    def __init__(self, data: Any = (), what: str = "strategy"):
        super().__init__(data)
        self.what = what

    def __missing__(self, key: Any) -> Any:
        known = list(self)
        more = f", ... ({len(known)} in all)" if len(known) > NAMES_SHOWN else ""
        raise UnknownOpError(f"{self.what} has no op {key!r}; ops: "
                             f"{', '.join(known[:NAMES_SHOWN])}{more}")

    def __reduce__(self) -> Any:  # pickle and deepcopy keep the class and its label
        return (OpMapping, (dict(self), self.what))


@dataclass
class Strategy:
    """A config per op (``{op: {dim: factor}}``) and what it costs.

    ``op_costs`` holds each op's layer cost; ``edge_costs`` each costed edge's
    re-distribution cost as ``(producer, consumer, cost)``. Their sum is
    ``total_cost``, in ``unit``.

    The total splits into :attr:`compute_cost`, the layers' own costs (the
    Problem's vertex costs), and :attr:`communication_cost`, the re-distribution
    of tensors between layers (its edge costs). A layer's cost is what the cost
    model charges to run it under its configuration: its arithmetic and, in the
    paper's model, the in-layer collectives its split needs (the all-reduce of a
    split reduction, of weight gradients); those stay in ``compute_cost``, so
    ``communication_cost`` is the inter-layer traffic alone. The two add up to
    ``total_cost``.

    ``op_prices`` carries what the cost model said of each op at its config
    (:mod:`pase.prices`: memory per device, and from the calibrated model each op's
    kernel, collective and optimizer seconds), so the simulator and the viewer read the
    plan's own prices instead of building its Problem again.
    """

    graph_name: str
    devices: int
    configs: dict[str, dict[str, int]]
    total_cost: float
    unit: str
    op_costs: dict[str, float]
    edge_costs: list[tuple[str, str, float]]
    cost_model: str = ""
    solution: Solution | None = None
    build_seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, Variant] = field(default_factory=dict)
    op_prices: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.configs = OpMapping(self.configs, "strategy")
        self.op_costs = OpMapping(self.op_costs, "op_costs")
        self.variants = {op: variant_from_json(v, f"variant of op {op!r}")
                         for op, v in self.variants.items()}
        self.variants = {op: v for op, v in self.variants.items() if not v.is_default}

    def variant(self, op: str) -> Variant:
        """The op's variant: ZeRO stage and recomputation (zero 0, none when not recorded)."""
        self.configs[op]  # an unknown op raises UnknownOpError
        return self.variants.get(op, DEFAULT)

    @classmethod
    def from_choice(cls, graph: Graph, space: ConfigSpace, problem: Problem,
                    choice: tuple[int, ...], priced_by: Any = None, **kwargs: Any) -> "Strategy":
        """The Strategy of ``choice`` on ``problem``; ``priced_by``, the cost model that built
        ``problem``, adds each op's seconds to the carried prices (:mod:`pase.prices`)."""
        from pase.prices import op_prices, priced_at, timed

        c = problem.check_choice(choice)
        names = problem.names
        op_costs = {names[v]: float(problem.vertex_costs[v][c[v]]) for v in range(len(names))}
        edges = [(names[u], names[v], float(m[c[u], c[v]]))
                 for (u, v), m in zip(problem.edges, problem.edge_costs)]
        total = sum(op_costs.values()) + sum(e[2] for e in edges)
        maps = problem.variants
        configs = {op.name: space.config(i, int(c[i] if maps is None else maps[i].config[c[i]]))
                   for i, op in enumerate(graph.ops)}
        variants = {} if maps is None else {op.name: Variant(*maps[i].variant(int(c[i])))
                                            for i, op in enumerate(graph.ops)}
        kwargs.setdefault("op_prices", op_prices(graph, problem, c, priced_by))
        if timed(priced_by):  # what the carried seconds and bytes were priced at
            kwargs["meta"] = {**kwargs.get("meta", {}), **priced_at(priced_by)}
        return cls(graph.name, space.devices, configs, total, problem.unit, op_costs, edges,
                   variants=variants, **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], what: str = "strategy") -> "Strategy":
        """A Strategy from its JSON form (:meth:`to_dict`), costs and carried prices included;
        keys it does not hold (the plan's price, the memory report) return to ``meta``."""
        try:
            configs = strategy_mapping(data)
            variants = strategy_variants(data)
            sol = None
            if data.get("solver") is not None and data.get("status") is not None:
                sol = Solution((), _number(data.get("total_cost")), Status(data["status"]),
                               str(data["solver"]), data.get("lower_bound"),
                               float(data.get("solve_seconds") or 0.0), dict(data.get("stats") or {}))
            edges = [(str(e["src"]), str(e["dst"]), _number(e["cost"]))
                     for e in data.get("edge_costs") or ()]
            op_costs = {str(k): _number(v) for k, v in (data.get("op_costs") or {}).items()}
            prices = data.get("op_prices") or {}
            if not isinstance(prices, Mapping) or not all(isinstance(v, Mapping)
                                                          for v in prices.values()):
                raise StrategyError(f"{what}: \"op_prices\" must map op names to objects")
            meta = {k: v for k, v in data.items() if k not in _OWN_KEYS}
            return cls(str(data.get("model", "")), int(data.get("devices") or 0), configs,
                       _number(data.get("total_cost")), str(data.get("cost_unit") or ""), op_costs,
                       edges, str(data.get("cost_model") or ""), sol,
                       float(data.get("build_seconds") or 0.0), meta, variants,
                       {str(k): dict(v) for k, v in prices.items()})
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, StrategyError):
                raise
            raise StrategyError(f"{what} is not a `pase solve --format json` output: {exc}") from None

    @property
    def compute_cost(self) -> float:
        """The layers' own costs (vertex costs, in-layer collectives included)."""
        return sum(self.op_costs.values()) if self.op_costs else \
            (self.total_cost if not math.isfinite(self.total_cost) else 0.0)

    @property
    def communication_cost(self) -> float:
        """The re-distribution between layers (edge costs)."""
        if not self.op_costs and not math.isfinite(self.total_cost):
            return self.total_cost
        return sum(e[2] for e in self.edge_costs)

    # -- presentation ------------------------------------------------------------
    def split(self, op: str) -> dict[str, int]:
        """Only the dims that are actually split (factor > 1)."""
        return {d: f for d, f in self.configs[op].items() if f > 1}

    def table(self, limit: int | None = None) -> str:
        """A readable per-op table: split dims, layer cost, share of the total; a
        ``variant`` column (ZeRO stage, recomputation) when any op has one."""
        shown = bool(self.variants)
        header = ("op", "split", *(("variant",) if shown else ()), f"cost ({self.unit})", "share")
        rows = []
        total = self.total_cost or 1.0
        for name in list(self.configs)[:limit]:
            split = ", ".join(f"{d}={f}" for d, f in self.split(name).items()) or "-"
            rows.append((name, split, *((str(self.variant(name)),) if shown else ()),
                         f"{self.op_costs[name]:.4g}", f"{100 * self.op_costs[name] / total:.1f}%"))
        edge_total = sum(e[2] for e in self.edge_costs)
        rows.append(("(edges)", f"{sum(1 for e in self.edge_costs if e[2] > 0)} re-distributing",
                     *(("",) if shown else ()), f"{edge_total:.4g}", f"{100 * edge_total / total:.1f}%"))
        left = len(header) - 2  # cost and share are numbers
        return text.table(rows, header, right=(left, left + 1))

    def _repr_html_(self) -> str:
        """The summary and the plan table, for Jupyter (:mod:`pase.viewer.notebook`)."""
        from pase.viewer.notebook import repr_html

        return repr_html(self)

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form documented in the README.

        Costs, bounds and gaps that are not finite (an infeasible answer has no
        cost) are None, and ``status`` says why.
        """
        sol = self.solution
        out: dict[str, Any] = {
            "version": OUTPUT_VERSION,
            "model": self.graph_name,
            "devices": self.devices,
            "solver": sol.solver if sol else None,
            "cost_model": self.cost_model,
            "total_cost": finite_or_none(self.total_cost),
            "compute_cost": finite_or_none(self.compute_cost),
            "communication_cost": finite_or_none(self.communication_cost),
            "cost_unit": self.unit,
            "status": str(sol.status) if sol else None,
            "lower_bound": finite_or_none(sol.lower_bound) if sol else None,
            "gap": finite_or_none(sol.gap) if sol else None,
            "build_seconds": self.build_seconds,
            "solve_seconds": sol.wall_time if sol else None,
            "stats": finite_json(sol.stats) if sol else {},
            "strategy": dict(self.configs),
            **({"variants": {op: v.to_json() for op, v in self.variants.items()}}
               if self.variants else {}),
            "op_costs": {op: finite_or_none(c) for op, c in self.op_costs.items()},
            "edge_costs": [{"src": s, "dst": d, "cost": finite_or_none(c)}
                           for s, d, c in self.edge_costs],
            **({"op_prices": finite_json(self.op_prices)} if self.op_prices else {}),
        }
        out.update(finite_json(self.meta))
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        text = json_text(self.to_dict())
        if path is not None:
            write_text_atomic(path, text + "\n", what="strategy file")
        return text


# The keys :meth:`Strategy.to_dict` writes itself; the others are its ``meta``.
_OWN_KEYS = frozenset(("version", "model", "devices", "solver", "cost_model", "total_cost",
                       "compute_cost", "communication_cost", "cost_unit", "status", "lower_bound",
                       "gap", "build_seconds", "solve_seconds", "stats", "strategy", "variants",
                       "op_costs", "edge_costs", "op_prices"))


def _number(value: Any) -> float:
    """A cost from JSON: None (not finite) is infinity."""
    return float("inf") if value is None else float(value)


def read_strategy_file(path: str | Path) -> dict[str, dict[str, int]]:
    """Read ``{op: {dim: factor}}`` from a JSON file (or a ``pase solve`` output)."""
    return strategy_mapping(read_strategy_json(path))


def read_strategy_json(path: str | Path) -> Any:
    """The parsed JSON of a strategy file (a mapping or a ``pase solve`` output), with
    one-line StrategyErrors for unreadable, non-UTF-8 or invalid JSON; validate it with
    :func:`strategy_mapping` and :func:`strategy_variants`."""
    regular_file(path, "strategy file", StrategyError)  # a FIFO would block the read
    try:
        data = strict_loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise StrategyError(f"cannot read strategy file {path}: {exc.strerror}") from exc
    except DuplicateKeyError as exc:
        raise StrategyError(f"strategy file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise StrategyError(f"strategy file {path} is not UTF-8 text: {exc.reason} at byte "
                            f"{exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise StrategyError(f"strategy file {path} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise StrategyError(f"strategy file {path} nests too deeply to be a strategy") from None
    return data


def strategy_mapping(strategy: Any) -> dict[str, dict[str, int]]:
    """``{op: {dim: factor}}`` from a Strategy, a ``pase solve --format json`` object or a mapping."""
    if isinstance(strategy, Strategy):
        return {op: dict(dims) for op, dims in strategy.configs.items()}
    if isinstance(strategy, Mapping) and "version" in strategy:  # a file pase wrote
        not_a_plan(strategy)
        if "strategy" in strategy:
            strategy = strategy["strategy"]
    elif isinstance(strategy, Mapping) and _is_solve_output(strategy):
        strategy = strategy["strategy"]
    return check_strategy_mapping(strategy)


def not_a_plan(data: Mapping[str, Any]) -> None:
    """Refuse, saying what it is, an output of pase that holds no per-op plan: an infeasible
    solve's, a layout search's ranking, a pipeline plan (its stages are read by the commands
    that take one, before this)."""
    if data.get("status") == "infeasible":
        raise StrategyError("the strategy file records an infeasible solve (status "
                            "\"infeasible\"): it holds no strategy; solve again with a larger "
                            "--memory-cap or more devices")
    if "ranked" in data and "best" in data:
        raise StrategyError("the strategy file is a `pase solve --layouts` ranking, not a plan: "
                            "write its best layout as a plan with `pase evaluate MODEL -p N "
                            "--cluster C --layout L ... --output PLAN`")
    if data.get("kind") == "pipeline" or isinstance(data.get("pipeline"), Mapping):
        raise StrategyError("the strategy file is a pipeline plan (stages, each with its own "
                            "per-op splits), not a per-op plan of the whole model; this command "
                            "reads per-op plans (`pase solve` without --pipeline or "
                            "--global-batch, `pase evaluate --layout` with pp=1)")


def strategy_variants(strategy: Any) -> dict[str, Variant]:
    """``{op: Variant}`` of a Strategy or a ``pase solve --format json`` object (its
    ``"variants"``); a plain ``{op: {dim: factor}}`` mapping or an older output without
    variants has none (every op at ZeRO stage 0, without recomputation)."""
    if isinstance(strategy, Strategy):
        return dict(strategy.variants)
    if not (isinstance(strategy, Mapping) and _is_solve_output(strategy)):
        return {}
    data = strategy.get("variants", {})
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise StrategyError(f"a strategy's \"variants\" must map op names to "
                            f"{{\"zero\": .., \"recompute\": ..}} objects, got {type(data).__name__}")
    try:
        return {str(op): variant_from_json(v, f"variant of op {op!r}") for op, v in data.items()}
    except OptionError as exc:
        raise StrategyError(str(exc)) from None


def read_strategy_variants(path: str | Path) -> dict[str, Variant]:
    """The variants recorded in a strategy file (none for a plain mapping or an older file)."""
    return strategy_variants(read_strategy_json(path))


def _is_solve_output(data: Mapping[str, Any]) -> bool:
    """A solve output holds ``"strategy": {op: {dim: factor}}``; an op named so holds factors."""
    inner = data.get("strategy")
    return isinstance(inner, Mapping) and all(isinstance(v, Mapping) for v in inner.values())


def recorded_build(data: Any, what: str = "strategy") -> tuple[dict[str, Any] | None, int | None]:
    """The model options and batch a plan file records it was solved or priced for: a
    solve's (or per-op evaluate's) ``"model_options"`` and ``"batch"``, else an ``evaluate
    --layout`` output's ``"plan"`` block; None for what it does not record (a plain
    mapping, a file older than these keys)."""
    if not (isinstance(data, Mapping) and _is_solve_output(data)):
        return None, None
    plan = data.get("plan")
    if "model_options" not in data and "batch" not in data and isinstance(plan, Mapping):
        data = plan
    options, batch = data.get("model_options"), data.get("batch")
    if options is not None and not isinstance(options, Mapping):
        raise StrategyError(f"{what}: \"model_options\" must be an object such as "
                            f"{{\"layers\": 2}}, got {type(options).__name__}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise StrategyError(f"{what}: \"batch\" must be an integer >= 1, got {batch!r}")
    return (None if options is None else {str(k): v for k, v in options.items()}), batch


def names_every_op(data: Any) -> bool:
    """Whether a strategy must name every op of its model: a solve's output (or an evaluate's)
    does, so an op it lacks means another model; a plain mapping may leave ops unsplit."""
    return isinstance(data, Strategy) or (isinstance(data, Mapping) and _is_solve_output(data))


def op_config(op: Any, given: Mapping[str, int], devices: int) -> dict[str, int]:
    """``{dim: factor}`` for every dim of ``op`` (unnamed dims 1), checked: known dims,
    factors dividing their dim (a vocabulary may split with padding, as Megatron-LM pads
    it: :data:`pase.space.PADDED_ROLES`), pinned dims unsplit, at most ``devices`` ways."""
    for dim in given:
        if dim not in op.dim_names:
            raise StrategyError(f"strategy for op {op.name!r} names unknown dim {dim!r}; "
                                f"dims: {', '.join(op.dim_names)}")
    cfg = {d.name: given.get(d.name, 1) for d in op.dims}
    for d in op.dims:
        f = cfg[d.name]
        if (d.size % f and d.role not in PADDED_ROLES) or (d.name in op.pinned and f != 1):
            why = "is pinned" if d.name in op.pinned else \
                f"has size {d.size}, which {f} does not divide"
            raise StrategyError(f"strategy splits dim {d.name!r} of op {op.name!r} {f} ways, "
                                f"but that dim {why}")
    if math.prod(cfg.values()) > devices:
        raise StrategyError(f"strategy splits op {op.name!r} {math.prod(cfg.values())} ways, "
                            f"more than the {devices} devices (p={devices})")
    return cfg


def check_strategy_mapping(data: Any) -> dict[str, dict[str, int]]:
    """A validated copy of ``{op: {dim: factor}}``; factors are integers >= 1 (numpy ones too)."""
    if not isinstance(data, Mapping):
        raise StrategyError(f"a strategy must map op names to {{dim: factor}} objects, "
                            f"got {type(data).__name__}")
    out = {}
    for op, dims in data.items():
        if not isinstance(dims, Mapping):
            raise StrategyError(f"strategy entry for op {op!r} must be a {{dim: factor}} object")
        for d, f in dims.items():
            if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, np.integer)) or f < 1:
                raise StrategyError(f"strategy splits dim {d!r} of op {op!r} {f!r} ways; "
                                    f"factors must be integers >= 1")
        out[str(op)] = {str(d): int(f) for d, f in dims.items()}
    return out


def finite_or_none(value: Any) -> Any:
    """``value`` as a plain Python number, or None when it is not finite."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite_json(value: Any) -> Any:
    """Plain JSON types throughout; non-finite floats become None (for free-form stats)."""
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [finite_json(v) for v in value]
    return finite_or_none(value)


def json_text(data: Any, indent: int | None = 1) -> str:
    """Strict JSON: numpy values become Python ones; Infinity or NaN raise ValueError.

    Outputs put None where a value is legitimately not finite (with a status
    saying why); anything else non-finite is a bug, and this fails loudly.
    """
    return json.dumps(data, indent=indent, allow_nan=False, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
