"""Built-in solvers. Importing this package registers them in pase.registry.SOLVERS."""
from pase.solvers import baselines, exhaustive  # noqa: F401
