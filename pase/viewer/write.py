"""``pase.view(strategy, path)``: write a strategy's page, one self-contained HTML file.

A Strategy that carries its prices (the calibrated and the paper model's:
:func:`pase.viewer.planned.carries`) is drawn with them on its graph; another
(a plain mapping, an alpha-beta plan, one asked for with other cost options) is
priced first. Pass the model options it was solved with (``model_options={"layers":
2}``) when they are not the defaults, or a strategy for another graph is refused
naming the op it lacks.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from pase.errors import OptionError, StrategyError
from pase.files import write_text_atomic
from pase.strategy import Strategy, strategy_mapping, strategy_variants
from pase.viewer.build import page_model
from pase.viewer.page import assemble
from pase.viewer.planned import Planned, carries, planned_from, planned_of


def view(strategy: Any, path: str | Path | None = None, *, compare: Any = None,
         model: Any = None, cluster: Any = None, simulate: bool = True,
         **build_options: Any) -> Path | str:
    """Write the page of ``strategy`` to ``path`` and return the path (without a path,
    return the HTML text).

    ``strategy``: a :class:`~pase.strategy.Strategy`, a ``pase solve --format json``
    object, or a :class:`~pase.pipeline.PipelinePlan`. ``compare``: a second strategy
    of the same graph, shown side by side. ``model`` (default the strategy's graph
    name), ``cluster`` and ``build_options`` (:func:`pase.api.build_problem`'s:
    ``model_options``, ``cost_options``, ``batch``, ``memory_cap``...) rebuild what
    priced it. ``simulate`` runs the simulator for the Time tab when there is a cluster.
    """
    from pase.pipeline import PipelinePlan

    if isinstance(strategy, PipelinePlan):
        if compare is not None:
            raise OptionError("--compare compares two per-op strategies; a pipeline plan has one "
                              "strategy per stage, so it is not compared")
        from pase.viewer.pipeline import pipeline_model

        data = pipeline_model(strategy, cluster=cluster, simulate=simulate)
        return write_html(data, path, page_title(data))
    a = planned(strategy, model=model, cluster=cluster, **build_options)
    b = None if compare is None else planned(compare, model=model, cluster=cluster, **build_options)
    data = page_model(a, b, simulate=simulate)
    return write_html(data, path, page_title(data))


def planned(strategy: Any, *, model: Any = None, cluster: Any = None,
            **build_options: Any) -> Planned:
    """``strategy`` on its graph: a :class:`~pase.viewer.planned.Planned`, drawn with the
    prices it carries, or priced first when it carries none (or other pricing is asked
    for: cost options, a memory cap, another cluster)."""
    from pase import api

    s = strategy if isinstance(strategy, Strategy) else None
    if s is None and not isinstance(strategy, Mapping):
        raise StrategyError(f"pase.view needs a Strategy, a solve output or a pipeline plan, got "
                            f"{type(strategy).__name__}")
    if s is None and "op_costs" in strategy:  # a solve output: its own prices
        s = Strategy.from_dict(strategy)
    name = model if model is not None else (s.graph_name if s else strategy.get("model"))
    if name is None:
        raise OptionError("a plain {op: {dim: factor}} mapping needs model= (its graph)")
    if s is not None and _drawn_as_is(s, cluster, build_options):
        graph = _graph(name, build_options)
        check_graph(graph, s.configs)
        return planned_of(s, graph, cluster)
    devices = s.devices if s else strategy.get("devices")
    if devices is None:
        raise OptionError("a plain {op: {dim: factor}} mapping has no device count: give "
                          "{\"devices\": N, \"strategy\": {op: {dim: factor}}} or a Strategy")
    cost_model = (s.cost_model if s else strategy.get("cost_model")) or \
        ("alpha-beta" if cluster is not None else "paper")
    built = api.build_problem(name, int(devices), cost_model, cluster=cluster,
                              variants=strategy_variants(strategy), **build_options)
    check_graph(built.graph, strategy_mapping(strategy))
    choice = api.choice_of(built, strategy_mapping(strategy))
    priced = Strategy.from_choice(built.graph, built.space, built.problem, choice,
                                  priced_by=built.cost_model, cost_model=built.cost_model.name,
                                  meta=api.memory_report(built.problem, choice))
    if s is not None:  # its own costs; what it does not carry, as priced here
        meta = s.meta if "memory_bytes" in s.meta else {**priced.meta, **s.meta}
        priced = dataclasses.replace(s, op_prices=s.op_prices or priced.op_prices, meta=meta)
    return planned_from(built, priced)


def _drawn_as_is(s: Strategy, cluster: Any, build_options: Mapping[str, Any]) -> bool:
    """Whether ``s`` is drawn with its own prices: it carries them, and nothing asks for
    other ones (cost options, a memory cap, a budget, another cluster)."""
    if not carries(s) or set(build_options) - {"model_options", "batch"}:
        return False
    if cluster is None:
        return True
    from pase.cluster import get_cluster

    return s.cost_model == "calibrated" and \
        get_cluster(cluster, s.devices).name == s.meta.get("cluster")


def _graph(name: Any, build_options: Mapping[str, Any]) -> Any:
    from pase import api

    options = dict(build_options.get("model_options") or {})
    if build_options.get("batch") is not None:
        options["batch"] = build_options["batch"]
    return api.load_graph(name, **options)


def check_graph(graph: Any, configs: Mapping[str, Any]) -> None:
    """A strategy naming an op ``graph`` lacks is for another model: one line saying so."""
    missing = [op for op in configs if op not in graph]
    if missing:
        raise StrategyError(f"the strategy is not for graph {graph.name!r}: it names op "
                            f"{missing[0]!r}, which that graph lacks ({len(missing)} such ops); "
                            f"give the model (and options) it was solved for")


def page_title(data: Mapping[str, Any]) -> str:
    s = data["summary"]
    return f"{s['model']} on {s['devices']} devices: pase plan"


def write_html(data: Mapping[str, Any], path: str | Path | None, title: str, *,
               stdout: bool = False) -> Path | str | None:
    """The page's HTML: returned without a ``path``; else written whole to ``path``
    (:func:`pase.files.write_text_atomic`: a reader never sees half a page, and a
    device or FIFO is refused rather than replaced) and ``path`` returned; None when
    ``stdout`` lets ``-`` mean stdout."""
    text = assemble(dict(data), title)
    if path is None:
        return text
    return write_text_atomic(path, text, what="the page", stdout=stdout)
