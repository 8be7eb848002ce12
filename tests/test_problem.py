import math

import numpy as np
import pytest

from pase.errors import ProblemError
from pase.problem import Problem, Solution, Status


def test_evaluate_sums_vertex_and_edge_costs(tiny_problem):
    # a=0 (1) + b=0 (0) + c=1 (0) + edge(a,b)[0,0]=0 + edge(b,c)[0,1]=3
    assert tiny_problem.evaluate([0, 0, 1]) == 4.0
    many = tiny_problem.evaluate_many(np.array([[0, 0, 1], [1, 1, 1]]))
    assert many.tolist() == [4.0, 0.0 + 5.0 + 0.0 + 0.0 + 0.0]


def test_reverse_and_duplicate_edges_are_merged():
    p = Problem([np.zeros(2), np.zeros(3)], [(0, 1), (1, 0)],
                [np.ones((2, 3)), np.full((3, 2), 2.0)])
    assert p.edges == [(0, 1)]
    assert p.edge_costs[0].tolist() == [[3.0] * 3] * 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(vertex_costs=[np.zeros(2)], edges=[(0, 0)], edge_costs=[np.zeros((2, 2))]), "self-loop"),
    (dict(vertex_costs=[np.zeros(2)], edges=[(0, 3)], edge_costs=[np.zeros((2, 2))]), "outside"),
    (dict(vertex_costs=[np.zeros(2), np.zeros(2)], edges=[(0, 1)], edge_costs=[np.zeros((2, 3))]),
     "expected (2, 2)"),
    (dict(vertex_costs=[np.array([np.nan])], edges=[], edge_costs=[]), "NaN"),
    (dict(vertex_costs=[np.array([])], edges=[], edge_costs=[]), "non-empty"),
])
def test_bad_problems_are_refused(kwargs, message):
    with pytest.raises(ProblemError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Problem(**kwargs)


def test_choice_outside_range_names_the_vertex(tiny_problem):
    with pytest.raises(ProblemError, match=r"vertex 1 \(b\)"):
        tiny_problem.evaluate([0, 2, 0])


def test_gap():
    assert Solution((0,), 10.0, Status.FEASIBLE, "x", lower_bound=8.0).gap == pytest.approx(0.2)
    assert Solution((0,), 10.0, Status.OPTIMAL, "x", lower_bound=10.0).gap == 0.0
    assert Solution((0,), 10.0, Status.FEASIBLE, "x").gap is None


def test_edge_matrix_and_incident_orient_from_the_asking_vertex():
    # Edge (0, 1) stored (K_0, K_1) = (2, 3); edge (1, 2) stored (3, 4).
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    p = Problem([np.zeros(2), np.zeros(3), np.zeros(4)], [(0, 1), (2, 1)], [a, b.T])
    assert p.edge_matrix(0, 1)[1, 2] == 5.0 and p.edge_matrix(1, 0)[2, 1] == 5.0
    assert p.edge_matrix(1, 2)[2, 3] == 11.0 and p.edge_matrix(2, 1)[3, 2] == 11.0
    with pytest.raises(ProblemError, match="share no edge"):
        p.edge_matrix(0, 2)
    assert [(w, m.shape) for w, m in p.incident(1)] == [(0, (3, 2)), (2, (3, 4))]
    assert p.neighbors() == [[1], [0, 2], [1]]
    # The local cost of vertex 1 read through incident() matches a re-evaluation.
    choice = [1, 0, 3]
    for c in range(3):
        local = sum(m[c, choice[w]] for w, m in p.incident(1))
        assert local == p.evaluate([1, c, 3])


@pytest.mark.parametrize("cap", [math.nan, "nan", "lots", [1.0]])
def test_a_nan_or_non_numeric_memory_cap_is_refused(cap):
    memory = [np.array([1.0, 2.0])]
    with pytest.raises(ProblemError, match="memory_cap"):
        Problem([np.array([1.0, 0.0])], [], [], memory=memory, memory_cap=cap)
    with pytest.raises(ProblemError, match="memory_cap"):
        Problem([np.array([1.0, 0.0])], [], [], memory=memory).with_memory_cap(cap)


def test_nan_memory_is_refused_and_an_infinite_cap_is_no_cap():
    with pytest.raises(ProblemError, match=r"memory\[0\] has NaN"):
        Problem([np.array([1.0, 0.0])], [], [], memory=[np.array([1.0, math.nan])])
    p = Problem([np.array([1.0, 0.0])], [], [], memory=[np.array([1.0, 2.0])], memory_cap=math.inf)
    assert p.memory_cap is None and p.fits([1])
    assert Problem([np.array([1.0])], [], [], memory=[np.array([1.0])],
                   memory_cap=-math.inf).memory_cap == -math.inf


def test_term_scale_sums_the_magnitudes_the_choice_pays():
    # By hand: |3| + |-2| + |0| = 5 for (0, 0); the 1e15 entry is not paid.
    p = Problem([np.array([3.0, 1.0]), np.array([-2.0])], [(0, 1)], [np.array([[0.0], [1e15]])])
    assert p.term_scale([0, 0]) == 5.0
    assert p.term_scale([1, 0]) == 1.0 + 2.0 + 1e15


@pytest.mark.parametrize("choice, message", [
    ([0.9, 1], r"choice for vertex 0 \(v0\) must be an integer index, got 0\.9"),
    ([0, 1.9], r"choice for vertex 1 \(v1\) must be an integer index, got 1\.9"),
    ([True, False], r"choice for vertex 0 \(v0\) must be an integer index, got True"),
    ([np.bool_(False), 0], r"vertex 0 \(v0\) must be an integer index"),
    ([0, math.nan], r"vertex 1 \(v1\) must be an integer index, got nan"),
    ([0, "1"], r"vertex 1 \(v1\) must be an integer index, got '1'"),
    ([[0], [1]], r"vertex 0 \(v0\) must be an integer index, got \[0\]"),
    ([1e30, 0], r"choice 10+\d* for vertex 0 \(v0\) is outside 0\.\.1"),
    ("01", r"a choice is a list of 2 candidate indices, one per vertex; got str"),
    ({}, r"a choice is a list of 2 candidate indices, one per vertex; got dict"),
    (7, r"a choice is a list of 2 candidate indices, one per vertex; got int"),
    ([0, 1, 0], r"a choice needs one index per vertex \(2\), got 3"),
    (np.array([0.5, 1.0]), r"vertex 0 \(v0\) must be an integer index"),
])
def test_a_choice_of_non_integers_is_refused_not_truncated(choice, message):
    p = Problem([np.array([1.0, 2.0]), np.array([10.0, 20.0, 30.0])], [], [])
    with pytest.raises(ProblemError, match=message):
        p.evaluate(choice)


def test_integer_types_and_integral_floats_are_choices():
    # By hand: candidate 1 of each vertex costs 2 + 20.
    p = Problem([np.array([1.0, 2.0]), np.array([10.0, 20.0, 30.0])], [], [])
    for choice in ([1, 1], (np.int64(1), np.int32(1)), np.array([1, 1], dtype=np.uint8),
                   [1.0, np.float64(1.0)]):
        assert p.evaluate(choice) == 22.0
        assert p.check_choice(choice).dtype == np.int64


def test_variant_maps_are_checked_and_kept_by_a_new_cap():
    from pase.problem import VariantMap

    vm = VariantMap(np.array([0, 1, 1]), np.array([0, 0, 3], dtype=np.int8), np.array([False, True, False]))
    p = Problem([np.zeros(3)], [], [], memory=[np.ones(3)], variants=[vm])
    assert p.with_memory_cap(2.0).variants == [vm] and vm.variant(2) == (3, False)
    with pytest.raises(ProblemError, match="maps 3 variants for 2 costs"):
        Problem([np.zeros(2)], [], [], variants=[vm])
    with pytest.raises(ProblemError, match="1 variant maps for 2 vertices"):
        Problem([np.zeros(3), np.zeros(3)], [], [], variants=[vm])


def test_edge_matrix_reads_either_orientation_and_shares_transposes():
    """A matrix several edges share is transposed once, C-ordered and read-only; an edge of
    its own gives a view. Either way the entries are the stored matrix's."""
    rng = np.random.default_rng(0)
    shared, own = rng.random((3, 4)), rng.random((3, 4))
    p = Problem([np.zeros(3), np.zeros(4), np.zeros(3), np.zeros(4), np.zeros(3), np.zeros(4)],
                [(0, 1), (2, 3), (4, 5)], [shared, shared, own])
    first, again = p.edge_matrix(1, 0), p.edge_matrix(3, 2)
    assert np.array_equal(first, shared.T) and np.array_equal(again, shared.T)
    assert first is again and first.flags.c_contiguous and not first.flags.writeable
    view = p.edge_matrix(5, 4)
    assert np.array_equal(view, own.T) and np.shares_memory(view, p.edge_matrix(4, 5))
    assert p.edge_matrix(0, 1) is p.edge_costs[0]


def test_checks_and_transposes_of_read_only_matrices_are_kept_and_still_hold():
    # A pipeline search builds many Problems over the same read-only layer matrices: the
    # NaN check and the transposed copy are made once per matrix, and still hold.
    shared = np.arange(6.0).reshape(2, 3)
    shared.flags.writeable = False
    a = Problem([np.zeros(2), np.zeros(3), np.zeros(2)], [(0, 1), (2, 1)], [shared, shared])
    b = Problem([np.zeros(3), np.zeros(2)], [(1, 0)], [shared])
    # an edge given the other way stores the transpose: one copy for every Problem
    assert a.edge_costs[1] is b.edge_costs[0]
    assert np.array_equal(a.edge_costs[1], shared.T) and np.array_equal(a.edge_matrix(1, 0), shared.T)
    bad = np.array([[0.0, np.nan, 1.0], [2.0, 3.0, 4.0]])
    bad.flags.writeable = False
    for _ in range(2):  # the kept answer still refuses it
        with pytest.raises(ProblemError, match="NaN"):
            Problem([np.zeros(2), np.zeros(3)], [(0, 1)], [bad])
    # a writeable matrix is checked again each time: it may have changed in between
    late = np.zeros((2, 3))
    Problem([np.zeros(2), np.zeros(3)], [(0, 1)], [late])
    late[0, 0] = np.nan
    with pytest.raises(ProblemError, match="NaN"):
        Problem([np.zeros(2), np.zeros(3)], [(0, 1)], [late])
