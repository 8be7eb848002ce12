"""A plan's price works out each kind of op once (``calibrated_plan.tally``): an op of
another layer in the same config and variant has the same terms. Sharing must never
change a price: here each plan is priced shared and with every op worked out alone (the
key made unique per op), on plans whose layers repeat one config under
different ZeRO stages and recomputation, and on random plans."""
from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest

from pase import api
from pase.cost_models import calibrated_plan
from pase.costing.keys import op_signature

CASES = [("gpt2", {"layers": 3, "batch": 8}, 8), ("mixtral-8x7b", {"layers": 2, "batch": 8}, 8)]


def _alone(bound, op, configs, variant):
    return object()  # equal to nothing: no op shares another's terms


def _repeated_configs_other_variants(built, rng: random.Random) -> tuple[int, ...]:
    """The first op of each kind at a random candidate; the next ops of its kind at the
    same config under another variant where there is one (else the same candidate)."""
    problem, first = built.problem, {}
    choice = []
    for i, op in enumerate(built.graph.ops):
        configs, maps = problem.candidates[i].configs, problem.variants[i]
        sig = op_signature(op)
        if sig not in first:
            first[sig] = rng.randrange(len(configs))
            choice.append(first[sig])
            continue
        k = first[sig]
        others = [j for j in range(len(configs)) if np.array_equal(configs[j], configs[k])
                  and maps.variant(j) != maps.variant(k)]
        choice.append(rng.choice(others) if others else k)
    return tuple(choice)


@pytest.mark.parametrize("model, options, devices", CASES, ids=[c[0] for c in CASES])
def test_shared_terms_price_as_each_op_alone(model, options, devices):
    built = api.build_problem(model, devices, cluster="h100-sxm", model_options=options,
                              cost_options={"zero": "auto", "recompute": "auto"},
                              memory_cap="none")
    rng = random.Random(0)
    plans = [_repeated_configs_other_variants(built, rng) for _ in range(3)]
    plans += [tuple(rng.randrange(len(v)) for v in built.problem.vertex_costs) for _ in range(3)]
    plans.append(tuple(0 for _ in built.problem.vertex_costs))
    varied = 0
    for choice in plans:
        shared = built.cost_model.price_plan(built.graph, built.problem, choice)
        with mock.patch.object(calibrated_plan, "terms_key", _alone):
            alone = built.cost_model.price_plan(built.graph, built.problem, choice)
        assert shared == alone
        variants = {(op_signature(op), built.problem.variants[i].variant(choice[i]))
                    for i, op in enumerate(built.graph.ops)}
        varied += len(variants) > len({s for s, _ in variants})
    assert varied, "some plan must repeat an op kind under two variants"
