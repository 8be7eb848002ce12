"""Export strategies to real compilers.

- :func:`to_jax` writes a self-contained JAX program of one training step with
  every op pinned to its pase layout on a device mesh (or, ``local=True``, one
  device's share of the compute at tile shapes);
- :func:`verify` compiles such a program for ``p`` fake CPU devices (never runs it) and
  compares the collectives in XLA's HLO with pase's predicted bytes per device;
- :func:`run_equivalence` runs such a program on ``p`` fake CPU devices and on one
  device in a subprocess and reports how far loss and gradients differ;
- :func:`to_dtensor` gives a strategy as PyTorch DTensor placements (a DeviceMesh
  shape and Shard/Replicate per parameter, module input and output) for a module
  imported with :func:`pase.frontends.import_torch`.

None imports jax (or torch) in the calling process.
"""
from pase.export.configs import strategy_configs
from pase.export.dtensor import DTensorPlan, to_dtensor
from pase.export.equivalence import check_programs, run_equivalence
from pase.export.jax import to_jax
from pase.export.mesh import assign_axes, mesh_axes, port_spec, prime_factors
from pase.export.verify import verify, verify_many

__all__ = ["DTensorPlan", "assign_axes", "check_programs", "mesh_axes", "port_spec", "prime_factors",
           "run_equivalence", "strategy_configs", "to_dtensor", "to_jax", "verify", "verify_many"]
