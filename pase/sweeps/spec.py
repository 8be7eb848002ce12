"""A sweep spec: a grid of runs, the limits of each run, and rules that leave points out.

A spec is a TOML file or the same structure as a dict::

    [grid]                       # one list per axis; a single value is a list of one
    model = ["alexnet", "rnnlm"]
    devices = [4, 8]
    solver = ["dp", "greedy"]    # default ["auto"]
    cost_model = ["paper"]       # default ["paper"]
    # optional: cluster, memory_cap, batch

    [grid.solver_options.dp]     # options per plug-in name, one list per option
    ordering = ["generateseq", "min-fill"]

    [run]
    time_limit = 60              # seconds per run, given to the solver
    memory_limit = "4GiB"        # address space per run

    [[exclude]]                  # a point matching every key of a rule is left out
    solver = "greedy"
    devices = [8]

    [[exclude]]                  # option axes: plug-in name, option, value(s)
    model = "inception_v3"
    solver_options = {dp = {ordering = "bfs"}}

Every name and option is checked before any run (:func:`load_spec`), so a typo
is a one-line :class:`pase.errors.OptionError` (or UnknownNameError), never a
grid of failed runs.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from pase.errors import GraphError, OptionError, PaseError, TooLargeError, UnknownNameError
from pase.files import regular_file
from pase.options import check_time_limit, coerce_options, parse_bytes

# Axes of a point, in the order of the store's columns and of the grid's expansion.
AXES = ("model", "devices", "solver", "cost_model", "cluster", "memory_cap", "batch",
        "model_options", "solver_options", "cost_options")
REQUIRED = ("model", "devices")
SCALAR_AXES = AXES[:7]
OPTION_AXES = {"model_options": "model", "solver_options": "solver", "cost_options": "cost_model"}
RUN_KEYS = ("time_limit", "memory_limit", "kill_after", "seed", "repeats", "build_budget",
            "threads")
# Seconds a run may take past its time limit (building the Problem, writing the
# answer) before it is killed, when [run] kill_after is not given: twice the
# limit plus this.
KILL_GRACE = 10.0
# Seconds each solver option is given on a two-op chain when the spec is checked.
PROBE_SECONDS = 2.0


class SpecError(OptionError):
    """A sweep spec that cannot run: malformed TOML, an unknown key, axis, name or option."""


@dataclass(frozen=True)
class RunSettings:
    """The ``[run]`` table: what every run of the grid shares.

    ``time_limit`` goes to the solver; ``kill_after`` (default ``2 x time_limit
    + 10`` s, none without a time limit) is the wall clock after which the run's
    process is killed and recorded as ``time_limit``; ``memory_limit`` bytes
    bound the run's address space (``out_of_memory`` past it); ``repeats`` runs
    the solver that many times on one Problem and keeps the fastest time;
    ``threads`` is the BLAS threads per run (default 1, so runs side by side do
    not oversubscribe the cores).
    """

    time_limit: float | None = None
    memory_limit: float | None = None
    kill_after: float | None = None
    seed: int | None = 0
    repeats: int = 1
    build_budget: float | None = None
    threads: int = 1

    @property
    def wall_limit(self) -> float | None:
        if self.kill_after is not None:
            return self.kill_after
        return None if self.time_limit is None else 2 * self.time_limit + KILL_GRACE

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in RUN_KEYS}


@dataclass(frozen=True)
class Spec:
    """A checked spec: its axes, run settings and exclusion rules."""

    grid: dict[str, Any]
    run: RunSettings = field(default_factory=RunSettings)
    exclude: tuple[dict[str, Any], ...] = ()

    def points(self) -> list[dict[str, Any]]:
        """Every grid point not excluded, in grid order (model varies slowest, options fastest)."""
        return [p for p in self._expand() if not any(_matches(rule, p) for rule in self.exclude)]

    def _expand(self) -> Iterator[dict[str, Any]]:
        g = self.grid
        for model, devices, solver, cost_model in itertools.product(
                g["model"], g["devices"], g["solver"], g["cost_model"]):
            takes = _cost_takes(cost_model)
            clusters = g.get("cluster", (None,)) if "cluster" in takes else (None,)
            caps = g.get("memory_cap", (None,)) if "memory_cap" in takes else (None,)
            for cluster, cap, batch in itertools.product(clusters, caps, g["batch"]):
                for mo, so, co in itertools.product(
                        _option_points(g["model_options"].get(model, {})),
                        _option_points(g["solver_options"].get(solver, {})),
                        _option_points(g["cost_options"].get(cost_model, {}))):
                    yield {"model": model, "devices": devices, "solver": solver,
                           "cost_model": cost_model, "cluster": cluster, "memory_cap": cap,
                           "batch": batch, "model_options": mo, "solver_options": so,
                           "cost_options": co}


def point_key(point: Mapping[str, Any]) -> str:
    """The store's unique key of a point: its axis values as canonical JSON (a memory cap
    in bytes, so that ``80GiB`` and ``80 GiB`` are one point)."""
    values = {a: point.get(a) for a in AXES}
    cap = values.get("memory_cap")
    if isinstance(cap, str) and cap.strip().lower() != "none":
        from pase.options import parse_bytes

        values["memory_cap"] = parse_bytes(cap)
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def load_spec(spec: "str | Path | Mapping[str, Any] | Spec") -> Spec:
    """A checked :class:`Spec` from a TOML path, a dict of the same shape, or a Spec."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, (str, Path)):
        spec = read_toml(Path(spec))
    if not isinstance(spec, Mapping):
        raise SpecError(f"a sweep spec is a TOML path or a dict, got {type(spec).__name__}")
    unknown = sorted(set(spec) - {"grid", "run", "exclude"})
    if unknown:
        raise SpecError(f"unknown spec table {unknown[0]!r}; a spec has [grid], [run] and "
                        f"[[exclude]]")
    grid = _check_grid(spec.get("grid"))
    run = _check_run(spec.get("run", {}))
    exclude = _check_exclude(spec.get("exclude", []))
    return Spec(grid, run, exclude)


