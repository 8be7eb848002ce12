"""``simulate``: one training step of a strategy on a cluster, event by event."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from pase.cluster import Cluster, Link, get_cluster
from pase.errors import OptionError, StrategyError
from pase.ir import Graph
from pase.perf import roofline
from pase.prices import is_timed
from pase.sim import tasks
from pase.sim.engine import COMPUTE, FLOW, run
from pase.sim.result import Event, SimResult, merge_busy, merged, peak_memory
from pase.strategy import Strategy, check_strategy_mapping, op_config
from pase.work import OPTIMIZER_STATE
from pase.work.hetero import SPLITS


def config_arrays(graph: Graph, configs: Mapping[str, Mapping[str, int]], devices: int) -> list[np.ndarray]:
    """One factor vector per op (ops not named stay unsplit), validated."""
    configs = check_strategy_mapping(configs)
    for name in configs:
        if name not in graph:
            raise StrategyError(f"strategy names unknown op {name!r} (graph {graph.name!r})")
    out = []
    for op in graph.ops:
        cfg = np.array(list(op_config(op, configs.get(op.name, {}), devices).values()),
                       dtype=np.int64)
        out.append(cfg)
    return out


def simulate(graph: Graph | str | Path, configs: Mapping[str, Mapping[str, int]] | Strategy,
             cluster: str | Path | Cluster = "dgx-a100", devices: int | None = None, *,
             efficiency: float = 0.5, bytes_per_element: float | None = None,
             optimizer: str = "adam",
             timeline: bool = True, split: str = "even",
             variants: Mapping[str, Any] | None = None, compute: str = "flat",
             precision: str = "bf16", own_prices: bool = True) -> SimResult:
    """Simulate one training step (forward, backward, gradient syncs).

    Args:
        graph: a Graph, a registered model name or a graph JSON path.
        configs: ``{op: {dim: factor}}`` (ops not named stay unsplit) or a Strategy.
        cluster: a Cluster, preset name or JSON path (presets grow to ``devices``).
        devices: device count; default the Strategy's, else the cluster's.
        efficiency: achieved fraction of the dense peak FLOP/s, in (0, 1] (default
            0.5; FLOP count a multiply-add as two, as the peak does).
        bytes_per_element: tensor element size (4 = fp32); default a Strategy's own
            (the element size its carried prices were taken at), else 4.
        optimizer: ``adam``, ``momentum`` or ``sgd`` (memory only).
        timeline: record the per-task timeline (turn off to save memory).
        split: on a heterogeneous cluster, ``even`` tiles or ``balanced`` batch
            shares proportional to device speed (docs/heterogeneous.md).
        variants: per op a variant (ZeRO stage, recompute; pase.work.variants);
            default a Strategy's own, else none.
        compute, precision: ``"flat"`` (default, ``efficiency`` of the peak) or
            ``"roofline"`` (the performance model's kernels at ``precision``, as the
            alpha-beta model's option of the same name: :mod:`pase.perf.roofline`).
        own_prices: replay a Strategy that carries each op's seconds (the calibrated
            model's plans: :mod:`pase.prices`) at those seconds, micro-batches included,
            when it runs on the cluster and devices that priced it (the default); False,
            or any other strategy: the simulator's own rules above. ``stats["timing"]``
            says which.

    Every device of every op is simulated (no symmetry folding): Inception-v3
    or the Transformer at p = 16 are 8-12k tasks and take well under a second.
    """
    if not isinstance(graph, Graph):
        from pase.api import load_graph

        graph = load_graph(graph)
    carried = None
    if isinstance(configs, Strategy):
        if configs.graph_name != graph.name:
            raise StrategyError(f"the strategy is for graph {configs.graph_name!r}, not {graph.name!r}")
        devices = configs.devices if devices is None else devices
        variants = getattr(configs, "variants", None) if variants is None else variants
        carried = configs if own_prices and is_timed(configs.op_prices) else None
        if bytes_per_element is None:
            bytes_per_element = _number(configs.meta.get("bytes_per_element"))
        configs = configs.configs
    if bytes_per_element is None:
        bytes_per_element = 4
    if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) or not 0 < efficiency <= 1:
        raise OptionError(f"efficiency must be a number in (0, 1], got {efficiency!r}")
    if optimizer not in OPTIMIZER_STATE:
        raise OptionError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZER_STATE)}")
    if split not in SPLITS:
        raise OptionError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    cl = get_cluster(cluster, devices)
    devices = cl.devices if devices is None else devices
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1:
        raise OptionError(f"devices must be an integer >= 1, got {devices!r}")
    if cl.groups and not cl.prefixes(int(devices)):
        cl = cl.view(int(devices))  # the devices lie in one group
    cfgs = config_arrays(graph, configs, int(devices))
    rate = None
    if compute == "roofline":
        if cl.groups:
            raise OptionError(f"compute=roofline simulates a homogeneous cluster; {cl.name} mixes "
                              f"device types")
        rate = roofline.pricer(cl.device, precision)
    elif compute != "flat":
        raise OptionError(f"unknown compute {compute!r}; allowed: flat, roofline")
    per_op = [variants.get(op.name) for op in graph.ops] if variants else None
    prices, m, timing = _carried(carried, graph, cl, int(devices))
    if prices is not None:
        cl = _priced_links(carried, cl)
    wall = time.perf_counter()
    tg, ops = tasks.build(graph, cfgs, cl, int(devices), efficiency, bytes_per_element, optimizer,
                          split, per_op, rate, prices, m)
    built = time.perf_counter() - wall
    trace = run(tg)
    return _result(graph, cl, int(devices), tg, ops, trace, timeline,
                   {"tasks": len(tg), "events": trace.events, "build_seconds": built,
                    "run_seconds": time.perf_counter() - wall - built, "timing": timing,
                    "microbatches": m})


def _number(value: Any) -> float | None:
    """A positive number a Strategy's meta holds, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def _carried(strategy: Strategy | None, graph: Graph, cluster: Cluster,
             devices: int) -> tuple[list[dict] | None, int, str]:
    """The strategy's own per-op prices, its micro-batches and what times the tasks: the
    prices where they were taken on this cluster and device count, else the simulator's."""
    own = "the simulator's rules"
    if strategy is None:
        return None, 1, own
    priced_on = strategy.meta.get("cluster")
    if strategy.devices != devices or (priced_on is not None and priced_on != cluster.name):
        return None, 1, f"{own} (the strategy was priced on {strategy.devices} x {priced_on})"
    if cluster.groups:  # per-op prices do not say which ranks of a mixed cluster ran them
        return None, 1, f"{own} (a mixed cluster)"
    m = strategy.meta.get("microbatches", 1)
    m = int(m) if isinstance(m, (int, float)) and m >= 1 else 1
    return [strategy.op_prices[op.name] for op in graph.ops], m, \
        f"the strategy's own prices ({strategy.cost_model or 'its cost model'})"


