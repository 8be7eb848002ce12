"""pase: parallelization strategies for efficient DNN training.

    >>> import pase
    >>> strategy = pase.solve("alexnet", devices=8)            # PaSE DP, paper cost model
    >>> print(strategy.table())                                 # doctest: +SKIP
"""
from pase.api import build_problem, build_space, dry_run, evaluate, load_graph, run_solver, solve
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
    "evaluate", "from_torch", "import_torch", "load_graph", "load_results", "run_solver", "solve",
    "solve_pipeline", "sweep", "view", "__version__",
]


def __getattr__(name: str):
    """``pase.sweep`` and ``pase.load_results``, loaded on first use (Dask and pandas are
    imported only when a sweep runs); ``pase.view``, the page writer (callable), too."""
    if name in ("sweep", "load_results"):
        from pase import sweeps

        return getattr(sweeps, name)
    if name == "view":
        import importlib

        return importlib.import_module("pase.view")  # the package, callable as view(s, path)
    raise AttributeError(f"module 'pase' has no attribute {name!r}")
