"""Which devices of a JAX mesh hold which tile: pase's placement as mesh axes.

The placement is :mod:`pase.work.layout` (the alpha-beta model and the simulator
use the same one); this module re-exports its mesh names for the exporter. The
exported program runs on one device mesh over all ``p`` devices whose axes are
the prime factors of ``p`` in ascending order (``p = 8``: axes ``x0 x1 x2`` of
size 2; ``p = 12``: sizes 2, 2, 3), the first axis slowest-varying across device
ids. :func:`assign_axes` gives each split dim of an op the mesh axes whose sizes
multiply to its factor: an op's batch-role dims take the *first* mesh axes and
its other dims the *last* ones (:mod:`pase.work.layout`); the
devices outside hold replicas (they compute the same tiles). An op whose device
count does not divide ``p`` cannot be placed on such a mesh and is refused.
"""
from __future__ import annotations

from pase.work.layout import assign_axes, mesh_axes, port_spec, prime_factors

__all__ = ["assign_axes", "mesh_axes", "port_spec", "prime_factors"]
