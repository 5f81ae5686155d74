"""Which stdlib launches go as dependents of the launch before them (`_common.DEPENDENT`):
the merges of partials that only follow a launch of the same op, never a first launch."""
from __future__ import annotations

import importlib

import numpy as np

import tilec as tc
import tilec.stdlib_kernels as sk
import pytest
from tilec.stdlib_kernels.launches import spec
from tilec.target import Target
from launch_spy import retune, spy_launches

CE = importlib.import_module("tilec.stdlib_kernels.cross_entropy")
SOFTMAX = importlib.import_module("tilec.stdlib_kernels.softmax")
DEPENDENT = {"dependent_launch": True}
TARGETS = [Target.from_arch("sm_80"), Target.from_arch("sm_90a")]


def _launches(monkeypatch, modules):
    return spy_launches(monkeypatch, modules, lambda kernel, cluster, c: (kernel.name, c.get("options")))


@pytest.mark.slow
def test_cross_entropy_mean_is_a_dependent_of_the_row_kernel(monkeypatch):
    seen = _launches(monkeypatch, (CE,))
    x = np.random.default_rng(0).standard_normal((40, 70000)).astype(np.float32)
    t = np.arange(40) % 70000
    loss = sk.cross_entropy(x, t)
    ref = np.log(np.exp(x.astype(np.float64)).sum(-1)) - x[np.arange(40), t]
    np.testing.assert_allclose(float(loss), ref.mean(), rtol=1e-5)
    # rows split in chunks (few rows): the chunks, their merge, then the mean
    assert seen == [("ce_loop_kernel", None), ("ce_combine_kernel", DEPENDENT), ("ce_reduce_kernel", DEPENDENT)]


def test_cross_entropy_without_reduction_launches_plainly(monkeypatch):
    seen = _launches(monkeypatch, (CE,))
    x = np.random.default_rng(1).standard_normal((8, 100)).astype(np.float32)
    sk.cross_entropy(x, np.arange(8), reduction="none")
    assert seen == [("ce_tile_kernel", None)]


def test_softmax_finish_is_a_dependent_of_the_partials(monkeypatch):
    seen = _launches(monkeypatch, (SOFTMAX,))
    retune(monkeypatch, "cluster", max_softmax_chunk=0)  # the split path, as without clusters
    x = np.random.default_rng(2).standard_normal((2, 300000)).astype(np.float32)
    y = sk.softmax(x)
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(-1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-12)
    assert [name for name, _ in seen] == ["softmax_partial_kernel", "softmax_finish_kernel"]
    assert [opts for _, opts in seen] == [None, DEPENDENT]


def _planned(launches):
    return [(ln.name, dict(ln.options) or None) for ln in launches]


def test_sum_over_dim0_merges_its_splits_as_a_dependent():
    red = importlib.import_module("tilec.stdlib_kernels.reductions")
    x = np.random.default_rng(3).standard_normal((5000, 70)).astype(np.float32)
    np.testing.assert_allclose(sk.sum(x, 0), x.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)
    for target in TARGETS:
        seen = _planned(red.plan(spec(x.shape, tc.float32), spec((70,), tc.float32), 0, is_max=False, target=target))
        assert seen == [("reduce_inner_kernel", None), ("reduce_inner_kernel", DEPENDENT)]


@pytest.mark.slow
def test_softmax_along_a_split_dimension_normalizes_as_a_dependent(monkeypatch):
    sdim = importlib.import_module("tilec.stdlib_kernels.softmax_dim")
    seen = _launches(monkeypatch, (sdim,))
    x = np.random.default_rng(4).standard_normal((20000, 40)).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(0))
    np.testing.assert_allclose(sk.softmax(x, dim=0), ref / ref.sum(0), rtol=1e-5, atol=1e-12)
    assert seen == [("softmax_dim_stats_kernel", None), ("softmax_dim_loop_kernel", DEPENDENT)]


def test_split_k_reduction_is_a_dependent_of_the_partial_products():
    mm = importlib.import_module("tilec.stdlib_kernels.matmul")
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((37, 200)).astype(np.float32), rng.standard_normal((200, 29)).astype(np.float32)
    config = mm.MatmulConfig(16, 16, 16, 4, 2, split_k=3)
    got = sk.matmul(a, b, out_dtype="f32", config=config)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    for target in TARGETS:
        seen = _planned(mm.plan(spec(a.shape, tc.float32), spec(b.shape, tc.float32), spec((37, 29), tc.float32), None,
                                activation=None, allow_tf32=False, scaled=False, tma=True, config=config,
                                target=target))
        assert [name for name, _ in seen] == ["matmul_splitk_kernel", "splitk_reduce_kernel"]
        assert seen[1][1] == DEPENDENT