def _priced_links(strategy: Strategy | None, cluster: Cluster) -> Cluster:
    """``cluster`` with its links at the bandwidth the strategy's model moved bytes at
    (``meta["link_gbps"]``: NCCL's achieved bus bandwidth), so re-layouts move at it (a
    plan that carries its edges' seconds is stretched to them, :mod:`pase.sim.tasks`)."""
    gbps = None if strategy is None else strategy.meta.get("link_gbps")
    if not isinstance(gbps, Mapping):
        return cluster
    links = {k: Link(float(gbps[k]), getattr(cluster, k).latency_us) for k in ("intra", "inter")
             if isinstance(gbps.get(k), (int, float)) and gbps[k] > 0}
    return dataclasses.replace(cluster, **links)


def _result(graph, cluster, devices, tg, ops, trace, keep_timeline, stats) -> SimResult:
    compute_busy = np.zeros(devices)
    events: list[Event] = []
    link_intervals: dict[str, list[tuple[float, float]]] = {}
    bars: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for t in range(len(tg)):
        s, e = trace.start[t], trace.end[t]
        if tg.kind[t] == COMPUTE:
            compute_busy[tg.device[t]] += tg.duration[t]
            if keep_timeline and e > s:
                events.append(Event(tg.shows[t][0], s, e, tg.label[t], tg.category[t]))
        elif tg.kind[t] == FLOW and e > s:
            for name in tg.shows[t]:
                link_intervals.setdefault(name, []).append((s, e))
                if keep_timeline:
                    bars.setdefault((name, tg.label[t], tg.category[t]), []).append((s, e))
    # one bar per port while it carries a message of one re-layout or collective: the
    # blocks a re-layout sends at once share the port's time, they do not each take it
    for (name, label, kind), spans in bars.items():
        events += [Event(name, s, e, label, kind) for s, e in merged(spans)]
    link_busy = {name: merge_busy(iv) for name, iv in sorted(link_intervals.items())}
    link_traffic: dict[str, float] = {}
    for r, nbytes in enumerate(trace.resource_bytes):
        if nbytes > 0:
            name = tasks.resource_name(r)
            link_traffic[name] = max(link_traffic.get(name, 0.0), nbytes / tg.capacity[r])
    static = np.zeros(devices)
    changes = []
    for o in ops:
        static[o.ids] += o.state_bytes
        acts = o.activation_by_device or [o.activation_bytes] * len(o.ids)
        for d, f, b, a in zip(o.ids, o.forward, o.backward, acts):
            changes.append((d, trace.start[f], a))
            changes.append((d, trace.end[b], -a))
    step = float(max(trace.end, default=0.0))
    return SimResult(graph.name, cluster.name, devices, step, compute_busy,
                     peak_memory(devices, static, changes), link_busy, dict(sorted(link_traffic.items())),
                     sorted(events, key=lambda ev: (ev.resource, ev.start)), stats,
                     np.array([cluster.device_at(d).memory_bytes for d in range(devices)]))
