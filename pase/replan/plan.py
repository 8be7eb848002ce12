"""``pase.replan.replan``: the best strategy when training must move from an old layout.

The objective is ``steps x step time + migration time``: the Problem of the new
setting (the calibrated model's whenever a cluster is given, mixed ones too, as for
``pase solve``; alpha-beta's without one) with every cost scaled by ``steps``, plus each candidate's
migration (:mod:`pase.replan.migration`) added to its vertex cost. The
migration of an op depends only on its own new config (its old config is
fixed), so the replan Problem is an ordinary Problem: the dp stays exact and
every solver works unchanged. docs/replan.md gives the rules.

:func:`prepare` builds the re-plan once (a :class:`Prepared`) and
:meth:`Prepared.replan` answers it per step count; the migration rule
(:mod:`pase.replan.migration`) and the baselines (:mod:`pase.replan.baselines`)
are leaves this module imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pase import api
from pase.cluster import Link, get_cluster
from pase.errors import OptionError, StrategyError, check_float, check_int
from pase.ir import Graph
from pase.plan_record import UNSET, build_record, default_of
from pase.problem import Problem, Solution
from pase.replan.baselines import baseline_choices
from pase.replan.migration import Migration, Setting, op_migration
from pase.replan.result import OpChange, Plan, ReplanResult, break_even
from pase.replan.source import OldPlan, load_old, old_vectors
from pase.strategy import Strategy

DEFAULT_STEPS = 1000
DEFAULT_CLUSTER = "dgx-a100"
WHAT = "the re-plan: steps x step + migration, minimised"
# Cost models that price a step in seconds, which a migration's seconds add to.
SECONDS_MODELS = ("calibrated", "alpha-beta")
# Cost-model options whose state layout the migration rule does not model (ZeRO shards
# optimizer state over the data-parallel group); searched per-op variants (``auto``)
# multiply candidates, which _check_candidates refuses.
_UNMODELLED = {"zero": ("0",)}


def replan(model: str | Path | Graph, old: Any, *, steps: float = DEFAULT_STEPS,
           **options: Any) -> ReplanResult:
    """Re-plan ``model`` from the ``old`` strategy: :func:`prepare` (same keywords:
    ``devices``, ``cluster``, ``survivors`` ...) answered for ``steps`` (>= 0) remaining
    training steps."""
    steps = check_float("steps", steps, 0.0)
    return prepare(model, old, **options).replan(steps)


def prepare(model: str | Path | Graph, old: Any, *, devices: int | None = None, cluster: Any = None,
            old_devices: int | None = None, survivors: int | None = None,
            restore_bandwidth: float | None = None, old_cluster: Any = None,
            cost_model: str | None = None, solver: str = "auto", batch: int | None = None,
            cutoff: int | None = None, powers_of_two: bool = False,
            mesh: str | Sequence[int] | None = None, memory_cap: float | str | None = None,
            model_options: Mapping[str, Any] | None = None,
            old_model_options: Mapping[str, Any] | None = None,
            cost_options: Mapping[str, Any] | None = None, build_budget: float | str | None = None,
            time_limit: float | None = None, seed: int | None = None,
            **solver_options: Any) -> Prepared:
    """The new setting's Problem and every candidate's migration, built once: a
    :class:`Prepared` whose ``replan(steps)`` answers for a step count.

    ``old`` is a ``pase solve --format json`` file or object, a Strategy, or a
    ``{op: {dim: factor}}`` mapping with ``old_devices``. ``devices`` / ``cluster``
    give the new setting; ``survivors`` how many old ranks (``0 ..``) stay (default
    ``min(p_old, p_new)``); ``restore_bandwidth`` (GB/s per device) the checkpoint's
    read speed (default the inter-node link's); ``old_cluster`` places the old tiles
    when the old cluster was heterogeneous (default: the old layout on ``p_old``
    identical devices). ``model_options`` are the new model's; ``old_model_options``
    override them for the old model (default: the same). An ``old`` solve output records
    the model options and batch it was planned for: they are the old model's (an
    ``old_model_options`` that disagrees is refused) and the new one's but where
    ``model_options`` and ``batch`` change them. ``cost_model`` prices the step:
    by default the calibrated model when a cluster is given (a mixed one too),
    as :func:`pase.solve` picks, and alpha-beta on ``dgx-a100`` grown to ``devices``
    without one; ``cost_options`` are that model's (calibrated: ``precision``,
    ``microbatches``, ``recompute``, ``attention``...; ZeRO stages above 0 are refused).
    """
    plan = load_old(old, old_devices, "--from strategy" if isinstance(old, (str, Path)) else "the old strategy")
    model_options, batch, old_build = _old_build(plan, model, model_options, batch,
                                                 old_model_options)
    options = dict(cost_options or {})
    if cluster is not None and "cluster" in options:
        raise OptionError("cluster given twice: as an argument and as a cost option")
    cluster = options.pop("cluster", cluster)
    cost_model = _cost_model(cost_model, cluster)
    _check_unmodelled(options)
    api.SOLVERS.entry(solver)  # an unknown solver fails before the build
    if devices is None:
        if cluster is None:
            raise OptionError("give the new device count or the new cluster (-p NEW or --cluster NEW)")
        devices = get_cluster(cluster).devices
    built = api.build_problem(model, devices, cost_model, batch=batch, cutoff=cutoff,
                              powers_of_two=powers_of_two, mesh=mesh,
                              cluster=DEFAULT_CLUSTER if cluster is None else cluster,
                              memory_cap=memory_cap, model_options=model_options,
                              cost_options=options, build_budget=build_budget)
    _check_candidates(built)
    old_graph = built.graph if old_build is None else api.load_graph(model, **old_build)
    old_cfgs = old_vectors(plan, old_graph, built.graph)
    setting = _setting(built, plan.devices, survivors, restore_bandwidth, old_cluster)
    migrations = [op_migration(o, c, op, built.space.configs[v], setting)
                  for v, (o, c, op) in enumerate(zip(old_graph.ops, old_cfgs, built.graph.ops))]
    record = build_record(api.model_function(str(model)), batch, model_options) \
        if isinstance(model, (str, Path)) else {}
    return Prepared(built, migrations, setting, old_graph, old_cfgs, plan.devices,
                    _keep_choice(built, old_cfgs), solver, time_limit, seed, dict(solver_options),
                    record)


@dataclass
class Prepared:
    """What :func:`pase.replan.prepare` builds: call :meth:`replan` for a step count.

    ``migrations[v]`` holds op ``v``'s migration per candidate; ``keep[v]`` its old
    config's candidate index on the new setting (None where it is not one; ``keep``
    None when no op keeps its config). The baselines' strategies do not depend on the
    step count, so they are solved once, on the first call.
    """

    built: api.Built
    migrations: list[Migration]
    setting: Setting
    old_graph: Graph
    old_cfgs: list[np.ndarray]
    old_devices: int
    keep: list[int | None] | None
    solver: str
    time_limit: float | None
    seed: int | None
    solver_options: dict[str, Any]
    record: dict[str, Any] = field(default_factory=dict)  # the new model's options and batch
    _baselines: dict[str, tuple] | None = field(default=None, repr=False)

    def solve(self, problem: Problem) -> Solution:
        return api.run_solver(self.solver, problem, time_limit=self.time_limit, seed=self.seed,
                              **self.solver_options)

    def problem(self, steps: float) -> Problem:
        return replan_problem(self.built.problem, [m.seconds for m in self.migrations], steps)

    def replan(self, steps: float) -> ReplanResult:
        """The best strategy for ``steps`` remaining steps, with the baselines and break-even."""
        problem = self.problem(steps)
        solution = self.solve(problem)
        if solution.choice is not None and self.keep is not None:
            solution = prefer(problem, solution, self.keep)
        return self._result(problem, solution, steps)

    def plan(self, name: str, what: str, choice: Sequence[int], steps: float,
             migrations: list[Migration] | None = None) -> Plan:
        """``choice`` priced: its step time, and its migration (``migrations``: one config
        per op, already the choice's; default this re-plan's vectors)."""
        ms = self.migrations if migrations is None else migrations
        pick = [0] * len(ms) if migrations is not None else [int(c) for c in choice]
        return Plan(name, what, self.built.problem.evaluate(choice),
                    float(sum(m.seconds[k] for m, k in zip(ms, pick))),
                    float(sum(m.total_bytes[k] for m, k in zip(ms, pick))),
                    float(sum(m.restored_bytes[k] for m, k in zip(ms, pick))), steps,
                    tuple(int(c) for c in choice))

    def baselines(self, steps: float) -> dict[str, Plan]:
        if self._baselines is None:
            self._baselines = baseline_choices(self)
        return {name: self.plan(name, what, choice, steps, moved)
                for name, (what, choice, moved) in self._baselines.items()}

    def _result(self, problem: Problem, solution: Solution, steps: float) -> ReplanResult:
        built = self.built
        args = dict(model=built.graph.name, devices=built.space.devices, old_devices=self.old_devices,
                    survivors=self.setting.survivors,
                    cluster=built.cost_model.for_devices(built.space.devices).cluster.name,
                    steps=steps, solver=self.solver, solution=solution, problem=problem,
                    cost_model=built.cost_model.name, record=self.record)
        if solution.choice is None:
            return ReplanResult(**args, strategy=None, chosen=None, changes=[], baselines={},
                                break_even_against=None, break_even_steps=None)
        choice = solution.choice
        chosen = self.plan("replan", WHAT, choice, steps)
        others = self.baselines(steps)
        against = "least" if "least" in others else None
        strategy = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                        priced_by=built.cost_model, cost_model=built.cost_model.name,
                                        build_seconds=built.seconds,
                                        meta=api.priced_report(built, choice))
        return ReplanResult(**args, strategy=strategy, chosen=chosen, changes=self.changes(choice),
                            baselines=others, break_even_against=against,
                            break_even_steps=None if against is None else break_even(chosen, others[against]),
                            notes=self.notes(others))

    def notes(self, others: dict[str, Plan]) -> list[str]:
        """Why a baseline is missing (the first op whose old config is not a candidate)."""
        if "keep" in others:
            return []
        space, graph = self.built.space, self.built.graph
        for v, op in enumerate(graph.ops):
            if self.keep is None or self.keep[v] is None:
                old = {n: int(f) for n, f in zip(op.dim_names, self.old_cfgs[v])}
                try:
                    space.index_of(op.name, old)
                except StrategyError as exc:
                    return [f"keep is not available: {exc}"]
        return ["keep is not available: the old configs exceed the memory cap on the new setting"]

    def changes(self, choice: Sequence[int]) -> list[OpChange]:
        """Ops whose config changes or whose state moves, in graph order."""
        out = []
        for v, op in enumerate(self.built.graph.ops):
            m, k = self.migrations[v], int(choice[v])
            old = dict(zip(op.dim_names, (int(f) for f in self.old_cfgs[v])))
            new = self.built.space.config(v, k)
            if old != new or m.seconds[k] > 0:
                out.append(OpChange(op.name, old, new, float(m.seconds[k]), float(m.max_bytes[k]),
                                    float(m.total_bytes[k]), float(m.restored_bytes[k])))
        return out


def replan_problem(step: Problem, migration: Sequence[np.ndarray], steps: float) -> Problem:
    """``steps`` x every cost of ``step``, plus ``migration[v]`` on vertex ``v`` (memory and cap kept)."""
    if len(migration) != step.num_vertices:
        raise OptionError(f"{len(migration)} migration vectors for {step.num_vertices} vertices")
    vertex = [steps * c + np.asarray(m, dtype=np.float64) for c, m in zip(step.vertex_costs, migration)]
    return Problem(vertex, step.edges, [steps * m for m in step.edge_costs], step.names, step.memory,
                   step.memory_cap, step.unit, step.candidates, step.devices)


def prefer(problem: Problem, solution: Solution, preferred: Sequence[int | None]) -> Solution:
    """Ties go to ``preferred``: each vertex in turn takes its preferred candidate when that
    costs no more (vertex and incident edges) and the memory cap still holds. The cost
    never rises, so an optimal answer stays optimal."""
    choice = list(solution.choice)
    for v, want in enumerate(preferred):
        if want is None or want == choice[v]:
            continue
        delta = float(problem.vertex_costs[v][want] - problem.vertex_costs[v][choice[v]])
        delta += sum(float(m[want, choice[w]] - m[choice[v], choice[w]]) for w, m in problem.incident(v))
        if delta > 0:
            continue
        trial = choice[:v] + [want] + choice[v + 1:]
        if problem.fits(trial):
            choice = trial
    if choice == list(solution.choice):
        return solution
    cost = problem.evaluate(choice)
    if cost > problem.evaluate(solution.choice):  # float rounding of the deltas: keep the solver's
        return solution
    bound = None if solution.lower_bound is None else min(solution.lower_bound, cost)
    return Solution(tuple(choice), cost, solution.status, solution.solver, bound,
                    solution.wall_time, dict(solution.stats))


def _cost_model(name: str | None, cluster: Any) -> str:
    """The step's cost model: ``name``, or :func:`pase.api.default_cost_model` of a given
    cluster (alpha-beta without one); a model that prices no seconds is refused."""
    if name is None:
        return "alpha-beta" if cluster is None else api.default_cost_model(cluster)
    if name not in SECONDS_MODELS:
        api.COST_MODELS.entry(name)  # an unknown name fails listing the known ones
        raise OptionError(f"replan adds migration seconds to the step time: cost model {name!r} "
                          f"does not price seconds; allowed: {', '.join(SECONDS_MODELS)}")
    return name


def _check_unmodelled(options: Mapping[str, Any]) -> None:
    for key, allowed in _UNMODELLED.items():
        if key in options and str(options[key]) not in allowed:
            raise OptionError(f"replan does not model {key}={options[key]} (the migration moves "
                              f"state laid out like the weights); allowed: {', '.join(allowed)}")


def _check_candidates(built: api.Built) -> None:
    """The migration is priced per config: the Problem's candidates must be the space's."""
    for v, (costs, configs) in enumerate(zip(built.problem.vertex_costs, built.space.configs)):
        if len(costs) != len(configs):
            raise OptionError(f"op {built.graph.ops[v].name!r} has {len(costs)} candidates for "
                              f"{len(configs)} configs (per-op variants); replan prices configs only")


def _old_build(plan: OldPlan, model: Any, model_options: Mapping[str, Any] | None,
               batch: int | None, old_model_options: Mapping[str, Any] | None) -> tuple:
    """``(model_options, batch, old)``: the new model's options and batch, and the options
    that build the old model (its batch among them; None: the new model's graph). What an
    old plan records it was planned for makes the old model (``old_model_options`` must
    agree with it), and the new one where the call does not change it (without the record,
    a 2-layer plan was re-planned as the 12-layer default model and its migration priced
    as if it had had 12 layers); an old plan that records nothing makes the new model with
    ``old_model_options`` over it."""
    if plan.model_options is None and plan.batch is None:
        if not old_model_options:
            return model_options, batch, None
        return model_options, batch, {**dict(model_options or {}),
                                      **({} if batch is None else {"batch": batch}),
                                      **dict(old_model_options)}
    recorded = dict(plan.model_options or {})
    builder = api.model_function(str(model)) if isinstance(model, (str, Path)) else None
    for key, value in (old_model_options or {}).items():
        was = plan.batch if key == "batch" else recorded[key] if key in recorded else \
            default_of(builder, key)
        if was is UNSET:
            raise OptionError(f"--from-model-option {key}: the model has no option {key!r} "
                              f"(`pase models --options` lists them)")
        if str(was) != str(value):
            raise OptionError(f"--from-model-option {key}={value}: {plan.label} records "
                              f"{key}={was}, the model it was planned for; drop the flag (the "
                              f"file says what the old model was)")
    new = {**recorded, **dict(model_options or {})}
    new_batch = plan.batch if batch is None and "batch" not in new else batch
    old = {**recorded, **({} if plan.batch is None else {"batch": plan.batch})}
    same = new == recorded and new_batch == plan.batch
    return new, new_batch, None if same else old


def _setting(built: api.Built, old_devices: int, survivors: int | None,
             restore_bandwidth: float | None, old_cluster: Any) -> Setting:
    model = built.cost_model
    p = built.space.devices
    if survivors is not None:
        survivors = check_int("survivors", survivors, 0)
        if survivors > min(old_devices, p):
            raise OptionError(f"survivors must be at most min(old devices, new devices) = "
                              f"{min(old_devices, p)}, got {survivors}")
    cluster = model.for_devices(p).cluster
    restore = None
    if restore_bandwidth is not None:
        gbps = check_float("restore_bandwidth", restore_bandwidth, 0.0, strict=True)
        restore = Link(gbps, cluster.link("inter").latency_us)
    old = None if old_cluster is None else get_cluster(old_cluster, old_devices)
    if old is not None:
        _check_survivor_types(old, cluster, min(old_devices, p) if survivors is None else survivors)
    return Setting.make(old_devices, p, cluster, survivors=survivors,
                        bytes_per_element=state_bytes(model, built.graph), copies=1, restore=restore,
                        old_cluster=old)


def state_bytes(model: Any, graph: Graph) -> float:
    """Bytes of state that move per parameter: what the cost model keeps per parameter
    between steps (its work's ``state_factor`` values of ``bytes_per_element``), less the
    gradient, which the next step makes again. Alpha-beta with Adam: the weight and two
    moments; the calibrated model's mixed precision: the 2-byte weight, its fp32 master
    copy and Adam's two fp32 moments (14 bytes; fp32 training 12)."""
    op = graph.ops[0]
    work = model.work(op, np.ones((1, len(op.dims)), dtype=np.int64))
    return float(model.bytes_per_element) * (float(work.state_factor) - 1.0)


def _check_survivor_types(old: Any, new: Any, survivors: int) -> None:
    """A surviving rank is one device before and after: its type must not change. Ranks fill
    the fastest type first, so adding faster devices renumbers the old ones."""
    def runs(cluster: Any) -> list[tuple[int, Any]]:  # (first rank, device type) per group
        groups = cluster.groups or (cluster,)
        starts = np.cumsum([0] + [g.devices for g in groups[:-1]]).tolist()
        return [(int(r), g.device) for r, g in zip(starts, groups)]

    for rank in sorted({r for r, _ in runs(old) + runs(new) if r < survivors}):
        a, b = (next(d for r, d in reversed(runs(c)) if r <= rank) for c in (old, new))
        if a != b:
            raise OptionError(f"survivor rank {rank}: {a.name} on the old cluster, {b.name} on the "
                              f"new one (ranks fill the fastest type first); give --survivors at "
                              f"most {rank} (0: restart from the checkpoint)")


def _keep_choice(built: api.Built, old_cfgs: list[np.ndarray]) -> list[int | None] | None:
    """Each op's old config as a candidate of the new space (None where it is not one);
    None when no op keeps its config."""
    out: list[int | None] = []
    for v, cfg in enumerate(old_cfgs):
        hits = np.flatnonzero((built.space.configs[v] == cfg[None, :]).all(axis=1))
        out.append(int(hits[0]) if len(hits) else None)
    return out if any(k is not None for k in out) else None
