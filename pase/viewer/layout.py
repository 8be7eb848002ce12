"""The plan in one line: the framework layout it is (``dp 4 x tp 2``), or why it is none.

The match is :func:`pase.export.plan_layout.infer_layout`'s (the launch export's): the
layout each role votes for, kept only if every op splits exactly as that layout's
:func:`pase.perf.plan.layout_configs` has it, and every op's ZeRO stage and
recomputation are the layout's; otherwise the reason names the ops that differ.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from pase.errors import NoPlanFormError, PaseError
from pase.viewer.planned import Planned

# Megatron-LM's terms, in its order: data, tensor, context (sequence), expert parallelism.
TERMS = ("dp", "tp", "cp", "ep")


def layout_line(planned: Planned) -> dict[str, Any]:
    """``{"layout": "dp 4 x tp 2", "flag": "tp=2,dp=4", "why": None}``, or ``layout`` None
    and ``why`` the reason; a plan drawn from a named layout is that layout."""
    from pase.export.plan_layout import differing_variants, infer_layout

    if planned.layout is not None:
        return _line(planned.layout)
    s = planned.strategy
    microbatches = int(s.meta.get("microbatches") or 1)
    options: dict[str, Any] = {}
    zeros = Counter(getattr(v, "zero", 0) for v in s.variants.values())
    if zeros:
        options["zero"] = zeros.most_common(1)[0][0]
    try:
        lay = infer_layout(planned.graph, s.configs, s.devices, microbatches, options)
        diff = differing_variants(planned.graph, s.variants, lay)
        if diff:
            more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
            return {"layout": None, "flag": None,
                    "why": f"the plan splits as tp={lay.tp},dp={lay.dp} but {len(diff)} op(s) "
                           f"differ in ZeRO stage or recomputation: {'; '.join(diff[:4])}{more}"}
    except NoPlanFormError as e:  # the nearest layout has no per-op form: cannot tell
        return {"layout": None, "flag": None, "unknown": True,
                "why": f"the nearest layout cannot be written op by op, so the plan was not "
                       f"matched ({e})"}
    except (PaseError, ValueError) as e:
        return {"layout": None, "flag": None, "why": str(e)}
    return _line(lay)


def _line(lay: Any) -> dict[str, Any]:
    """A layout's line and flag."""
    degrees = {k: getattr(lay, k) for k in TERMS}
    text = " \u00d7 ".join(f"{k} {v}" for k, v in degrees.items() if v > 1) or "dp 1"
    if lay.sequence_parallel:
        text += " with sequence parallelism"
    if lay.zero:
        text += f", ZeRO-{lay.zero}"
    flag = ",".join(f"{k}={degrees[k]}" for k in ("tp", "dp", "cp", "ep") if degrees[k] > 1)
    return {"layout": text, "flag": flag or "dp=1", "why": None}


def pipeline_line(stages: list[Planned]) -> dict[str, Any]:
    """A pipeline plan's line: ``pp S x`` the layout every stage is, when all stages hold
    as many devices and split as the same layout; else why not."""
    lines = [layout_line(p) for p in stages]
    for i, line in enumerate(lines):
        if line["layout"] is None:
            return dict(line, why=f"stage {i}: {line['why']}")
    sizes = sorted({p.devices for p in stages})
    if len(sizes) > 1:
        return {"layout": None, "flag": None,
                "why": f"the stages hold {', '.join(map(str, sizes))} devices: a layout's "
                       f"stages are equal"}
    flags = {line["flag"] for line in lines}
    if len(flags) > 1:
        return {"layout": None, "flag": None,
                "why": f"the stages split as different layouts: {', '.join(sorted(flags))}"}
    pp = len(stages)
    text = lines[0]["layout"]
    flag = lines[0]["flag"]
    if pp > 1:
        text = text if text != "dp 1" else ""
        text = f"pp {pp}" + (f" \u00d7 {text}" if text else "")
        flag = f"{flag},pp={pp}" if flag != "dp=1" else f"pp={pp}"
    return {"layout": text, "flag": flag, "why": None}
