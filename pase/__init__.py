"""pase: parallelization strategies for efficient DNN training.

    >>> import pase
    >>> strategy = pase.solve("alexnet", devices=8)            # PaSE DP, paper cost model
    >>> print(strategy.table())                                 # doctest: +SKIP
"""
from pase.api import build_problem, build_space, dry_run, evaluate, load_graph, run_solver, solve
from pase.comparison import compare
from pase.errors import PaseError
from pase.ir import Dim, Graph, Op, Port
from pase.problem import Problem, Solution, Status
from pase.space import ConfigSpace
from pase.strategy import Strategy

__version__ = "0.1.0"
__all__ = [
    "ConfigSpace", "Dim", "Graph", "Op", "PaseError", "Port", "Problem", "Solution", "Status",
    "Strategy", "build_problem", "build_space", "compare", "dry_run", "evaluate", "load_graph",
    "run_solver", "solve", "__version__",
]
