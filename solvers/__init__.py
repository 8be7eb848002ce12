"""Built-in solvers. Importing this package registers them in pase.registry.SOLVERS."""
from pase.solvers import auto, baselines, dp, exhaustive, greedy, ilp, mcmc  # noqa: F401
