"""The variant pruning of pase.costing.variants is exact: every dropped variant is
covered by a kept candidate of the same config, also when a pipeline stage holds
several micro-batches' activations; ops without parameters of their own get no ZeRO."""
from __future__ import annotations

import numpy as np
import pytest

import pase
from pase.api import build_problem
from pase.errors import OptionError
from pase.work.variants import Variant, apply_variant

ALL = [Variant(z, r) for r in (False, True) for z in range(4)]
RTOL = 1e-12  # the pruning's documented time tolerance


@pytest.fixture(scope="module")
def built():
    return build_problem("gpt2", 8, "alpha-beta", powers_of_two=True, memory_cap="none",
                         model_options={"layers": 1},
                         cost_options={"zero": "auto", "recompute": "auto"})


@pytest.mark.parametrize("in_flight", [1, 4])
def test_every_variant_is_covered_by_a_kept_candidate(built, in_flight):
    """For each op, config and each of the 8 variants (priced here with apply_variant,
    not through the pruning), some kept candidate of that config is at most as slow and
    needs at most the memory state + in_flight x activations."""
    model = built.cost_model.for_devices(8)
    for i, op in enumerate(built.graph.ops):
        vm = built.problem.variants[i]
        work = model.work(op, built.space.configs[i])
        per = [apply_variant(work, v.zero, v.recompute) for v in ALL]
        time = np.stack([model.work_costs(w) for w in per])
        mem = np.stack([w.state_bytes + in_flight * w.activation_bytes for w in per])
        for k in range(len(built.space.configs[i])):
            kept = [ALL.index(Variant(*vm.variant(c))) for c in np.flatnonzero(vm.config == k)]
            for v in range(len(ALL)):
                assert any(time[j, k] <= time[v, k] * (1 + RTOL) and mem[j, k] <= mem[v, k]
                           for j in kept), (op.name, k, ALL[v], in_flight)


def test_the_base_variant_of_config_k_is_candidate_k(built):
    for vm, sizes in zip(built.problem.variants, built.space.sizes):
        assert vm.config[:sizes].tolist() == list(range(sizes))
        assert not vm.zero[:sizes].any() and not vm.recompute[:sizes].any()


def test_ops_without_parameters_of_their_own_get_no_zero(built):
    """The head reads the embedding's tied matrix: the embedding holds (and shards) it."""
    for i, op in enumerate(built.graph.ops):
        owns = any(op.is_parameter(w) for w in op.weights) and op.attrs.get("tied") is None
        if not owns:
            assert not built.problem.variants[i].zero.any(), op.name
    head = built.graph.index("lm_head")
    assert built.graph.op("lm_head").attrs.get("tied") == "wte"
    assert built.problem.variants[head].recompute.any()  # recomputation still applies


@pytest.mark.parametrize("op,why", [("lm_head", "tied to op 'wte'"),
                                    ("h0.attn.softmax", "it has no parameters")])
def test_zero_on_an_op_without_parameters_is_refused(op, why):
    strategy = pase.solve("gpt2", 8, cost_model="alpha-beta", solver="data-parallel",
                          powers_of_two=True, model_options={"layers": 1}, memory_cap="none")
    data = {"strategy": strategy.configs, "variants": {op: {"zero": 3}}}
    with pytest.raises(OptionError, match=f"zero must be 0 for op '{op}'.*{why}") as err:
        pase.evaluate("gpt2", data, 8, cost_model="alpha-beta", powers_of_two=True,
                      model_options={"layers": 1})
    assert "\n" not in str(err.value)
    data["variants"] = {op: {"recompute": True}}  # recomputation is fine
    again = pase.evaluate("gpt2", data, 8, cost_model="alpha-beta", powers_of_two=True,
                          model_options={"layers": 1})
    assert again.variants == {op: Variant(0, True)}


def test_export_refuses_zero_on_an_op_without_parameters():
    from pase.export.jax import to_jax

    with pytest.raises(OptionError, match="zero must be 0 for op 'loss'"):
        to_jax("mlp", {"strategy": {}, "variants": {"loss": {"zero": 3}}}, 8)


