"""The cases ``pase verify`` is checked on (tests/test_verify.py) and measured on
(benchmarks/xla_agreement.py), in one place so both compare the same programs.

Each case is a :func:`pase.export.verify_many` case: ``{"model", "strategy",
"devices", "model_options"}``.
"""
from __future__ import annotations

ATTENTION = ("qkv", "unstack", "scores", "softmax", "context", "out")
ZOO = ("bert-base", "gpt2", "llama2-7b", "llama3-8b", "vit-b16", "mixtral-8x7b", "switch-base-8")


def mlp_options(p: int) -> dict:
    return {"batch": 2 * p, "width": 4 * p, "classes": 10}


def mlp_cases(p: int) -> dict[str, dict]:
    """A matmul (fc2 of the MLP) split on data, output, reduction and in 2-D; the
    two-layer MLP (fc1, fc2) under Megatron and under each mismatched pair."""
    half = p // 2
    return {
        "matmul b": {"fc2": {"b": p}},
        "matmul n": {"fc2": {"n": p}},
        "matmul k": {"fc2": {"k": p}},
        "matmul 2-D": {"fc2": {"b": 2, "n": half}},
        "mlp megatron n|k": {"fc1": {"n": p}, "fc2": {"k": p}},
        "mlp n|n": {"fc1": {"n": p}, "fc2": {"n": p}},
        "mlp n|b": {"fc1": {"n": p}, "fc2": {"b": p}},
        "mlp k|b": {"fc1": {"k": p}, "fc2": {"b": p}},
        "mlp b|k": {"fc1": {"b": p}, "fc2": {"k": p}},
    }


def transformer_options(p: int, **over) -> dict:
    return {"batch": max(8, p), "seq": 8, "vocab": 64, "width": 32, "heads": 4, "d_k": 8, "ff": 64,
            "layers": 1, **over}


def zoo_options(name: str, p: int) -> dict:
    from pase.registry import MODELS

    opts = dict(MODELS.entry(name).info["tiny"], layers=1)
    opts["batch"] = max(opts["batch"], p)
    return opts


def compute_bound(p: int):
    """Slow devices on fast links: the dp optimum of these small layers splits them
    (on the default cluster it keeps them whole, with nothing to compare)."""
    from pase.cluster import Cluster, Device, Link

    link = Link(300.0, 0.01)
    return Cluster("compute-bound", 1, p, Device("slow", 0.001, 1000.0), link, link)


def layer_cases(p: int, zoo=ZOO) -> list[tuple[str, dict]]:
    """The encoder attention block split by heads (heads = p) and by batch, the rest
    unsplit; and the dp optimum of one layer of the transformer and of each zoo
    model, at tiny sizes on :func:`compute_bound`'s cluster (labelled by model name)."""
    import pase

    out = [(label, {"model": "transformer", "devices": p, "model_options": opts,
                    "strategy": {f"enc0.attn.{n}": {dim: p} for n in ATTENTION}})
           for label, dim, opts in (("attention heads", "h", transformer_options(p, heads=p)),
                                    ("attention batch", "b", transformer_options(p)))]
    for name in ("transformer",) + tuple(zoo):
        opts = transformer_options(p) if name == "transformer" else zoo_options(name, p)
        s = pase.solve(name, p, cost_model="alpha-beta", model_options=opts,
                       cost_options={"cluster": compute_bound(p)})
        out.append((name, {"model": name, "strategy": s, "devices": p, "model_options": opts}))
    return out
