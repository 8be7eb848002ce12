"""The one schedule module: programs, closed forms and event replay agree, and the
papers' tables hold (values worked by hand here, from the papers' formulas)."""
from __future__ import annotations

import pytest

from pase.errors import OptionError
from pase.perf.schedule import (
    Task,
    Work,
    bubble_fraction,
    bubble_seconds,
    build,
    in_flight,
    parameter_copies,
    parse,
    replay,
    step_seconds,
)


def replayed(schedule: str, p: int, m: int, work: Work, v: int = 1, link: float = 0.0):
    """Replay ``p`` equal stages, each chunk ``1 / v`` of a stage's ``work``."""
    pipe = build(schedule, p, m, v)
    chunk = Work(work.forward / v, work.backward / v, work.weight / v)
    return replay(pipe, [chunk] * len(pipe.device), [link] * len(pipe.device))


# (schedule, V, stages and micro-batches, stage work F, B (whole), W): where the closed
# form is exact. ZB-H1 includes weight gradients longer than F and than B - W; DualPipe
# the table's own shape, F = B - W and W <= F.
EXACT = [("gpipe", 1, [(1, 1), (2, 4), (4, 8), (3, 5)], [Work(1, 2), Work(0.75, 1.5, 0.5)]),
         ("1f1b", 1, [(1, 4), (2, 4), (4, 8), (3, 5), (4, 2)], [Work(1, 2), Work(0.75, 1.5, 0.5)]),
         ("interleaved", 2, [(2, 4), (4, 8), (4, 12), (8, 16)], [Work(1, 2), Work(0.75, 1.5)]),
         ("interleaved", 3, [(4, 8), (3, 9)], [Work(1, 2)]),
         ("zb-h1", 1, [(2, 4), (4, 8), (4, 4), (3, 5), (8, 24)],
          [Work(1, 2, 1), Work(1, 1, 0.5), Work(2, 3, 1), Work(1, 3, 2), Work(1, 5, 2), Work(1, 2, 0)]),
         ("dualpipe", 1, [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 24)],
          [Work(1, 2, 1), Work(2, 3, 1), Work(2, 4, 2), Work(1, 1.5, 0.5)])]
CASES = [(s, v, p, m, w) for s, v, shapes, works in EXACT for p, m in shapes for w in works]


@pytest.mark.parametrize("schedule, v, p, m, work", CASES)
def test_closed_form_is_the_replay_for_equal_stages(schedule, v, p, m, work):
    ran = replayed(schedule, p, m, work, v)
    closed = step_seconds(schedule, [work] * p, m, virtual=v)
    assert max(ran.ends) == pytest.approx(closed, rel=1e-12)
    busy = m * (work.forward + work.backward)
    if p > 1:
        assert closed - busy == pytest.approx(bubble_seconds(schedule, p, work, virtual=v))


def test_bubble_fractions_by_hand():
    # p = 4, m = 8, per stage F = 1, B = 2 (of which W = 1): busy 8 x 3 = 24 seconds
    w = Work(1, 2, 1)
    want = {"1f1b": 3 * 3,  # (p - 1)(F + B)
            "gpipe": 3 * 3,
            "zb-h1": 3 * (1 + 2 - 2),  # (p - 1)(F + B - 2W): a third of 1F1B's
            "dualpipe": 1 * (3 + 2 - 3)}  # (p/2 - 1)(F&B + B - 3W), F&B = F + B
    for schedule, idle in want.items():
        assert bubble_seconds(schedule, 4, w) == idle
        assert bubble_fraction(schedule, 4, 8, w) == pytest.approx(idle / (24 + idle))
        assert max(replayed(schedule, 4, 8, w).ends) == pytest.approx(24 + idle)
    assert bubble_fraction("interleaved", 4, 8, w, virtual=2) == pytest.approx(4.5 / 28.5)
    assert bubble_fraction("1f1b", 4, 8, 3.0) == pytest.approx(9 / 33)  # (p - 1) / (m + p - 1)


def test_zb_h1_bubble_when_the_weight_gradient_is_long():
    # F = 1, B - W = 1, W = 2: F + B - 2W = 0, but a slot of F stays idle per stage
    assert bubble_seconds("zb-h1", 4, Work(1, 3, 2)) == 3 * 1
    assert bubble_seconds("zb-h1", 4, Work(1, 4, 1)) == 3 * 3  # B - W = 3 > F + B - 2W = 2


def test_in_flight_against_the_papers_tables():
    # Narayanan et al.: 1F1B's stage i holds p - i; GPipe all m
    assert [in_flight("1f1b", 4, 8, i) for i in range(4)] == [4, 3, 2, 1]
    assert [in_flight("1f1b", 4, 2, i) for i in range(4)] == [2, 2, 2, 1]
    assert in_flight("gpipe", 4, 8, 3) == 8
    # Korthikanti et al.: interleaved, first stage p (1 + (p - 1) / (p V)) = 4 (1 + 3 / 8)
    assert in_flight("interleaved", 4, 8, 0, virtual=2) == pytest.approx(5.5)
    # Qi et al.: ZB-H1 keeps 1F1B's peak, p; DeepSeek-V3: ZB1P p, DualPipe p + 1, 2x parameters
    assert in_flight("zb-h1", 4, 8, 0) == 4
    assert in_flight("dualpipe", 8, 16, 0) == 9
    assert [parameter_copies(s) for s in ("1f1b", "zb-h1", "dualpipe")] == [1, 1, 2]


