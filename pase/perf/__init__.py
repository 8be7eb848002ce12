"""A performance model of real training runs: price a named layout in seconds and bytes.

``pase evaluate MODEL --layout tp=8,pp=2,dp=4`` prices one training step of a
Megatron-LM or FSDP layout op by op, in time proportional to the number of ops
(no configuration space is built): a roofline per kernel, fused attention,
collectives at achieved bus bandwidth with the overlap frameworks get, pipeline
schedules with their bubbles, and the memory of states and kept activations.

- :mod:`pase.perf.hardware`: what each device type achieves (the calibrated constants);
- :mod:`pase.perf.comms`: collective times;
- :mod:`pase.perf.layout`: the layout, its checks, and what it splits in each op;
- :mod:`pase.perf.kernels`, :mod:`pase.perf.ops`: each op's kernels, FLOP and kept tensors;
- :mod:`pase.perf.pipeline`: stages, and the layout's schedule;
- :mod:`pase.perf.schedule`: every pipeline schedule's program, closed forms and event replay;
- :mod:`pase.perf.step`: the step (:func:`evaluate_layout`).

docs/performance-model.md explains the model and its calibration.
"""
from pase.perf.layout import Layout, make_layout
from pase.perf.step import Estimate, evaluate_layout

__all__ = ["Estimate", "Layout", "evaluate_layout", "make_layout"]
