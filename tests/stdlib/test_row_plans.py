"""The row ops' plans, called directly on array descriptions (`launches.spec`) and Targets,
no array and no GPU: which schedule, kernels, grids, warps, clusters, constexprs and compile
options a shape gets on sm_80 and sm_90a. GOLDEN pins the launches the entry points made for
these boundary shapes before their choices became plans (recorded from that code with its
`launch` stubbed); the other tests check the plan interface itself (probes, temps, purity)."""
from __future__ import annotations

import importlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

import tilec as tc
from tilec.stdlib_kernels import schedules
from tilec.stdlib_kernels.launches import Launch, StaticProbe, Temp, spec
from tilec.target import Target

softmax = importlib.import_module("tilec.stdlib_kernels.softmax")
norms = importlib.import_module("tilec.stdlib_kernels.norms")
CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")

DTYPES = {"f32": tc.float32, "f16": tc.float16}
TARGETS = {arch: Target.from_arch(arch) for arch in ("sm_80", "sm_90a")}


def _plan(op, shape, dtype, pad, target, probe=None):
    r, n = shape
    d = DTYPES[dtype]
    x = spec(shape, d, (n + pad, 1))
    if op in ("softmax", "log_softmax"):
        return softmax.plan(x, spec(shape, d), op == "log_softmax", target, probe)   # out allocated contiguous
    if op in ("layer_norm", "rms_norm"):
        rms = op == "rms_norm"
        return norms.plan(x, spec(shape, d), spec((n,), d), None if rms else spec((n,), d), rms, not rms, target,
                          probe)
    return CE.plan(x, spec((r,), tc.int64), "mean", target)


def _records(launches):
    return [(ln.name, ln.grid, ln.num_warps, ln.cluster, dict(sorted(ln.constexprs)), dict(ln.options))
            for ln in launches]


SCHEDULE_OF = {"softmax_tile_kernel": schedules.ONE_TILE, "norm_tile_kernel": schedules.ONE_TILE,
               "ce_tile_kernel": schedules.ONE_TILE, "softmax_loop_kernel": schedules.LOOPED,
               "norm_loop_kernel": schedules.LOOPED, "softmax_partial_kernel": schedules.SPLIT,
               "softmax_finish_kernel": schedules.SPLIT, "ce_combine_kernel": schedules.SPLIT,
               "softmax_cluster_kernel": schedules.CLUSTER, "norm_cluster_kernel": schedules.CLUSTER,
               "softmax_cluster_loop_kernel": schedules.PERSISTENT_CLUSTER,
               "norm_cluster_loop_kernel": schedules.PERSISTENT_CLUSTER, "norm_chunks_kernel": schedules.CHUNK_TILES,
               "shift_tables_kernel": "shift_tables", "ce_reduce_kernel": "reduce"}


def _schedule(record):
    name, consts = record[0], record[4]
    if name == "ce_loop_kernel":
        return schedules.SPLIT if consts["SPLIT"] else schedules.LOOPED
    return SCHEDULE_OF[name]


