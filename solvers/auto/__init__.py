"""``auto``, the default solver: the dp where it fits, else a Lagrangian decomposition
whose answer carries a certificate (docs/solvers.md, "auto")."""
from pase.registry import SOLVERS
from pase.solvers.auto.solve import METHODS, solve

__all__ = ["METHODS", "solve"]

SOLVERS.register("auto", "the dp where its plan fits, else a Lagrangian decomposition "
                 "(optimal with a proof, or feasible with a proven bound)", exact=True)(solve)