@pytest.mark.parametrize("schedule, p, m, want", [
    ("1f1b", 4, 8, [4, 3, 2, 1]), ("gpipe", 3, 5, [5, 5, 5]),
    ("interleaved", 4, 8, [11, 9, 7, 5]),  # chunk-micro-batches: 2 (p - s - 1) + (V - 1) p + 1
    ("zb-h1", 4, 8, [4, 4, 4, 4]),  # stage s: p - s - 1 warm-up + s weight gradients put off + 1
    ("zb-h1", 4, 2, [2, 2, 2, 2]),
    ("dualpipe", 4, 8, [5, 5, 5, 5]), ("dualpipe", 8, 16, [9] * 8)])
def test_replay_holds_what_the_tables_say(schedule, p, m, want):
    v = 2 if schedule == "interleaved" else 1
    peak = replayed(schedule, p, m, Work(1, 2, 1), v).peak
    assert peak == want
    assert peak[0] / v == pytest.approx(in_flight(schedule, p, m, 0, v))


def test_zb_h1_programs_by_hand():
    pipe = build("zb-h1", 4, 4)
    first = [f"{t.kind}{t.micro}" for step in pipe.programs[0] for t in step]
    last = [f"{t.kind}{t.micro}" for step in pipe.programs[3] for t in step]
    assert first == "F0 F1 F2 F3 I0 W0 I1 W1 I2 W2 I3 W3".split()
    assert last == "F0 I0 F1 I1 F2 I2 F3 I3 W0 W1 W2 W3".split()


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (6, 14), (8, 16)])
def test_dualpipe_programs_run_every_task_once(p, m):
    pipe = build("dualpipe", p, m)
    assert pipe.device == tuple(range(p)) + tuple(reversed(range(p)))
    for rank, prog in enumerate(pipe.programs):
        tasks = [t for step in prog for t in step]
        assert len(tasks) == len(set(tasks))
        chunks = {rank, 2 * p - 1 - rank}  # its stage in each direction
        forwards = {(t.chunk, t.micro) for t in tasks if t.kind == "F"}
        assert forwards == {(c, j) for c in chunks for j in range(m)
                            if (j < m // 2) == (c < p)}
        for t in tasks:
            if t.kind in "BI":
                assert Task("F", t.chunk, t.micro) in tasks[:tasks.index(t)]
            if t.kind == "W":
                assert Task("I", t.chunk, t.micro) in tasks[:tasks.index(t)]
        assert {(t.chunk, t.micro) for t in tasks if t.kind in "BI"} == forwards
        pairs = [step for step in prog if len(step) == 2]
        assert pairs and all(a.kind == "F" and b.kind == "B" for a, b in pairs)


def test_links_are_first_come_first_served_by_hand():
    # GPipe, 2 stages, F = B = 1, a 3-second link: stage 0 sends at 1, 2, 3, 4; they land
    # at 4, 7, 10, 13; stage 1 runs F3 [13, 14], then B0..B3 [14, 18], sending back at
    # 15, 16, 17, 18: they land at 18, 21, 24, 27; stage 0's B3 runs [27, 28].
    ran = replay(build("gpipe", 2, 4), [Work(1, 1)] * 2, [0.0, 3.0])
    assert max(ran.ends) == 28
    starts = sorted(r.start for r in ran.transfers if r.where == (0, 1))
    assert starts == [1, 4, 7, 10]


def test_zb_h1_without_a_weight_split_is_1f1b_on_unequal_stages():
    times = [Work(1, 2), Work(1.5, 2.5), Work(0.5, 1)]
    assert step_seconds("zb-h1", times, 6) == step_seconds("1f1b", times, 6) == 5 * 4 + 3 + 4 + 1.5


def test_bad_schedules_are_named():
    with pytest.raises(OptionError, match="unknown schedule 'zb-h3'; allowed: 1f1b, gpipe"):
        build("zb-h3", 4, 8)
    with pytest.raises(OptionError, match="dualpipe needs an even number of stages"):
        build("dualpipe", 3, 12)
    with pytest.raises(OptionError, match="at least twice the stages"):
        build("dualpipe", 4, 6)
    with pytest.raises(OptionError, match="sends inside the stage times"):
        step_seconds("zb-h1", [1.0, 1.0], 4, links=[0.1])
    assert parse("interleaved:4") == ("interleaved", 4) and parse("zb-h1") == ("zb-h1", 1)
    for bad in ("interleaved:0", "interleaved", "1f1b:2", "dual"):
        with pytest.raises(OptionError, match="allowed: 1f1b, gpipe, interleaved:V, zb-h1"):
            parse(bad)


@pytest.mark.parametrize("m", [4, 8, 16])
def test_zb_h1_is_never_priced_under_its_slowest_stages_own_work(m):
    """Three fast stages before a slow one (a head four times a layer): the form, 1F1B's
    with the slowest stage's bubble shrunk, gave 19.5 at m = 8, less than the slow stage's
    own 8 x 3; the replay runs 24.75. At least ``m T`` now, within 7% of the replay."""
    stages = [Work(0.25, 0.5, 0.25)] * 3 + [Work(1.0, 2.0, 1.0)]
    form = step_seconds("zb-h1", stages, m)
    ran = max(replay(build("zb-h1", 4, m), stages, [0.0] * 4).ends)
    assert form >= m * 3.0
    assert form <= ran <= form * 1.07
