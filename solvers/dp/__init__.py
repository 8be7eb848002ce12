"""The PaSE dynamic program (paper section III) as one package; docs/dp.md maps its modules.

Importing it registers the solver ``"dp"``. The package's ``plan`` is the function
(:func:`pase.solvers.dp.plan.plan`); its module is reached by ``from
pase.solvers.dp.plan import ...``.
"""
from pase.registry import SOLVERS
from pase.solvers.dp.core import (
    DP_ENTRIES_PER_SECOND,
    FOLD_ENTRIES_PER_SECOND,
    dry_run,
    min_sum,
    solve,
)
from pase.solvers.dp.ordering import ORDERINGS
from pase.solvers.dp.plan import DEFAULT_MEMORY_BUDGET, plan

__all__ = ["DEFAULT_MEMORY_BUDGET", "DP_ENTRIES_PER_SECOND", "FOLD_ENTRIES_PER_SECOND",
           "ORDERINGS", "dry_run", "min_sum", "plan", "solve"]

SOLVERS.register("dp", "PaSE dynamic program (exact)", exact=True)(solve)
