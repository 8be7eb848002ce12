"""Real models from transformers, torchvision and timm (and two written here) import
without flags and match torch's own counts.

Per model (tests/real_models/catalogue.py, random weights, small configs):

- parameters equal the sum of ``numel()`` over the module's unique parameters;
- the matrix-product FLOP of the whole graph, as ``pase inspect`` totals them, and of
  the ops torch counts, each equal
  ``torch.utils.flop_counter.FlopCounterMode``'s total for one forward call, within
  1% (2 FLOP per multiply-add in both; attention on the math backend and Hugging
  Face experts one product per expert, as torch's counter sees them);
- the dp solves the graph at p = 8 under the alpha-beta model, and the simulator
  prices it (on one device its step equals the alpha-beta cost);
- the DTensor plan of that strategy places every parameter, each layout DTensor
  cannot hold marked as such with a reason.
"""
import math
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("timm")

import pase  # noqa: E402
from pase.counts import counts  # noqa: E402
from pase.export.dtensor import to_dtensor  # noqa: E402
from pase.frontends.torch import import_torch  # noqa: E402
from pase.sim.simulate import simulate  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from real_models.catalogue import MODELS, eager_experts  # noqa: E402


def torch_flops(model, args) -> float:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), eager_experts(model), \
            FlopCounterMode(display=False) as counter:
        model(*args)
    return float(counter.get_total_flops())


@pytest.fixture(scope="module")
def imported():
    cache = {}

    def get(name):
        if name not in cache:
            model, args = MODELS[name]()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no approximation: an import without flags
                imp = import_torch(model, args, name=name)
            cache.clear()  # one model at a time: they are big
            cache[name] = (model, args, imp)
        return cache[name]
    return get


# the four slowest imports (12-25 s each on two cores) run with the slow tests
HEAVY = ("densenet121", "swin_t", "convnext_tiny", "efficientnet_b0")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n
                                  for n in MODELS])
def test_real_model(imported, name):
    model, args, imp = imported(name)
    unique = {id(p): p.numel() for p in model.parameters()}
    assert pase.counts.parameters(imp.graph) == sum(unique.values())

    whole = counts(imp.graph)
    by_op = whole.by_op()
    ours = sum(by_op[op.name].matmul_flops for op in imp.graph.ops if imp.ops[op.name].counted)
    theirs = torch_flops(model, args)
    assert theirs > 0
    assert ours == pytest.approx(theirs, rel=0.01)
    assert whole.matmul_flops == pytest.approx(theirs, rel=0.01)  # pase inspect's total

    strategy = pase.solve(imp.graph, devices=8, cost_model="alpha-beta")
    assert strategy.solution.status.value == "optimal"
    assert math.isfinite(strategy.total_cost) and strategy.total_cost > 0

    # The simulator prices every op too: on one device, its step is the alpha-beta cost.
    alone = pase.solve(imp.graph, devices=1, cost_model="alpha-beta", cluster="h100-sxm")
    step = simulate(imp.graph, {}, "h100-sxm", devices=1, timeline=False).step_time
    assert step == pytest.approx(alone.total_cost, rel=1e-9)
    assert simulate(imp.graph, strategy, devices=8, timeline=False).step_time > 0

    plan = to_dtensor(model, imp, strategy, devices=8)
    assert set(plan.parameters) == set(imp.parameters)
    for tensor in plan.parameters.values():
        assert len(tensor.placements) == len(plan.mesh_shape)
        assert tensor.exact or tensor.note
