"""Work decomposition: what one op does on one config, per device.

Shared by the alpha-beta cost model and the simulator, so both price the same
FLOP, the same collectives and the same memory.

- :func:`op_work` (``pase.work.ops``): per-device forward/backward FLOP, the
  collectives an op needs (kind, bytes per device, which op dims form the group,
  phase), parameter/optimizer and activation memory, and port tile shapes,
  vectorised over an op's ``(K, ndims)`` configs.
- :func:`collective_phases` (``pase.work.collectives``): a collective on a group
  of ``nodes x local`` devices as the ring phases each device runs, each on one
  link class (the alpha-beta formulas; the simulator turns them into flows).
- ``pase.work.mapping``: the device mapping below, group topology, port blocks.

Device mapping convention
-------------------------
An op split by config ``c`` runs on ranks ``0 .. prod(c) - 1`` of the cluster
(rank ``r`` lives on node ``r // devices_per_node``, decided by :func:`pase.cluster.node_of`;
the cost model and the simulator both ask that one function). Its devices form a mesh
over its dims: batch-role dims are outermost (vary slowest across ranks), the
other dims follow in op order, the last one fastest. So model-parallel groups
(over non-batch dims) land inside a node first, and data-parallel groups span
nodes first, as Megatron-LM lays out tensor x data parallelism. A group over
some dims is the set of devices whose coordinates differ only in those dims; it
spans nodes iff its ranks sit on more than one node.
"""
from pase.work.collectives import Phase, collective_phases, collective_time
from pase.work.mapping import device_coords, group_members, group_topology, mesh_order, port_blocks
from pase.work.ops import OPTIMIZER_STATE, Collective, OpWork, op_work
from pase.work.tiles import overlap_elements, port_tiles

__all__ = [
    "OPTIMIZER_STATE", "Collective", "OpWork", "Phase", "collective_phases", "collective_time",
    "device_coords", "group_members", "group_topology", "mesh_order", "op_work", "overlap_elements",
    "port_blocks", "port_tiles",
]
