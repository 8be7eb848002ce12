"""``auto``, the default solver: the dp where it fits, else a Lagrangian decomposition
whose answer carries a certificate (docs/solvers.md, "auto")."""
from functools import partial

from pase.registry import SOLVERS
from pase.solvers.auto import dry
from pase.solvers.auto.solve import (
    DEFAULT_RELAXED_ENTRIES,
    DEFAULT_ROUNDS,
    DEFAULT_STEPS,
    METHODS,
    solve,
)

__all__ = ["METHODS", "dry_run", "solve"]

dry_run = partial(dry.dry_run, relaxed_entries=DEFAULT_RELAXED_ENTRIES, steps=DEFAULT_STEPS,
                  rounds=DEFAULT_ROUNDS)

SOLVERS.register("auto", "the default: the dp where its plan fits, else a Lagrangian decomposition "
                 "(optimal with a proof, or feasible with a proven bound)", exact=True)(solve)