@pytest.mark.parametrize("solver", ["data-parallel", "owt", "megatron"])
def test_baselines_pick_the_base_variant_of_their_config(built, solver):
    """A baseline reads configs from Candidates: on the expanded Problem it must pick the
    same configs, at the base variant, for the same cost as without variants."""
    from pase.api import run_solver

    plain = build_problem("gpt2", 8, "alpha-beta", powers_of_two=True, memory_cap="none",
                          model_options={"layers": 1})
    a, b = run_solver(solver, built.problem), run_solver(solver, plain.problem)
    assert a.cost == b.cost
    for vm, c, d in zip(built.problem.variants, a.choice, b.choice):
        assert int(vm.config[c]) == d and vm.variant(c) == (0, False)


@pytest.mark.parametrize("model", ["alexnet", "bert-base", "densenet121", "inception_v3", "gpt2",
                                   "llama2-7b", "mixtral-8x7b", "rnnlm", "vit-b16", "transformer"])
def test_every_owned_parameter_has_a_data_parallel_group(model):
    """A work formula that forgot to tag a parameter's gradient sync (``weight=``) would leave
    that parameter unsharded at every stage without a word."""
    from pase.api import load_graph
    from pase.work import op_work
    from pase.work.ops import owned_parameters
    from pase.work.variants import data_parallel_groups

    for op in load_graph(model).ops:
        owned = {j for j, w in enumerate(op.weights) if any(w is p for p in owned_parameters(op))}
        work = op_work(op, np.ones((1, len(op.dims)), dtype=np.int64))
        assert set(data_parallel_groups(work)) == owned, op.name


def test_shared_layers_build_what_unshared_layers_build():
    """Repeated layers share cost vectors, variant maps and edge matrices: the Problem
    equals one built with no sharing at all (every vertex and edge costed on its own)."""
    from pase.api import build_space
    from pase.registry import COST_MODELS

    cls = COST_MODELS.get("alpha-beta")

    class Unshared(cls):
        def vertex_key(self, op, configs):
            return None

        def edge_key(self, *args):
            return None

    graph, space = build_space("gpt2", 8, powers_of_two=True, model_options={"layers": 2})
    options = dict(zero="auto", recompute="auto")
    a, b = cls(**options).problem(graph, space), Unshared(**options).problem(graph, space)
    assert len({id(v) for v in a.vertex_costs}) < len(a.vertex_costs)  # sharing happened
    assert len({id(m) for m in a.edge_costs}) < len(a.edge_costs)
    assert a.edges == b.edges
    for v in range(a.num_vertices):
        assert np.array_equal(a.vertex_costs[v], b.vertex_costs[v])
        assert np.array_equal(a.memory[v], b.memory[v])
        for field in ("config", "zero", "recompute"):
            assert np.array_equal(getattr(a.variants[v], field), getattr(b.variants[v], field))
    for m, n in zip(a.edge_costs, b.edge_costs):
        assert np.array_equal(m, n)


def test_every_solver_on_a_capped_variant_problem():
    """On a capped chain with both options on auto: every solver's choice is a valid
    candidate within the cap, priced as the Problem prices it, never below the dp's
    optimum (exhaustive), and equal to it when the solver claims OPTIMAL."""
    from pase.api import run_solver
    from pase.problem import Status
    from pase.registry import SOLVERS

    built = build_problem("chain", 4, "alpha-beta", memory_cap="none",
                          model_options={"length": 3, "batch": 64, "width": 128},
                          cost_options={"zero": "auto", "recompute": "auto"})
    problem = built.problem.with_memory_cap(built.problem.min_memory() * 1.3)
    best = run_solver("exhaustive", problem).cost
    for name in SOLVERS.names():
        try:
            sol = run_solver(name, problem, **({"seed": 0} if name == "mcmc" else {}))
        except ImportError:
            continue  # an optional backend that is not installed
        if sol.choice is None:
            assert sol.status in (Status.INFEASIBLE, Status.TIME_LIMIT), name
            continue
        assert problem.fits(sol.choice), name
        assert sol.cost == pytest.approx(problem.evaluate(sol.choice), rel=1e-9), name
        assert sol.cost >= best * (1 - 1e-9), name
        if sol.status is Status.OPTIMAL:
            assert sol.cost == pytest.approx(best, rel=1e-9), name
