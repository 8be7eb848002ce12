"""A solver under test with its tags, its answers on the battery's Problems, and how
failures are reported (:class:`Report`, :class:`ConformanceError`): the checks and
the battery both build on this module."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pase.errors import PaseError
from pase.problem import Problem, Solution
from pase.testing.cases import SCOPES, Case, battery_cases

# Longest error text quoted in a failure message.
QUOTE = 160
# Failure messages quoted per check before "... and N more".
SHOWN = 4


class ConformanceError(AssertionError):
    """A solver broke the battery's rules; the message lists every failing check."""

    def __init__(self, message: str, report: Report | None = None):
        super().__init__(message)
        self.report = report


@dataclass
class Report:
    """What the battery found: checks passed and failed, and Problems refused."""

    solver: str
    tags: dict[str, Any]
    passed: list[str] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


def format_failures(spec: SolverSpec, failed: Mapping[str, list[str]]) -> str:
    """The message of a ConformanceError: the solver's tags, then each failing check's
    first messages."""
    lines = [f"solver {spec.name!r} (exact={spec.exact}, scope={spec.scope}, "
             f"memory_cap={spec.memory_cap}) failed {len(failed)} check(s):"]
    for name, messages in failed.items():
        lines.append(f"- {name}:")
        lines += [f"    {m}" for m in messages[:SHOWN]]
        if len(messages) > SHOWN:
            lines.append(f"    ... and {len(messages) - SHOWN} more")
    return "\n".join(lines)


@dataclass(frozen=True)
class SolverSpec:
    """A solver and what it claims: read from the registry or given by hand.

    ``exact``: always reaches the optimum. ``scope``: the Problems it handles
    (``"chain"``, ``"tree"`` or ``"general"``). ``memory_cap``: honours
    ``Problem.memory_cap``. ``options`` go to every call; ``seed`` seeds the
    battery's random Problems and the solver; ``time_limit`` is used by the
    time-limit check.
    """

    name: str
    solve: Callable[..., Solution]
    exact: bool = False
    scope: str = "general"
    memory_cap: bool = True
    options: tuple[tuple[str, Any], ...] = ()
    seed: int = 0
    time_limit: float = 1.0
    available: bool = True

    def __repr__(self) -> str:
        return self.name

    def call(self, problem: Problem, **kwargs: Any) -> Solution:
        return self.solve(problem, seed=self.seed, **dict(self.options), **kwargs)


def solver_spec(solver: str | Callable[..., Solution] | SolverSpec, *, exact: bool | None = None,
                scope: str | None = None, memory_cap: bool | None = None,
                options: Mapping[str, Any] | None = None, seed: int = 0,
                time_limit: float = 1.0, name: str | None = None) -> SolverSpec:
    """Resolve a registered name or a callable into a SolverSpec; explicit tags win.

    A bare callable defaults to ``exact=False, scope="general", memory_cap=True``,
    the registry's defaults.
    """
    if isinstance(solver, SolverSpec):
        base = solver
    elif callable(solver):
        base = SolverSpec(getattr(solver, "__name__", "solver"), solver)
    else:
        from pase.registry import SOLVERS

        entry = SOLVERS.entry(solver)
        available = entry.info.get("available")
        base = SolverSpec(entry.name, entry.obj, exact=bool(entry.info.get("exact", False)),
                          scope=entry.info.get("scope", "general"),
                          memory_cap=bool(entry.info.get("memory_cap", True)),
                          available=available is None or bool(available()))
    spec = SolverSpec(
        name or base.name, base.solve,
        base.exact if exact is None else bool(exact),
        base.scope if scope is None else scope,
        base.memory_cap if memory_cap is None else bool(memory_cap),
        base.options if options is None else tuple(sorted(dict(options).items())),
        seed if not isinstance(solver, SolverSpec) else base.seed,
        time_limit if not isinstance(solver, SolverSpec) else base.time_limit,
        base.available)
    if spec.scope not in SCOPES:
        raise ValueError(f"solver {spec.name!r}: unknown scope {spec.scope!r}; "
                         f"known: {', '.join(SCOPES)}")
    return spec


@dataclass
class Answer:
    """What a solver did with one Case: a Solution, a refusal, or a crash."""

    case: Case
    solution: Solution | None
    error: str | None = None   # why there is no Solution
    broken: bool = False       # the error is a failure (a crash, or a refusal it may not make)


def must_solve(spec: SolverSpec, case: Case) -> bool:
    """Graph-derived Problems bind every solver; exact solvers must solve them all."""
    return case.graph_derived or spec.exact


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= QUOTE else text[:QUOTE] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def ask(spec: SolverSpec, case: Case, **kwargs: Any) -> Answer:
    """One call of the solver on one Case, a crash or refusal recorded rather than raised."""
    try:
        return Answer(case, spec.call(case.problem, **kwargs))
    except PaseError as exc:
        if must_solve(spec, case):
            return Answer(case, None, f"refused: {describe(exc)}", broken=True)
        return Answer(case, None, f"refused: {describe(exc)}")
    except Exception as exc:  # a student's bug must not hide the other checks' reports
        return Answer(case, None, f"raised {describe(exc)}", broken=True)


def answers(spec: SolverSpec) -> list[Answer]:
    """The solver's answers on every Case of its scope (memoised per spec)."""
    try:
        return list(_answers(spec))
    except TypeError:  # options that cannot be hashed: no memo
        return [ask(spec, c) for c in battery_cases(spec.scope, spec.memory_cap, spec.seed)]


@functools.lru_cache(maxsize=8)
def _answers(spec: SolverSpec) -> tuple[Answer, ...]:
    return tuple(ask(spec, c) for c in battery_cases(spec.scope, spec.memory_cap, spec.seed))
