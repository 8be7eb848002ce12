"""Exact ILP solvers: one formulation (formulation.py), three thin backends.

``ilp-cpsat`` (OR-Tools CP-SAT), ``ilp-highs`` (HiGHS through highspy) and
``ilp-cbc`` (the CBC binary, found through PuLP) all need the optional extra
``pip install "pase[ilp]"``. Importing this package never fails without them:
a missing backend only says ``available() == False`` and raises
:class:`pase.errors.SolverUnavailableError` when used.

Shared parts: ``driver.py`` (run a backend, check and certify its answer),
``scaling.py`` (costs and memory scaled for the float backends), ``limits.py``
(deadline, watchdog, Ctrl-C) and ``lpfile.py`` (CBC's files).
"""
from pase.solvers.ilp import cbc, cpsat, highs  # noqa: F401  (registers the solvers)
