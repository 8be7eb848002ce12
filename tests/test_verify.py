"""pase verify: reading collectives from HLO text, and predicted vs compiled bytes.

The HLO tests read hand-written lines (no jax); expected groups and bytes are
worked out by hand from the printed forms. The compile tests export strategies,
compile them for fake CPU devices in one subprocess (never run) and compare.
"""
from __future__ import annotations

import importlib.util
import os

import pytest

from pase.export.hlo import (
    HloError,
    attribution,
    parse_collectives,
    parse_groups,
    shape_arrays,
    split_merged,
)

HEAD = "HloModule jit_loss_fn, is_scheduled=true, num_partitions=8\n"


def one(line: str, devices=None):
    found = parse_collectives(HEAD + line, devices)
    assert len(found) == 1, found
    return found[0]


# -- replica groups -------------------------------------------------------------------

def test_explicit_groups():
    assert parse_groups("{{0,1},{2,3}}") == ((0, 1), (2, 3))
    assert parse_groups("{{0,4},{1,5},{2,6},{3,7}}") == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_iota_groups():
    # iota(8) as [2,4]: rows are the groups
    assert parse_groups("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    # iota(8) as [2,4], transposed to [4,2]: columns of the [2,4] grid
    assert parse_groups("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    # [2,2,2] transposed (0,2,1), read as 4 groups of 2
    assert parse_groups("[4,2]<=[2,2,2]T(0,2,1)") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert parse_groups("[1,8]<=[8]") == (tuple(range(8)),)


def test_mesh_axes_groups():
    # devices 0..7 on a 2x4 mesh, row-major: 'a' picks the column, 'b' the row
    assert parse_groups("mesh['a'=2,'b'=4] {'a'}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_groups("mesh['a'=2,'b'=4] {'b'}") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_groups("mesh['a'=2,'b'=4] {'a','b'}") == (tuple(range(8)),)
    assert parse_groups("mesh[a=8,b=1] {a}") == (tuple(range(8)),)
    # sub-axis a:(2)2 of a=8: the middle factor of [2, 2, 2]
    assert parse_groups("mesh['a'=8] {'a':(2)2}") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert parse_groups("mesh['a'=8] {'a':(1)2,'a':(4)2}") == ((0, 1, 4, 5), (2, 3, 6, 7))


def test_mesh_with_device_ids():
    # mesh positions hold devices [0,4,1,5,2,6,3,7] (iota [2,4] transposed): 'a'=4 rows of 'b'=2
    ids = "mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'b'}"
    assert parse_groups(ids) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert parse_groups("mesh['a'=4,'b'=2], device_ids=([8]<=[2,4]T(1,0)) {'a'}") == (
        (0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_groups("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}") == ((3, 2), (1, 0))


def test_bad_groups_are_one_line_errors():
    for text in ("[3,3]<=[8]", "mesh['a'=2] {'z'}", "mesh['a'=4], device_ids=(0,1) {'a'}",
                 "[4,2]<=[2,4]T(0,0)"):
        with pytest.raises(HloError) as info:
            parse_groups(text)
        assert "\n" not in str(info.value)


# -- shapes and bytes -------------------------------------------------------------------

def test_shapes_and_element_types():
    assert shape_arrays("f32[32,64]{1,0}") == [("f32", (32, 64))]
    assert shape_arrays("(bf16[2,3]{1,0}, /*index=1*/s32[4]{0}, pred[])") == [
        ("bf16", (2, 3)), ("s32", (4,)), ("pred", ())]
    with pytest.raises(HloError, match="unknown HLO element type 'q7'"):
        shape_arrays("q7[2]")


@pytest.mark.parametrize("dtype, size", [("f32", 4), ("bf16", 2), ("f16", 2), ("f64", 8),
                                         ("s32", 4), ("pred", 1), ("u8", 1), ("s64", 8)])
def test_all_reduce_bytes_per_element_type(dtype, size):
    c = one(f"  %ar = {dtype}[16,4]{{1,0}} all-reduce(%x), channel_id=1, replica_groups={{{{0,1,2,3}},"
            f"{{4,5,6,7}}}}, use_global_device_ids=true, to_apply=%add")
    n = 64 * size
    assert (c.kind, c.buffer_bytes, c.group_size) == ("all-reduce", n, 4)
    assert c.bytes == pytest.approx(2 * 3 / 4 * n)


def test_each_kind_by_the_convention():
    ag = one("  %ag = f32[32,64]{1,0} all-gather(%x), channel_id=2, replica_groups=[1,8]<=[8], "
             "dimensions={0}, use_global_device_ids=true")
    assert (ag.buffer_bytes, ag.group_size, ag.bytes) == (8192, 8, 7 / 8 * 8192)
    rs = one("  %rs = f32[4,64]{1,0} reduce-scatter(%x), channel_id=3, replica_groups=[2,4]<=[8], "
             "dimensions={0}, to_apply=%add")
    assert (rs.buffer_bytes, rs.group_size, rs.bytes) == (4 * 4 * 64 * 4, 4, 3 / 4 * 4096)
    a2a = one("  %a2a = (f32[1,4,8]{2,1,0}, f32[1,4,8]{2,1,0}) all-to-all(%a, %b), channel_id=4, "
              "replica_groups={{0,1},{2,3},{4,5},{6,7}}")
    assert (a2a.buffer_bytes, a2a.group_size, a2a.bytes) == (256, 2, 128)
    cp = one("  %cp = f32[2,8,16]{2,1,0} collective-permute(%x), channel_id=5, "
             "source_target_pairs={{0,0},{4,1},{1,2},{5,3},{2,4},{6,5},{3,6},{7,7}}")
    assert (cp.kind, cp.buffer_bytes, cp.bytes) == ("collective-permute", 1024, 1024)
    assert cp.groups[:2] == ((0, 0), (4, 1))
    idle = one("  %cp = f32[8]{0} collective-permute(%x), source_target_pairs={{0,0},{1,1}}")
    assert idle.bytes == 0


def test_empty_groups_span_every_device():
    c = one("  %ar = f32[10]{0} all-reduce(%x), replica_groups={}, to_apply=%add")
    assert c.group_size == 8 and c.bytes == pytest.approx(2 * 7 / 8 * 40)
    with pytest.raises(HloError, match="no device count"):
        parse_collectives("%ar = f32[10]{0} all-reduce(%x), replica_groups={}, to_apply=%add")


def test_async_pairs_count_once():
    text = HEAD + "\n".join([
        "  %ars = f32[64]{0} all-reduce-start(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add",
        "  %ard = f32[64]{0} all-reduce-done(%ars)",
        "  %ags = (f32[4,8]{1,0}, f32[8,8]{1,0}) all-gather-start(%y), channel_id=2, "
        "replica_groups={{0,1}}, dimensions={0}",
        "  %agd = f32[8,8]{1,0} all-gather-done(%ags)",
        "  %cps = (f32[16]{0}, f32[16]{0}, u32[], u32[]) collective-permute-start(%z), channel_id=3, "
        "source_target_pairs={{0,1},{1,0}}",
        "  %cpd = f32[16]{0} collective-permute-done(%cps)",
        "  %add = f32[64]{0} add(%ard, %ard)",
    ])
    found = parse_collectives(text)
    assert [(c.kind, c.buffer_bytes) for c in found] == [
        ("all-reduce", 256), ("all-gather", 256), ("collective-permute", 64)]
    assert [c.bytes for c in found] == [256, 128, 64]


# -- attribution ------------------------------------------------------------------------

def test_attribution_from_op_name():
    assert attribution("jit(loss_fn)/jvp(op/fc2)/...k,kn->...n/dot_general") == ("op", "fc2", "forward")
    assert attribution("jit(loss_fn)/transpose(jvp(op/fc2))/...k,kn->...n/dot_general") == (
        "op", "fc2", "backward")
    assert attribution("jit(loss_fn)/jvp(op/fc3)/edge/fc2->fc3/sharding_constraint") == (
        "edge", "fc2->fc3", "forward")
    assert attribution("jit(loss_fn)/transpose(jvp(op/enc0.attn.qkv))/out/enc0.attn.qkv/x") == (
        "out", "enc0.attn.qkv", "backward")
    assert attribution("jit(loss_fn)/add") == (None, None, "forward")


def test_merged_names_split_per_tuple_element():
    merged = ("jit(loss_fn)/transpose(jvp(op/(dec0.norm))/reduce_sum:enc0.norm))/reduce_sum:"
              "enc0.fc))/dot_general)")
    assert split_merged(merged) == ["jit(loss_fn)/transpose(jvp(op/dec0.norm))/reduce_sum",
                                    "jit(loss_fn)/transpose(jvp(op/enc0.norm))/reduce_sum",
                                    "jit(loss_fn)/transpose(jvp(op/enc0.fc))/dot_general"]
    assert split_merged("jit(f)/(jvp(op/loss)/gather:transpose(jvp(op/loss))/reduce_sum)") == [
        "jit(f)/jvp(op/loss)/gather", "jit(f)/transpose(jvp(op/loss))/reduce_sum"]
    line = ("  %ar = (f32[], f32[2,8]{1,0}) all-reduce(%a, %b), replica_groups=[4,2]<=[8], "
            "to_apply=%add, metadata={op_name=\"jit(f)/(jvp(op/loss)/reduce_sum:"
            "transpose(jvp(op/fc1))/dot_general)\" stack_frame_id=3}")
    parts = parse_collectives(HEAD + line)
    assert [(c.key, c.direction, c.buffer_bytes) for c in parts] == [
        ("op/loss", "forward", 4), ("op/fc1", "backward", 64)]
    assert sum(c.bytes for c in parts) == pytest.approx((4 + 64) * 2 * 1 / 2)


# -- compiled programs (jax in a subprocess) --------------------------------------------

def need_jax() -> None:
    if importlib.util.find_spec("jax") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("jax is not installed, but CI installs pase[all]")
        pytest.skip("jax is not installed (pip install \"pase[jax]\")")


def mlp(p: int) -> dict:
    return {"batch": 2 * p, "width": 4 * p, "classes": 10}


# A matmul (fc2 of the MLP) split on data, output, reduction and in 2-D; the two-layer
# MLP (fc1, fc2) under Megatron and under each mismatched pair.
def mlp_cases(p: int) -> dict[str, dict]:
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


def _check(reports, labels, exceptions=()):
    failures = []
    for label, r in zip(labels, reports):
        for row in r["rows"]:
            if not row["within"] and (label, row["row"]) not in exceptions:
                failures.append(f"{label} p={r['devices']} {row['row']}: predicted {row['predicted']:.0f} "
                                f"compiled {row['compiled']:.0f}")
        if not r["total"]["within"] and not any(lab == label for lab, _ in exceptions):
            failures.append(f"{label} p={r['devices']} total: {r['total']}")
    assert not failures, failures


@pytest.mark.parametrize("ps", [(8, 16)])
def test_matmuls_and_mlps_agree_with_xla(ps):
    need_jax()
    from pase.export.verify import verify_many

    cases, labels = [], []
    for p in ps:
        for label, strategy in mlp_cases(p).items():
            cases.append({"model": "mlp", "strategy": strategy, "devices": p, "model_options": mlp(p)})
            labels.append(label)
    reports = verify_many(cases)
    _check(reports, labels)
    # something is compared: every case but none has collectives
    assert all(r["total"]["compiled"] > 0 for r in reports)


@pytest.mark.slow
def test_matmuls_and_mlps_agree_with_xla_at_64():
    test_matmuls_and_mlps_agree_with_xla((64,))