def read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    regular_file(path, "sweep spec", SpecError)  # a FIFO would block the read
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read sweep spec {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise SpecError(f"sweep spec {path} is not UTF-8 text: {exc.reason}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"sweep spec {path} is not valid TOML: {exc}") from exc


# -- checks ---------------------------------------------------------------------------

def _values(axis: str, value: Any) -> tuple:
    values = tuple(value) if isinstance(value, list) else (value,)
    if not values:
        raise SpecError(f"grid axis {axis!r} is empty; give at least one value")
    for v in values:
        if isinstance(v, (dict, list)):
            raise SpecError(f"grid axis {axis!r} holds {json.dumps(v)}; values are names, "
                            f"numbers or text")
    if len(set(map(json.dumps, values))) < len(values):
        raise SpecError(f"grid axis {axis!r} repeats a value: {list(values)}")
    return values


def _check_grid(grid: Any) -> dict[str, Any]:
    from pase.registry import COST_MODELS, MODELS, SOLVERS
    from pase.space import check_devices

    if not isinstance(grid, Mapping) or not grid:
        raise SpecError("the spec has no [grid] (or it is empty); it needs at least "
                        "model and devices")
    unknown = sorted(set(grid) - set(AXES))
    if unknown:
        raise SpecError(f"unknown grid axis {unknown[0]!r}; axes: {', '.join(AXES)}")
    missing = [a for a in REQUIRED if a not in grid]
    if missing:
        raise SpecError(f"grid axis {missing[0]!r} is missing; required: {', '.join(REQUIRED)}")
    out: dict[str, Any] = {a: _values(a, grid[a]) for a in SCALAR_AXES if a in grid}
    out.setdefault("solver", ("auto",))
    out.setdefault("cost_model", ("paper",))
    out.setdefault("batch", (None,))
    for model in out["model"]:
        if not isinstance(model, str):
            raise SpecError(f"grid model {model!r} is not a name")
        if model not in MODELS and not (model.endswith(".json") and Path(model).is_file()):
            raise UnknownNameError(f"unknown model {model!r} in the grid; known: "
                                   f"{', '.join(MODELS.names())} (or a graph JSON file)")
    for p in out["devices"]:
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise SpecError(f"grid devices {p!r} must be integers >= 1")
        _user_mistake(f"grid devices {p}", check_devices, p)
    for solver in out["solver"]:
        _known(SOLVERS, "solver", solver)
    for cm in out["cost_model"]:
        _known(COST_MODELS, "cost_model", cm)
    for b in out["batch"]:
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise SpecError(f"grid batch {b!r} must be integers >= 1")
    if "cluster" in out:
        _check_clusters(out)
    if "memory_cap" in out:
        out["memory_cap"] = tuple(_cap(c) for c in out["memory_cap"])
        if not any("memory_cap" in _cost_takes(cm) for cm in out["cost_model"]):
            raise SpecError(f"grid memory_cap applies to cost models with memory, and none of "
                            f"{list(out['cost_model'])} has one (use e.g. 'alpha-beta')")
    for axis, owner in OPTION_AXES.items():
        out[axis] = _check_options(axis, grid.get(axis, {}), out[owner])
    _check_values(out)
    return out


def _check_values(out: dict[str, Any]) -> None:
    """Try every value the way a run uses it, so that a mistake (a cyclic graph file, an
    ordering no solver knows, heads not dividing the width) is refused before the first
    run instead of being stored as a grid of ``refused`` runs."""
    from pase.api import build_problem, load_graph, make_cost_model, run_solver

    for model in out["model"]:
        for options in _option_points(out["model_options"].get(model, {})):
            for batch in out["batch"]:
                where = _where("model", model, options)
                if batch is not None and "batch" in options:
                    raise SpecError(f"{where}: batch given twice, as an option and on the batch "
                                    f"axis")
                both = {**options, **({} if batch is None else {"batch": batch})}
                _user_mistake(_where("model", model, both), load_graph, model, **both)
    for cm in out["cost_model"]:
        takes_cluster = "cluster" in _cost_takes(cm) and "cluster" in out
        for cluster in out["cluster"] if takes_cluster else (None,):
            on = {} if cluster is None else {"cluster": cluster}  # an option may need the device
            for options in _option_points(out["cost_options"].get(cm, {})):
                _user_mistake(_where("cost_model", cm, {**options, **on}), make_cost_model, cm,
                              **options, **on)
    tried = [(s, o) for s in out["solver"] for o in _option_points(out["solver_options"].get(s, {}))
             if o]
    if tried:  # solver options are checked by solving a two-op chain with them
        tiny = build_problem("chain", 2, model_options={"length": 2}).problem
        for solver, options in tried:
            _user_mistake(_where("solver", solver, options), _probe, run_solver, solver, tiny,
                          options)


def _probe(run_solver: Any, solver: str, problem: Any, options: Mapping[str, Any]) -> None:
    try:
        run_solver(solver, problem, time_limit=PROBE_SECONDS, **options)
    except (OptionError, UnknownNameError):
        raise
    except Exception:  # nothing to say about the option: a real run reports it (a bug, a backend)
        pass


def _where(axis: str, name: str, options: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items())
    return f"grid {axis} {name!r}" + (f" with {shown}" if shown else "")


def _user_mistake(where: str, check: Any, *args: Any, **kwargs: Any) -> None:
    """Run ``check``; a refusal that is the spec's fault becomes a SpecError naming ``where``."""
    try:
        check(*args, **kwargs)
    except SpecError:
        raise
    except (OptionError, UnknownNameError, GraphError, TooLargeError) as exc:
        raise SpecError(f"{where}: {exc}") from None


def _known(registry: Any, axis: str, name: Any) -> None:
    if not isinstance(name, str) or name not in registry:
        raise UnknownNameError(f"unknown {axis} {name!r} in the grid; known: "
                               f"{', '.join(registry.names())}")


def _check_clusters(out: dict[str, Any]) -> None:
    from pase.cluster import get_cluster

    if not any("cluster" in _cost_takes(cm) for cm in out["cost_model"]):
        raise SpecError(f"grid cluster applies to cost models that take a cluster, and none "
                        f"of {list(out['cost_model'])} does (use e.g. 'alpha-beta')")
    for c in out["cluster"]:
        if not isinstance(c, str):
            raise SpecError(f"grid cluster {c!r} is not a preset name or a file")
        get_cluster(c)  # an unknown preset fails here, listing the known ones


def _cap(cap: Any) -> Any:
    if isinstance(cap, str) and cap.strip().lower() == "none":
        return "none"
    try:
        parse_bytes(cap)
    except (PaseError, TypeError, ValueError) as exc:
        raise SpecError(f"grid memory_cap {cap!r}: {exc}") from None
    return cap


def _check_options(axis: str, table: Any, owners: tuple) -> dict[str, dict[str, tuple]]:
    from pase.registry import COST_MODELS, MODELS, SOLVERS

    owner = OPTION_AXES[axis]
    if not isinstance(table, Mapping):
        raise SpecError(f"grid {axis} must be a table of {owner} names, e.g. "
                        f"[grid.{axis}.{owners[0]}]")
    out = {}
    for name, options in table.items():
        if name not in owners:
            raise SpecError(f"grid {axis} names {owner} {name!r}, which is not on the {owner} "
                            f"axis ({', '.join(map(str, owners))})")
        if not isinstance(options, Mapping) or not options:
            raise SpecError(f"grid {axis}.{name} must be a non-empty table of option = list")
        func = {"model": MODELS, "solver": SOLVERS, "cost_model": COST_MODELS}[owner].get(name)
        what = f"{owner.replace('_', ' ')} {name!r}"
        reserved = ("time_limit", "seed") if owner == "solver" else ()
        if owner == "cost_model" and "cluster" in options:
            raise SpecError(f"grid {axis}.{name}.cluster: use the grid's cluster axis")
        checked = {}
        for key, values in options.items():
            vals = _values(f"{axis}.{name}.{key}", values)
            for v in vals:
                coerce_options(func, {key: v}, what, reserved=reserved)
            checked[key] = vals
        out[name] = checked
    return out


def _cost_takes(cost_model: str) -> frozenset[str]:
    """``cluster`` and ``memory_cap`` where ``cost_model`` takes them (a ``cluster``
    parameter; memory vectors, as :meth:`pase.costing.CostModel.has_memory` says)."""
    import inspect

    from pase.costing import CostModel
    from pase.registry import COST_MODELS

    cls = COST_MODELS.get(cost_model)
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}
    takes = {"cluster"} if "cluster" in params else set()
    if cls.memory is not CostModel.memory or cls.vertex_terms is not CostModel.vertex_terms:
        takes.add("memory_cap")
    return frozenset(takes)


def _option_points(options: Mapping[str, tuple]) -> Iterator[dict[str, Any]]:
    keys = sorted(options)
    for values in itertools.product(*(options[k] for k in keys)):
        yield dict(zip(keys, values))


def _check_run(run: Any) -> RunSettings:
    if not isinstance(run, Mapping):
        raise SpecError("[run] must be a table")
    unknown = sorted(set(run) - set(RUN_KEYS))
    if unknown:
        raise SpecError(f"unknown [run] key {unknown[0]!r}; keys: {', '.join(RUN_KEYS)}")
    kw: dict[str, Any] = {}
    for key in ("time_limit", "kill_after"):
        if run.get(key) is not None:
            kw[key] = check_time_limit(run[key]) if not isinstance(run[key], bool) else \
                _bad(key, run[key], "seconds > 0")
    for key in ("memory_limit", "build_budget"):
        if run.get(key) is not None:
            try:
                kw[key] = parse_bytes(run[key])
            except (PaseError, TypeError, ValueError) as exc:
                raise SpecError(f"[run] {key} {run[key]!r}: {exc}") from None
            if not (kw[key] > 0 and math.isfinite(kw[key])):
                _bad(key, run[key], "a size > 0 such as '4GiB'")
    if "seed" in run:
        seed = run["seed"]
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            _bad("seed", seed, "an integer >= 0")
        kw["seed"] = seed
    for key in ("repeats", "threads"):
        if key in run:
            v = run[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                _bad(key, v, "an integer >= 1")
            kw[key] = v
    return RunSettings(**kw)


def _bad(key: str, value: Any, allowed: str) -> Any:
    raise SpecError(f"[run] {key} must be {allowed}, got {value!r}")


def _check_exclude(rules: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(rules, Mapping):
        rules = [rules]
    if not isinstance(rules, list):
        raise SpecError("exclude must be a list of tables ([[exclude]])")
    out = []
    allowed = SCALAR_AXES + tuple(OPTION_AXES)
    for rule in rules:
        if not isinstance(rule, Mapping) or not rule:
            raise SpecError("each [[exclude]] rule must be a non-empty table of axis = value(s)")
        unknown = sorted(set(rule) - set(allowed))
        if unknown:
            raise SpecError(f"unknown exclude axis {unknown[0]!r}; axes: {', '.join(allowed)}")
        checked: dict[str, Any] = {}
        for axis, value in rule.items():
            if axis not in OPTION_AXES:
                checked[axis] = _values(f"exclude.{axis}", value)
                continue
            if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) and v
                                                         for v in value.values()) or not value:
                raise SpecError(f"exclude.{axis} must be a table of {OPTION_AXES[axis]} names "
                                f"to option = value(s), e.g. {{dp = {{ordering = \"bfs\"}}}}")
            checked[axis] = {name: {k: _values(f"exclude.{axis}.{name}.{k}", v)
                                    for k, v in opts.items()} for name, opts in value.items()}
        out.append(checked)
    return tuple(out)


def _matches(rule: Mapping[str, Any], point: Mapping[str, Any]) -> bool:
    """Every key of ``rule`` matches; an option rule ``{name: {key: values}}`` matches a
    point of plug-in ``name`` whose option ``key`` is one of ``values``."""
    for axis, values in rule.items():
        if axis in OPTION_AXES:
            name = point[OPTION_AXES[axis]]
            if name not in values or not all(point[axis].get(k) in v
                                             for k, v in values[name].items()):
                return False
        elif point.get(axis) not in values:
            return False
    return True
