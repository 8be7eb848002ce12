"""pase: parallelization strategies for efficient DNN training.

    >>> import pase
    >>> strategy = pase.solve("alexnet", devices=8)            # PaSE DP, paper cost model
    >>> print(strategy.table())                                 # doctest: +SKIP
"""
from pase.api import (
    build_problem,
    build_space,
    dry_run,
    evaluate,
    evaluate_layout,
    load_graph,
    run_solver,
    search_layouts,
    solve,
)
from pase.comparison import compare
from pase.errors import PaseError
from pase.frontends import from_torch, import_torch  # torch is imported only when called
from pase.ir import Dim, Graph, Op, Port
from pase.pipeline import PipelinePlan, solve_pipeline
from pase.problem import Problem, Solution, Status
from pase.space import ConfigSpace
from pase.strategy import Strategy
from pase.work.variants import Variant

__version__ = "0.1.0"
__all__ = [
    "ConfigSpace", "Dim", "Graph", "Op", "PaseError", "PipelinePlan", "Port", "Problem", "Solution",
    "Status", "Strategy", "Variant", "build_problem", "build_space", "compare", "dry_run",
    "evaluate", "evaluate_layout", "from_torch", "import_torch", "load_graph", "load_results",
    "run_solver", "search_layouts", "solve", "solve_pipeline", "sweep", "view", "__version__",
]


def view(strategy, path=None, **options):
    """Write ``strategy``'s page, one self-contained HTML file (:func:`pase.viewer.write.view`;
    the page code is imported on first use)."""
    from pase.viewer.write import view as write_view

    return write_view(strategy, path, **options)


def __getattr__(name: str):
    """``pase.sweep`` and ``pase.load_results``, loaded on first use (Dask and pandas are
    imported only when a sweep runs)."""
    if name in ("sweep", "load_results"):
        from pase import sweeps

        return getattr(sweeps, name)
    raise AttributeError(f"module 'pase' has no attribute {name!r}")
