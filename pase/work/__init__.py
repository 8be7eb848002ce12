"""Work decomposition: what one op does on one config, per device.

Shared by the alpha-beta cost model and the simulator, so both price the same
FLOP, the same collectives and the same memory.

- :func:`op_work` (``pase.work.ops``): per-device forward/backward FLOP (a
  multiply-add is two FLOP) and the forward matrix-product part of them, the
  collectives an op needs (kind, bytes per device, which op dims form the group,
  phase), parameter/optimizer and activation memory (by the rules of
  ``pase.work.memory``, the performance model's too), and port tile shapes,
  vectorised over an op's ``(K, ndims)`` configs.
- what a collective costs is not here: :mod:`pase.perf.comms` prices every one
  (the calibrated model, the alpha-beta teaching model and the simulator alike).
- ``pase.work.mapping``: the device mapping below, group topology, port blocks.
- :func:`edge_bytes` / :func:`collective_bytes` (``pase.work.relayout``): the
  bytes one device receives when a tensor changes layout, and sends in a collective.

Device mapping convention
-------------------------
:mod:`pase.work.layout` is the one placement (the alpha-beta model, the
simulator and the JAX exporter all use it): ``p`` devices form a mesh with one
axis per prime factor of ``p``, ascending, the first slowest; an op's batch-role
dims take the first mesh axes and its other dims the last ones, so an op split on
fewer than ``p`` devices keeps its batch rows where its neighbours keep theirs. Devices outside the op's ``P`` hold
replicas (the same tiles; they compute the same thing, as in JAX). Rank ``r``
lives on node ``r // devices_per_node`` (:func:`pase.cluster.node_of`). A group
over some dims is the set of devices differing only in those dims' mesh axes; it
spans nodes iff its devices sit on more than one node. When ``p`` is a power of
two the mesh's last axes are the fastest-varying ranks, so model-parallel groups
(over non-batch dims) land inside a node first, and data-parallel groups span
nodes first, as Megatron-LM lays out tensor x data parallelism; a norm split
only by batch is replicated over the tensor group, not across nodes. An op whose
``P`` does not divide ``p`` runs on ranks ``0 .. P-1`` (the others idle).
"""
from pase.work.mapping import device_coords, group_members, group_topology, mesh_order, port_blocks
from pase.work.memory import OPTIMIZER_STATE
from pase.work.ops import Collective, OpWork, op_work
from pase.work.relayout import collective_bytes, edge_bytes
from pase.work.tiles import overlap_elements, port_tiles

__all__ = [
    "OPTIMIZER_STATE", "Collective", "OpWork", "collective_bytes", "edge_bytes",
    "device_coords", "group_members", "group_topology", "mesh_order", "op_work", "overlap_elements",
    "port_blocks", "port_tiles",
]