# (arch, op, (rows, columns), dtype, row padding in elements, the launches as _records gives them)
GOLDEN = [
    ('sm_80', 'softmax', (8, 1024), 'f32', 0, [('softmax_tile_kernel', (4,), 4, 1, {'BLOCK': 1024, 'LOG': False, 'REALIGN': False, 'ROWS': 2, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_80', 'softmax', (1000, 1025), 'f16', 0, [('softmax_tile_kernel', (1000,), 1, 1, {'BLOCK': 512, 'LOG': False, 'REALIGN': False, 'ROWS': 1, 'TILES': 3, 'WINDOW': 16}, {})]),
    ('sm_80', 'softmax', (1000, 16384), 'f32', 0, [('softmax_tile_kernel', (1000,), 16, 1, {'BLOCK': 16384, 'LOG': False, 'REALIGN': False, 'ROWS': 1, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_80', 'softmax', (1000, 16385), 'f32', 0, [('softmax_loop_kernel', (1000,), 8, 1, {'BLOCK': 4096, 'LOG': False, 'REALIGN': False, 'WINDOW': 8}, {})]),
    ('sm_80', 'softmax', (4, 16385), 'f32', 0, [('softmax_partial_kernel', (4, 2), 8, 1, {'BLOCK': 4096, 'WINDOW': 8}, {}), ('softmax_finish_kernel', (4, 2), 8, 1, {'BLOCK': 4096, 'CHUNKS': 2, 'LOG': False, 'REALIGN': False, 'WINDOW': 8}, {'dependent_launch': True})]),
    ('sm_80', 'softmax', (263, 20000), 'f32', 0, [('softmax_partial_kernel', (263, 2), 8, 1, {'BLOCK': 4096, 'WINDOW': 0}, {}), ('softmax_finish_kernel', (263, 2), 8, 1, {'BLOCK': 4096, 'CHUNKS': 2, 'LOG': False, 'REALIGN': False, 'WINDOW': 0}, {'dependent_launch': True})]),
    ('sm_80', 'softmax', (264, 20000), 'f32', 0, [('softmax_loop_kernel', (264,), 8, 1, {'BLOCK': 4096, 'LOG': False, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_80', 'log_softmax', (1024, 262144), 'f16', 0, [('softmax_loop_kernel', (1024,), 8, 1, {'BLOCK': 4096, 'LOG': True, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_80', 'softmax', (1024, 262144), 'f32', 0, [('softmax_loop_kernel', (1024,), 8, 1, {'BLOCK': 4096, 'LOG': False, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_80', 'softmax', (4096, 50257), 'f16', 0, [('softmax_loop_kernel', (4096,), 8, 1, {'BLOCK': 4096, 'LOG': False, 'REALIGN': False, 'WINDOW': 16}, {})]),
    ('sm_80', 'softmax', (100, 4097), 'f16', 3, [('softmax_tile_kernel', (100,), 4, 1, {'BLOCK': 2048, 'LOG': False, 'REALIGN': True, 'ROWS': 1, 'TILES': 3, 'WINDOW': 16}, {})]),
    ('sm_80', 'softmax', (2048, 151936), 'f16', 0, [('softmax_loop_kernel', (2048,), 8, 1, {'BLOCK': 4096, 'LOG': False, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_80', 'layer_norm', (8, 1024), 'f32', 0, [('norm_tile_kernel', (4,), 4, 1, {'BLOCK': 1024, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 2, 'STATS': True, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_80', 'layer_norm', (4096, 65536), 'f16', 0, [('norm_loop_kernel', (108,), 16, 1, {'BLOCK': 16384, 'HAS_B': True, 'HAS_W': True, 'RMS': False, 'STATS': True}, {})]),
    ('sm_80', 'rms_norm', (4096, 65536), 'f32', 0, [('norm_loop_kernel', (4096,), 8, 1, {'BLOCK': 4096, 'HAS_B': False, 'HAS_W': True, 'RMS': True, 'STATS': False}, {})]),
    ('sm_80', 'layer_norm', (4096, 20001), 'f16', 0, [('norm_loop_kernel', (108,), 16, 1, {'BLOCK': 16384, 'HAS_B': True, 'HAS_W': True, 'RMS': False, 'STATS': True}, {})]),
    ('sm_80', 'layer_norm', (1024, 65536), 'f32', 0, [('norm_loop_kernel', (1024,), 8, 1, {'BLOCK': 4096, 'HAS_B': True, 'HAS_W': True, 'RMS': False, 'STATS': True}, {})]),
    ('sm_80', 'rms_norm', (1024, 65536), 'f16', 0, [('norm_loop_kernel', (1024,), 8, 1, {'BLOCK': 4096, 'HAS_B': False, 'HAS_W': True, 'RMS': True, 'STATS': False}, {})]),
    ('sm_80', 'layer_norm', (8200, 1025), 'f16', 0, [('shift_tables_kernel', (16, 2), 2, 1, {'BLOCK': 1024, 'HAS_B': True, 'HAS_W': True}, {}), ('norm_tile_kernel', (8200,), 2, 1, {'BLOCK': 512, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 1, 'SHIFTED': True, 'STATS': True, 'TILES': 3, 'WINDOW': 16}, {'dependent_launch': True})]),
    ('sm_80', 'layer_norm', (16384, 16384), 'f16', 0, [('norm_tile_kernel', (16384,), 16, 1, {'BLOCK': 4096, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 1, 'STATS': True, 'TILES': 4, 'WINDOW': 0}, {})]),
    ('sm_80', 'cross_entropy', (64, 32000), 'f16', 0, [('ce_loop_kernel', (64, 4), 8, 1, {'BLOCK': 2048, 'SPLIT': True, 'WINDOW': 0}, {}), ('ce_combine_kernel', (64,), 1, 1, {'CHUNKS': 4}, {'dependent_launch': True}), ('ce_reduce_kernel', (1,), 1, 1, {'BLOCK': 64, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_80', 'cross_entropy', (4096, 32000), 'f16', 0, [('ce_loop_kernel', (4096, 1), 32, 1, {'BLOCK': 8192, 'SPLIT': False, 'WINDOW': 0}, {}), ('ce_reduce_kernel', (1,), 8, 1, {'BLOCK': 4096, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_80', 'cross_entropy', (100, 1000), 'f32', 0, [('ce_tile_kernel', (50,), 4, 1, {'BLOCK': 1024, 'ROWS': 2, 'WINDOW': 0}, {}), ('ce_reduce_kernel', (1,), 1, 1, {'BLOCK': 128, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_80', 'cross_entropy', (2048, 128257), 'f16', 0, [('ce_loop_kernel', (2048, 1), 16, 1, {'BLOCK': 4096, 'SPLIT': False, 'WINDOW': 16}, {}), ('ce_reduce_kernel', (1,), 4, 1, {'BLOCK': 2048, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_90a', 'softmax', (8, 1024), 'f32', 0, [('softmax_tile_kernel', (4,), 4, 1, {'BLOCK': 1024, 'LOG': False, 'REALIGN': False, 'ROWS': 2, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_90a', 'softmax', (1000, 1025), 'f16', 0, [('softmax_tile_kernel', (1000,), 1, 1, {'BLOCK': 512, 'LOG': False, 'REALIGN': False, 'ROWS': 1, 'TILES': 3, 'WINDOW': 16}, {})]),
    ('sm_90a', 'softmax', (1000, 16384), 'f32', 0, [('softmax_tile_kernel', (1000,), 16, 1, {'BLOCK': 16384, 'LOG': False, 'REALIGN': False, 'ROWS': 1, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_90a', 'softmax', (1000, 16385), 'f32', 0, [('softmax_cluster_kernel', (3000,), 4, 3, {'BLOCK': 1024, 'C': 3, 'LOG': False, 'REALIGN': False, 'TILES': 6, 'WINDOW': 8}, {'min_programs_per_sm': 8})]),
    ('sm_90a', 'softmax', (4, 16385), 'f32', 0, [('softmax_partial_kernel', (4, 2), 8, 1, {'BLOCK': 4096, 'WINDOW': 8}, {}), ('softmax_finish_kernel', (4, 2), 8, 1, {'BLOCK': 4096, 'CHUNKS': 2, 'LOG': False, 'REALIGN': False, 'WINDOW': 8}, {'dependent_launch': True})]),
    ('sm_90a', 'softmax', (263, 20000), 'f32', 0, [('softmax_cluster_kernel', (1052,), 4, 4, {'BLOCK': 1024, 'C': 4, 'LOG': False, 'REALIGN': False, 'TILES': 5, 'WINDOW': 0}, {'min_programs_per_sm': 8})]),
    ('sm_90a', 'softmax', (264, 20000), 'f32', 0, [('softmax_cluster_kernel', (1056,), 4, 4, {'BLOCK': 1024, 'C': 4, 'LOG': False, 'REALIGN': False, 'TILES': 5, 'WINDOW': 0}, {'min_programs_per_sm': 8})]),
    ('sm_90a', 'log_softmax', (1024, 262144), 'f16', 0, [('softmax_cluster_loop_kernel', (120,), 16, 8, {'BLOCK': 32768, 'C': 8, 'LOG': True, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_90a', 'softmax', (1024, 262144), 'f32', 0, [('softmax_cluster_loop_kernel', (120,), 32, 8, {'BLOCK': 32768, 'C': 8, 'EVEN': True, 'LOG': False, 'REALIGN': False, 'STAGES': 2, 'WINDOW': 0}, {})]),
    ('sm_90a', 'softmax', (4096, 50257), 'f16', 0, [('softmax_cluster_kernel', (28672,), 4, 7, {'BLOCK': 1024, 'C': 7, 'LOG': False, 'REALIGN': False, 'TILES': 8, 'WINDOW': 16}, {'min_programs_per_sm': 8})]),
    ('sm_90a', 'softmax', (100, 4097), 'f16', 3, [('softmax_tile_kernel', (100,), 4, 1, {'BLOCK': 2048, 'LOG': False, 'REALIGN': True, 'ROWS': 1, 'TILES': 3, 'WINDOW': 16}, {})]),
    ('sm_90a', 'softmax', (2048, 151936), 'f16', 0, [('softmax_cluster_loop_kernel', (75,), 16, 5, {'BLOCK': 32768, 'C': 5, 'LOG': False, 'REALIGN': False, 'WINDOW': 0}, {})]),
    ('sm_90a', 'layer_norm', (8, 1024), 'f32', 0, [('norm_tile_kernel', (4,), 4, 1, {'BLOCK': 1024, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 2, 'STATS': True, 'TILES': 1, 'WINDOW': 0}, {})]),
    ('sm_90a', 'layer_norm', (4096, 65536), 'f16', 0, [('norm_cluster_loop_kernel', (120,), 4, 8, {'BLOCK': 8192, 'C': 8, 'EVEN': True, 'HAS_B': True, 'HAS_W': True, 'RMS': False, 'STAGES': 3, 'STATS': True}, {'min_programs_per_sm': 2})]),
    ('sm_90a', 'rms_norm', (4096, 65536), 'f32', 0, [('norm_cluster_loop_kernel', (60,), 16, 4, {'BLOCK': 16384, 'C': 4, 'EVEN': True, 'HAS_B': False, 'HAS_W': True, 'RMS': True, 'STAGES': 1, 'STATS': False}, {})]),
    ('sm_90a', 'layer_norm', (4096, 20001), 'f16', 0, [('shift_tables_kernel', (16, 20), 2, 1, {'BLOCK': 1024, 'HAS_B': True, 'HAS_W': True}, {}), ('norm_chunks_kernel', (16384,), 4, 4, {'BLOCK': 1024, 'C': 4, 'HAS_B': True, 'HAS_W': True, 'ONE_PASS': True, 'REALIGN': False, 'REREAD': False, 'RMS': False, 'SHIFTED': True, 'STATS': True, 'TILES': 5, 'WINDOW': 16}, {'min_programs_per_sm': 8, 'dependent_launch': True})]),
    ('sm_90a', 'layer_norm', (1024, 65536), 'f32', 0, [('norm_cluster_loop_kernel', (60,), 16, 4, {'BLOCK': 16384, 'C': 4, 'EVEN': True, 'HAS_B': True, 'HAS_W': True, 'RMS': False, 'STAGES': 2, 'STATS': True}, {})]),
    ('sm_90a', 'rms_norm', (1024, 65536), 'f16', 0, [('norm_cluster_loop_kernel', (60,), 16, 4, {'BLOCK': 16384, 'C': 4, 'EVEN': True, 'HAS_B': False, 'HAS_W': True, 'RMS': True, 'STAGES': 1, 'STATS': False}, {})]),
    ('sm_90a', 'layer_norm', (8200, 1025), 'f16', 0, [('shift_tables_kernel', (16, 2), 2, 1, {'BLOCK': 1024, 'HAS_B': True, 'HAS_W': True}, {}), ('norm_tile_kernel', (8200,), 2, 1, {'BLOCK': 512, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 1, 'SHIFTED': True, 'STATS': True, 'TILES': 3, 'WINDOW': 16}, {'dependent_launch': True})]),
    ('sm_90a', 'layer_norm', (16384, 16384), 'f16', 0, [('norm_tile_kernel', (16384,), 16, 1, {'BLOCK': 4096, 'HAS_B': True, 'HAS_W': True, 'REALIGN': False, 'RMS': False, 'ROWS': 1, 'STATS': True, 'TILES': 4, 'WINDOW': 0}, {})]),
    ('sm_90a', 'cross_entropy', (64, 32000), 'f16', 0, [('ce_loop_kernel', (64, 4), 8, 1, {'BLOCK': 2048, 'SPLIT': True, 'WINDOW': 0}, {}), ('ce_combine_kernel', (64,), 1, 1, {'CHUNKS': 4}, {'dependent_launch': True}), ('ce_reduce_kernel', (1,), 1, 1, {'BLOCK': 64, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_90a', 'cross_entropy', (4096, 32000), 'f16', 0, [('ce_loop_kernel', (4096, 1), 32, 1, {'BLOCK': 8192, 'SPLIT': False, 'WINDOW': 0}, {}), ('ce_reduce_kernel', (1,), 8, 1, {'BLOCK': 4096, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_90a', 'cross_entropy', (100, 1000), 'f32', 0, [('ce_tile_kernel', (50,), 4, 1, {'BLOCK': 1024, 'ROWS': 2, 'WINDOW': 0}, {}), ('ce_reduce_kernel', (1,), 1, 1, {'BLOCK': 128, 'MEAN': True}, {'dependent_launch': True})]),
    ('sm_90a', 'cross_entropy', (2048, 128257), 'f16', 0, [('ce_loop_kernel', (2048, 1), 16, 1, {'BLOCK': 4096, 'SPLIT': False, 'WINDOW': 16}, {}), ('ce_reduce_kernel', (1,), 4, 1, {'BLOCK': 2048, 'MEAN': True}, {'dependent_launch': True})]),
]


@pytest.mark.parametrize("arch, op, shape, dtype, pad, want", GOLDEN,
                         ids=[f"{g[0]}-{g[1]}-{g[2][0]}x{g[2][1]}-{g[3]}-pad{g[4]}" for g in GOLDEN])
def test_boundary_shapes_plan_as_before(arch, op, shape, dtype, pad, want):
    got = _plan(op, shape, dtype, pad, TARGETS[arch])
    assert _records(got) == want
    assert [ln.schedule for ln in got] == [_schedule(w) for w in want]


@pytest.mark.parametrize("n", [16385, 20001, 50257, 65536, 131072, 262144])
@pytest.mark.parametrize("op", ["softmax", "layer_norm", "rms_norm"])
def test_no_clusters_on_sm_80(op, n):
    for rows in (1, 264, 4096):
        got = _plan(op, (rows, n), "f16", 0, TARGETS["sm_80"])
        assert all(ln.cluster == 1 for ln in got)
        assert {ln.schedule for ln in got} <= {schedules.LOOPED, schedules.SPLIT}


def test_plans_are_pure_values():
    a = _plan("softmax", (4, 16385), "f32", 0, TARGETS["sm_90a"])
    b = _plan("softmax", (4, 16385), "f32", 0, TARGETS["sm_90a"])
    assert a == b and hash(a[0]) == hash(b[0])
    with pytest.raises(AttributeError):
        a[0].grid = (1,)


def test_split_rows_declare_their_partials():
    part, finish = _plan("softmax", (4, 16385), "f32", 0, TARGETS["sm_80"])
    want = (Temp("m_part", (4, 2), tc.float32), Temp("s_part", (4, 2), tc.float32))
    assert part.temps == want and finish.temps == ()
    assert part.args == ("x", "m_part", "s_part", 3) and finish.args == ("x", "out", "m_part", "s_part", 3)


class _Resident(StaticProbe):
    def __init__(self, target, resident):
        super().__init__(target)
        self.resident, self.asked = resident, []

    def resident_clusters(self, launch):
        self.asked.append((launch.name, launch.cluster, launch.consts["BLOCK"]))
        return self.resident


@pytest.mark.parametrize("resident, grid", [(15, (15 * 8,)), (2000, (1024 * 8,)), (3, (3 * 8,))])
def test_the_probe_sizes_a_persistent_grid(resident, grid):
    probe = _Resident(TARGETS["sm_90a"], resident)
    (ln,) = _plan("softmax", (1024, 262144), "f32", 0, TARGETS["sm_90a"], probe)
    assert (ln.schedule, ln.grid, ln.cluster) == (schedules.PERSISTENT_CLUSTER, grid, 8)
    assert probe.asked == [("softmax_cluster_loop_kernel", 8, 32768)]


def test_a_probe_that_cannot_tell_gives_one_row_per_cluster():
    (ln,) = _plan("softmax", (1024, 262144), "f32", 0, TARGETS["sm_90a"], _Resident(TARGETS["sm_90a"], None))
    assert (ln.name, ln.schedule, ln.grid) == ("softmax_cluster_kernel", schedules.CLUSTER, (1024 * 8,))
    (ln,) = _plan("rms_norm", (4096, 65536), "f32", 0, TARGETS["sm_90a"], _Resident(TARGETS["sm_90a"], None))
    assert (ln.name, ln.schedule, ln.grid) == ("norm_cluster_kernel", schedules.CLUSTER, (4096 * 4,))


@pytest.mark.parametrize("per_sm, spills, reread", [(5, 0, False), (4, 0, True), (6, 8, True)])
def test_the_probe_decides_whether_norm_chunks_are_read_again(per_sm, spills, reread):
    class Probe(StaticProbe):
        def resources(self, launch):
            return SimpleNamespace(max_blocks_per_sm=per_sm, spills=spills)
    # 2-byte layer_norm rows of 50257 (off sectors: w and b from shift tables first): 7 programs of
    # 8 tiles, more than HOLD_MAX_C
    tables, ln = _plan("layer_norm", (4096, 50257), "f16", 0, TARGETS["sm_90a"], Probe(TARGETS["sm_90a"]))
    assert tables.schedule == "shift_tables" and ln.args[1:3] == ("w_table", "b_table")
    assert (ln.schedule, ln.cluster, ln.consts["TILES"], ln.consts["ONE_PASS"]) == (schedules.CHUNK_TILES, 7, 8, True)
    assert ln.consts["REREAD"] is reread


def test_a_part_takes_its_own_values_over_its_family_table():
    # tuning.PART_OVERRIDES: the H200 measured a floor of 3 programs per SM for 2-byte
    # layer_norm clusters of 8 and 4096-wide steps at 16 warps for cross_entropy's rows on
    # sectors, where the family's (H100) numbers are 2 and 8192 at 32; the rest is the family's
    from tilec.stdlib_kernels import tuning
    h100, h200 = TARGETS["sm_90a"], replace(TARGETS["sm_90a"], device="NVIDIA H200")
    t100, t200 = tuning.row_tuning(h100), tuning.row_tuning(h200)
    assert t200.family == "sm_90" and t200.softmax == t100.softmax and t200.decode == t100.decode
    assert (t100.norm.ln_eight_chunks_programs_per_sm, t200.norm.ln_eight_chunks_programs_per_sm) == (2, 3)
    assert (t200.cross_entropy.wide_loop_block, t200.cross_entropy.wide_loop_warps) == (4096, 16)
    ln100, = _plan("layer_norm", (4096, 65536), "f16", 0, h100, StaticProbe(h100))
    ln200, = _plan("layer_norm", (4096, 65536), "f16", 0, h200, StaticProbe(h200))
    assert ln100.kernel is ln200.kernel and ln100.cluster == ln200.cluster == 8
    assert (dict(ln100.options), dict(ln200.options)) == ({"min_programs_per_sm": 2}, {"min_programs_per_sm": 3})
    ce100, ce200 = _plan("cross_entropy", (16384, 32000), "f16", 0, h100)[0], \
        _plan("cross_entropy", (16384, 32000), "f16", 0, h200)[0]
    assert (ce100.num_warps, ce100.consts["BLOCK"], ce200.num_warps, ce200.consts["BLOCK"]) == (32, 8192, 16, 4096)
    # a swapped family table still applies under the part's values
    saved = tuning.TABLES["sm_90"]
    tuning.TABLES["sm_90"] = replace(saved, norm=replace(saved.norm, ln_eight_chunks_warps=8))
    try:
        t = tuning.row_tuning(h200).norm
    finally:
        tuning.TABLES["sm_90"] = saved
    assert (t.ln_eight_chunks_warps, t.ln_eight_chunks_programs_per_sm) == (8, 3)


def test_tables_per_target_family():
    from tilec.stdlib_kernels import tuning
    assert tuning.row_tuning(TARGETS["sm_90a"]).family == "sm_90"
    assert tuning.row_tuning(TARGETS["sm_80"]).family == "sm_80"
    # a table entry is what the plan reads: fewer split rows, whole rows sooner
    few = replace(tuning.TABLES["sm_80"], softmax=replace(tuning.TABLES["sm_80"].softmax, split_rows=100))
    launches_before = _plan("softmax", (200, 20000), "f32", 0, TARGETS["sm_80"])
    tuning.TABLES["sm_80"], saved = few, tuning.TABLES["sm_80"]
    try:
        launches_after = _plan("softmax", (200, 20000), "f32", 0, TARGETS["sm_80"])
    finally:
        tuning.TABLES["sm_80"] = saved
    assert [ln.schedule for ln in launches_before] == [schedules.SPLIT] * 2
    assert [ln.schedule for ln in launches_after] == [schedules.LOOPED]


def test_launch_of_keeps_the_keyword_order_of_constexprs():
    ln = Launch.of(softmax.softmax_tile_kernel, [3], ["x", "out"], 2, LOG=True, ROWS=1, BLOCK=64)
    assert ln.grid == (3,) and ln.args == ("x", "out") and ln.consts == {"LOG": True, "ROWS": 1, "BLOCK": 64}


def test_softmax_along_another_dimension_plans_its_strips():
    softmax_dim = importlib.import_module("tilec.stdlib_kernels.softmax_dim")
    h100 = TARGETS["sm_90a"]
    (tile,) = softmax_dim.plan(spec((4, 300, 70), tc.float32), spec((4, 300, 70), tc.float32), 1, False, h100)
    assert (tile.name, tile.schedule, tile.args) == ("softmax_dim_tile_kernel", schedules.ONE_TILE, ("x", "out"))
    # 3000 rows over 300 columns: two strips of 256, each split; the partials' rows padded to 32 bytes
    stats, loop = softmax_dim.plan(spec((3000, 300), tc.float32), spec((3000, 300), tc.float32), 0, True, h100)
    assert [stats.schedule, loop.schedule] == [schedules.SPLIT] * 2 and dict(loop.options) == {"dependent_launch": True}
    m_part = stats.temps[0]
    splits = stats.grid[2]
    assert m_part.shape == (1, splits, 304) and m_part.view == ((1, splits, 300), (splits * 304, 304, 1))
    assert softmax_dim.plan(spec((0, 5), tc.float32), spec((0, 5), tc.float32), 0, False, h100) == []


def test_every_launch_a_probe_sees_declares_the_temps_it_reads():
    # A device probe compiles a launch before any launch of the plan ran: the chunk kernel that
    # reads w and b from shifted tables must declare those tables itself (it raised KeyError
    # 'w_table' on an H200 for f32 layer_norm rows of 20001).
    seen = []

    class Probe(StaticProbe):
        def resources(self, launch):
            seen.append(launch)
            return SimpleNamespace(max_blocks_per_sm=5, spills=0)

        def resident_clusters(self, launch):
            seen.append(launch)
            return None

    for shape, dtype in (((450, 20001), "f32"), ((4096, 50257), "f16"), ((64, 50257), "f32")):
        plan = _plan("layer_norm", shape, dtype, 0, TARGETS["sm_90a"], Probe(TARGETS["sm_90a"]))
        for ln in seen + list(plan):
            declared = {t.name for t in ln.temps}
            names = {a for a in ln.args if isinstance(a, str) and a.endswith(("_table", "_part"))}
            assert names <= declared, (ln.name, names, declared)
        seen.clear()
