"""Exact ILP solvers: one formulation (formulation.py), three thin backends.

``ilp-cpsat`` (OR-Tools CP-SAT), ``ilp-highs`` (HiGHS through highspy) and
``ilp-cbc`` (CBC through PuLP) all need the optional extra
``pip install "pase[ilp]"``. Importing this package never fails without them:
a missing backend only says ``available() == False`` and raises
:class:`pase.errors.SolverUnavailableError` when used.
"""
from pase.solvers.ilp import cbc, cpsat, highs  # noqa: F401  (registers the solvers)
