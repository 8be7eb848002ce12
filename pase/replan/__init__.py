"""Re-planning: the best strategy when the cluster or the workload changes mid-training.

:func:`replan` minimises ``steps x step time + migration time`` from an old
layout (docs/replan.md); :mod:`pase.replan.migration` prices moving parameters
and optimizer state between two layouts of pase's placement.
"""
from pase.replan.migration import Migration, Setting, op_migration
from pase.replan.plan import DEFAULT_STEPS, Prepared, prefer, prepare, replan, replan_problem
from pase.replan.result import OpChange, Plan, ReplanResult, break_even

__all__ = ["DEFAULT_STEPS", "Migration", "OpChange", "Plan", "Prepared", "ReplanResult", "Setting",
           "break_even", "op_migration", "prefer", "prepare", "replan", "replan_problem"]
