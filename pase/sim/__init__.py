"""A discrete-event simulator of one training step of a strategy on a cluster.

    >>> from pase.sim import simulate
    >>> r = simulate("mlp", {"fc1": {"b": 4}}, "dgx-a100", devices=4)
    >>> r.step_time > 0
    True

Topology: every device has an intra-node port and, on multi-node clusters, an
inter-node port (a "rail": the cluster's inter-node bandwidth is per device),
each with independent send and receive directions at the link's bandwidth. A
message between devices of one node uses the sender's and the receiver's intra
ports, otherwise their inter ports (the node's internal hop to its NIC is not
modelled). Collective phases use every member's port of the phase's link class.
The optimizer step, kernel launch overheads and memory-bandwidth-bound copies
(concat, reshape) are not simulated.

See :mod:`pase.sim.tasks` for what is simulated, :mod:`pase.sim.engine` for how
(compute queues, processor-shared links), and :mod:`pase.sim.plot` for a Gantt chart.
"""
from pase.sim.result import Event, SimResult
from pase.sim.simulate import simulate

__all__ = ["Event", "SimResult", "simulate"]
