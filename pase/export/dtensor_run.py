"""Run a DTensor plan on CPU processes (gloo) and compare with the unsharded module.

:func:`check_round_trip` imports the module that ``build()`` returns, makes the
plan of each strategy (:func:`pase.export.dtensor.to_dtensor`), and starts
``devices`` processes on one gloo process group (a free localhost port, no
torchrun). Each builds the module again (``build`` seeds it), keeps an unsharded
copy, applies the plan, and runs one forward and backward of both; the loss is
the module's output when it is a scalar, else the mean square of its output.
Rank 0 reports, per strategy, the loss of each and the largest relative
difference of the loss and of every parameter's gradient.
"""
from __future__ import annotations

import copy
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["check_round_trip"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_round_trip(build: Callable[..., tuple], strategies: Sequence[Any], devices: int, *,
                     options: dict | None = None) -> list[dict[str, Any]]:
    """Per strategy ``{"loss", "reference_loss", "loss_diff", "grad_diff", "inexpressible"}``.

    ``build(**options)`` returns ``(module, example_args)`` and must be importable by
    name in a new process (a module-level function).
    """
    import torch.multiprocessing as mp

    from pase.export.dtensor import to_dtensor
    from pase.frontends.torch import import_torch

    module, args = build(**(options or {}))
    imported = import_torch(module, args)
    plans = [to_dtensor(module, imported, s, devices=devices).to_dict() for s in strategies]
    with tempfile.TemporaryDirectory(prefix="pase-dtensor-") as folder:
        out = Path(folder) / "result.json"
        mp.spawn(_worker, args=(devices, _free_port(), build, options or {}, plans, str(out)),
                 nprocs=devices, join=True)
        return json.loads(out.read_text())


def _plan(data: dict) -> Any:
    from pase.export.dtensor import DTensorPlan, TensorPlan

    def tensor(name: str, d: dict) -> TensorPlan:
        return TensorPlan(name, d["op"], tuple(d["shape"]), d["placements"], d["exact"], d["note"])

    plan = DTensorPlan(data["devices"], tuple(data["mesh"]["shape"]),
                       tuple(data["mesh"]["dim_names"]))
    plan.parameters = {k: tensor(k, v) for k, v in data["parameters"].items()}
    plan.activations = {k: tensor(k, v) for k, v in data["activations"].items()}
    plan.module_inputs = {k: tensor(k, v) for k, v in data["module_inputs"].items()}
    plan.inputs = [None if v is None else tensor(f"input {i}", v)
                   for i, v in enumerate(data["inputs"])]
    return plan


def _loss(out: Any) -> Any:
    from torch.distributed.tensor import DTensor

    if isinstance(out, DTensor):
        out = out.full_tensor()
    return out if out.dim() == 0 else out.square().mean()


def _worker(rank: int, world: int, port: int, build: Callable, options: dict, plans: list,
            out_path: str) -> None:
    import logging

    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    logging.getLogger("torch.distributed.tensor").setLevel(logging.ERROR)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = []
        for data in plans:
            plan = _plan(data)
            module, args = build(**options)
            reference = copy.deepcopy(module)
            mesh = plan.mesh("cpu")
            plan.apply(module, mesh)
            loss = _loss(module(*plan.distribute_inputs(args, mesh)))
            loss.backward()
            ref_loss = _loss(reference(*args))
            ref_loss.backward()
            scale = max(abs(ref_loss.item()), 1e-30)
            worst = 0.0
            for p, q in zip(module.parameters(), reference.parameters()):
                grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                denom = max(q.grad.abs().max().item(), 1e-30)
                worst = max(worst, (grad - q.grad).abs().max().item() / denom)
            results.append({"loss": loss.item(), "reference_loss": ref_loss.item(),
                            "loss_diff": abs(loss.item() - ref_loss.item()) / scale,
                            "grad_diff": worst, "inexpressible": data["inexpressible"],
                            "sharded": sorted(k for k, v in data["parameters"].items()
                                              if any(p != "Replicate()" for p in v["placements"]))})
        if rank == 0:
            from pase.files import write_text_atomic

            write_text_atomic(out_path, json.dumps(results), what="DTensor check result")
        dist.barrier()
    finally:
        dist.destroy_process_group()
