"""What a per-op plan records of how it was built and priced, so that it is priced again
the same way: the model options and batch of its graph, and the cost options.

A strategy's splits were chosen for one graph; priced on another (other layers, another
batch) or at another precision they give a wrong answer without a word. ``pase solve``,
``pase evaluate --strategy``, :func:`pase.solve` and :func:`pase.evaluate` write these keys;
``pase evaluate``, ``simulate`` and ``view`` of the file apply them (``pase.cli.recorded``).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

UNSET = object()  # a model function's parameter without a default


def build_record(builder: Callable | None, batch: Any,
                 model_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"model_options", "batch"}`` of a graph built by ``builder`` (the model's function,
    None for a graph file) at ``batch`` (None: a ``batch`` model option, else the function's
    default) with ``model_options``; the batch is None for a model without one."""
    options = dict(model_options or {})
    given = options.pop("batch", None)
    batch = given if batch is None else batch
    if batch is None:
        batch = default_of(builder, "batch")
    return {"model_options": options,
            "batch": None if batch is None or batch is UNSET else int(batch)}


def cost_record(cost_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"cost_options"}``: the options the plan was priced at (the cluster is recorded on
    its own)."""
    return {"cost_options": {k: v for k, v in (cost_options or {}).items() if k != "cluster"}}


def parameters(builder: Any) -> dict[str, inspect.Parameter]:
    """The parameters of a model's function (none for None or one without a signature)."""
    if builder is None:
        return {}
    try:
        return dict(inspect.signature(builder).parameters)
    except (TypeError, ValueError):
        return {}


def default_of(builder: Any, key: str) -> Any:
    """The default of ``builder``'s parameter ``key``, or :data:`UNSET`."""
    param = parameters(builder).get(key)
    if param is None or param.default is inspect.Parameter.empty:
        return UNSET
    return param.default
