"""Run several solvers on one Problem and line up their answers.

    >>> import pase
    >>> rows = pase.compare("alexnet", devices=8, solvers=["dp", "greedy", "data-parallel"])
    >>> [r.solver for r in rows]
    ['dp', 'greedy', 'data-parallel']
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from pase.api import Built, build_problem, certified, run_solver
from pase.claims import ClaimError
from pase.errors import OptionError, PaseError, SolverUnavailableError
from pase.files import save_figure
from pase.options import coerce_options
from pase.registry import SOLVERS
from pase.strategy import finite_or_none

DEFAULT_SOLVERS = ("dp", "ilp-cpsat", "ilp-highs", "greedy", "mcmc", "data-parallel", "owt")


@dataclass
class Row:
    """One solver's answer; ``error`` says why there is none."""

    solver: str
    status: str
    total_cost: float | None
    ratio_to_best: float | None
    gap: float | None
    lower_bound: float | None
    solve_seconds: float | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: values that are not finite become None (``status`` says why)."""
        return {k: finite_or_none(v) for k, v in asdict(self).items()}


def check_solver_options(solvers: Sequence[str],
                         options: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """``{solver: {key: value}}`` checked before any work: every solver named is
    compared, and every option is one of its options, coerced to its type."""
    checked: dict[str, dict[str, Any]] = {}
    for name, opts in (options or {}).items():
        if name not in solvers:
            SOLVERS.entry(name)  # an unknown name fails listing the known ones
            raise OptionError(f"solver options for {name!r}, which is not compared; "
                              f"solvers: {', '.join(solvers)}")
        checked[name] = coerce_options(SOLVERS.get(name), dict(opts), f"solver {name!r}",
                                       reserved=("time_limit", "seed"))
    return checked


def compare_problem(built: Built, solvers: Sequence[str], *, time_limit: float | None = None,
                    seed: int | None = None, progress: Any = None,
                    solver_options: Mapping[str, Mapping[str, Any]] | None = None) -> list[Row]:
    """One Row per solver. A solver that refuses (a PaseError), is not installed, or
    crashes gets a row saying so (status ``refused``, ``unavailable`` or ``error``);
    the others still run. ``solver_options`` maps a solver name to its options
    (``{"dp": {"ordering": "min-fill"}}``), checked up front.
    """
    options = check_solver_options(solvers, solver_options)
    rows = []
    for name in solvers:
        if progress:
            progress(f"running {name}...")
        rows.append(_run_one(built, name, time_limit, seed, options.get(name, {})))
    costs = [r.total_cost for r in rows if r.total_cost is not None]
    best = min(costs) if costs else None
    for r in rows:
        if r.total_cost is not None and best is not None:
            r.ratio_to_best = r.total_cost / best if best > 0 else (1.0 if r.total_cost == 0 else math.inf)
    return rows


def _run_one(built: Built, name: str, time_limit: float | None, seed: int | None,
             options: Mapping[str, Any]) -> Row:
    def failed(status: str, exc: BaseException, prefix: str = "") -> Row:
        message = prefix + " ".join(str(exc).split())
        return Row(name, status, None, None, None, None, None, message)

    try:
        sol = run_solver(name, built.problem, time_limit=time_limit, seed=seed, **options)
    except SolverUnavailableError as exc:
        return failed("unavailable", exc)
    except ClaimError as exc:
        return failed("error", exc)
    except PaseError as exc:
        return failed("refused", exc)
    except Exception as exc:  # a crashing solver (a bug) must not lose the others' answers
        return failed("error", exc, f"{type(exc).__name__}: ")
    if sol.choice is not None and hasattr(built.cost_model, "price_plan"):
        # the plan's own price (calibrated), as `pase solve` reports it: optimal only where
        # it is the Problem's bound
        price = built.cost_model.price_plan(built.graph, built.problem, sol.choice)
        sol = certified(sol, price, built.problem.memory_cap)
    cost = None if sol.choice is None or not math.isfinite(sol.cost) else sol.cost
    return Row(name, str(sol.status), cost, None, sol.gap, sol.lower_bound, sol.wall_time)


def compare(model: Any, devices: int = 8, solvers: Sequence[str] = DEFAULT_SOLVERS,
            cost_model: Any = "paper", *, time_limit: float | None = None,
            seed: int | None = None, solver_options: Mapping[str, Mapping[str, Any]] | None = None,
            **build_options: Any) -> list[Row]:
    """Each solver's cost, ratio to the best, status, gap and time on one Problem.

    ``solver_options`` maps a solver name to its options:
    ``compare("alexnet", 8, ["dp", "mcmc"], solver_options={"mcmc": {"iterations": 100}})``.
    """
    check_solver_options(solvers, solver_options)  # before the build
    built = build_problem(model, devices, cost_model, **build_options)
    return compare_problem(built, solvers, time_limit=time_limit, seed=seed,
                           solver_options=solver_options)


def plot_comparison(rows: Sequence[Row], path: str | Path, title: str = "") -> None:
    """Bar charts of total cost and solve time per solver (matplotlib, PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SolverUnavailableError('plotting needs matplotlib: pip install "pase[plot]"') from exc
    done = [r for r in rows if r.total_cost is not None]
    if not done:
        raise PaseError("no solver produced a strategy; nothing to plot")
    names = [r.solver for r in done]
    fig, (ax_cost, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
    colors = ["tab:green" if r.status == "optimal" else "tab:blue" for r in done]
    ax_cost.bar(names, [r.ratio_to_best for r in done], color=colors)
    ax_cost.axhline(1.0, color="black", linewidth=0.8)
    ax_cost.set_ylabel("total cost / best")
    ax_cost.set_title("cost (green: proven optimal)")
    ax_time.bar(names, [r.solve_seconds for r in done], color="tab:gray")
    ax_time.set_yscale("log")
    ax_time.set_ylabel("solve time (s, log scale)")
    ax_time.set_title("solve time")
    for ax in (ax_cost, ax_time):
        ax.tick_params(axis="x", rotation=30)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        save_figure(fig, path, what="plot", dpi=120)
    finally:
        plt.close(fig)
