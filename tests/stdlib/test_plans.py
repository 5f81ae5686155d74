"""Launch plans (stdlib_kernels/_plan.py): a repeated call replays exactly the launches the
entry point's own path makes. The GPU is stubbed at the two places a launch leaves Python
(the launcher's `kernel[grid](...)` and the runtime LaunchPlan's cuLaunchKernel); both log what the
packer would receive, and the logs of a first (recorded) and a second (replayed) call must
agree up to the addresses of freshly allocated outputs."""
from __future__ import annotations

import importlib
import itertools

import pytest

import tilec as tc
from tilec.options import OPTION_FIELDS
from tilec.target import Target
from tilec.runtime import driver, interop, memory, replay
from tilec.runtime.replay import LaunchPlan
from tilec.runtime.memory import DeviceArray
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _plan, launches, norms
from needs import needs

_softmax = importlib.import_module("tilec.stdlib_kernels.softmax")  # the package exports the function
_matmul = importlib.import_module("tilec.stdlib_kernels.matmul")
_cross_entropy = importlib.import_module("tilec.stdlib_kernels.cross_entropy")

_kernel_cls = type(sk.softmax.__wrapped_entry__.__globals__["softmax_tile_kernel"])
_addresses = itertools.count(1)


def _array(shape, dtype, strides=None):
    isz = dtype.itemsize
    if strides is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    # one address per array, 2**32 apart: an output's address says which allocation it is
    return DeviceArray(next(_addresses) << 32, shape, tuple(s * isz for s in strides), dtype, 0)


class _Prepared:
    def __init__(self, kernel, key):
        self.kernel, self.key, self.name, self.device = kernel, key, kernel.name, 0


@pytest.fixture
def gpu_log(monkeypatch):
    log = []

    def entry(kernel, key, grid, vals, infos):
        st = kernel.launch_state
        scalars = [None if infos[i] is not None or st.ce_mask[i] else repr(vals[i]) for i in range(st.nparams)]
        arrays = [None if i is None else (i[0], tuple(i[1]), tuple(i[2]), i[3]) for i in infos]
        log.append((key, tuple(grid), scalars, arrays))

    def bound(kernel, args, kw):
        st = kernel.launch_state
        kw = dict(kw)
        opts = tuple((k, kw.pop(k)) for k in OPTION_FIELDS if k in kw)
        vals = st.bind(args, kw)
        infos = [interop.array_info(v) if not ce and isinstance(v, DeviceArray) else None
                 for v, ce in zip(vals, st.ce_mask)]
        prepared = _Prepared(kernel, (kernel.name,) + opts + tuple(v for v, c in zip(vals, st.ce_mask) if c))
        return prepared, vals, infos

    def getitem(kernel, grid):
        def go(*args, **kw):
            prepared, vals, infos = bound(kernel, args, kw)
            entry(kernel, prepared.key, tuple(grid) + (1,) * (3 - len(grid)), vals, infos)
        return go

    def prepare(kernel, grid, *args, **kw):   # the runtime's LaunchPlan over a stub of the loaded kernel
        prepared, vals, infos = bound(kernel, args, kw)
        st = kernel.launch_state
        return LaunchPlan(prepared, tuple(grid) + (1,) * (3 - len(grid)), vals, infos, st.params, st.ce_mask)

    def cu_launch(prepared, gx, gy, gz, stream, vals, infos):
        assert prepared.device == 0 and stream == 0
        entry(prepared.kernel, prepared.key, (gx, gy, gz), vals, infos)

    monkeypatch.setattr(_kernel_cls, "__getitem__", getitem)
    monkeypatch.setattr(_kernel_cls, "prepare", prepare)
    monkeypatch.setattr(replay, "_cu_launch", cu_launch)
    monkeypatch.setattr(driver, "ensure_context", lambda device: None)
    monkeypatch.setattr(tc, "empty", lambda shape, dtype, device=0: _array(tuple(shape), dtype))
    monkeypatch.setattr(memory, "empty_maker", lambda shape, dtype, device=0: lambda: _array(tuple(shape), dtype))
    h100 = Target.from_arch("sm_90a")   # no device to ask
    monkeypatch.setattr(norms, "target_of", lambda a: h100)
    monkeypatch.setattr(_softmax, "target_of", lambda a: h100)
    monkeypatch.setattr(_cross_entropy, "target_of", lambda a: h100)
    for name in ("elementwise", "elementwise_backward", "dropout", "transpose", "reductions", "reductions_dim"):
        monkeypatch.setattr(importlib.import_module(f"tilec.stdlib_kernels.{name}"), "target_of", lambda a: h100)
    monkeypatch.setattr(_matmul, "_target", lambda a: h100)
    monkeypatch.setattr(launches.DeviceProbe, "resident_clusters", lambda self, launch: 15)
    _plan.clear_plans()
    yield log
    _plan.clear_plans()


def _normalized(entries):
    # addresses as (which array in order of appearance, offset within it)
    seen = {}
    out = []
    for key, grid, scalars, arrays in entries:
        norm = [None if a is None else (seen.setdefault(a[0] >> 32, len(seen)), a[0] & (2 ** 32 - 1)) + a[1:]
                for a in arrays]
        out.append((key, grid, scalars, norm))
    return out


f16, bf16, f32 = tc.float16, tc.bfloat16, tc.float32
X = _array((256, 512), f16)
W = _array((512,), f16)
CASES = {
    "softmax": lambda: sk.softmax(X),
    "log_softmax_out": lambda: sk.log_softmax(X, out=X),
    "softmax_split_rows": lambda: sk.softmax(_array((4, 262144), f32)),
    "softmax_cluster_rows": lambda: sk.softmax(_array((512, 262144), bf16)),
    "layer_norm_cluster_rows": lambda: sk.layer_norm(_array((64, 65536), bf16), _array((65536,), bf16), None,
                                                     return_stats=True),
    "layer_norm_stats": lambda: sk.layer_norm(X, W, None, eps=1e-5, return_stats=True),
    "rms_norm": lambda: sk.rms_norm(X, W),
    "cross_entropy": lambda: sk.cross_entropy(_array((64, 32000), bf16), _array((64,), tc.int64)),
    "sum_first_split": lambda: sk.sum(_array((4096, 256), f32), 0),
    "max_last": lambda: sk.amax(X, -1),
    "sum_all_keepdim": lambda: sk.sum(X, None, True),
    "max_dim0_indices": lambda: sk.max(X, 0),
    "argmin_keepdim": lambda: sk.argmin(_array((3, 5, 7), f32), 1, keepdim=True),
    "cumsum": lambda: sk.cumsum(X),
    "cumsum_dim0": lambda: sk.cumsum(_array((3, 5, 7), bf16), 0),
    "transpose_3d": lambda: sk.transpose(_array((3, 5, 7), f16), 0, 2),
    "transpose_3d_rows": lambda: sk.transpose(_array((3, 5, 7), f16), 0, 1),
    "layer_norm_2_dims": lambda: sk.layer_norm(_array((4, 8, 64), f16), (8, 64), _array((8, 64), f16)),
    "gelu_strided_rows": lambda: sk.gelu(_array((64, 100), bf16, (128, 1))),
    "silu_and_mul_halves": lambda: sk.silu_and_mul(X),
    "add_broadcast": lambda: sk.add(X, W),
    "rope": lambda: sk.rope(_array((2, 16, 4, 64), f16), _array((16, 32), f32), _array((16, 32), f32)),
    "dropout": lambda: sk.dropout(X, 0.25, 12345),
    "transpose": lambda: sk.transpose(X),
    "matmul": lambda: sk.matmul(_array((256, 512), bf16), _array((512, 384), bf16)),
    "matmul_bias_gelu_out": lambda: sk.matmul(X, _array((512, 256), f16), bias=_array((256,), f32),
                                              activation="gelu", out=_array((256, 256), f16)),
    "matmul_split_k": lambda: sk.matmul(_array((128, 4096), bf16), _array((4096, 4096), bf16)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_replay_launches_what_the_entry_point_launches(gpu_log, name):
    first = CASES[name]()
    n = len(gpu_log)
    assert n >= 1
    second = CASES[name]()
    assert _normalized(gpu_log[:n]) == _normalized(gpu_log[n:])
    # the second call was a replay, and returns fresh outputs of the same form
    plans = [v for table in _plan._plans.values() for v in table.values()]
    assert len(plans) == 1 and plans[0] is not _plan._UNPLANNABLE
    for a, b in zip(first if isinstance(first, tuple) else (first,), second if isinstance(second, tuple) else (second,)):
        assert (a.shape, a.strides, a.dtype) == (b.shape, b.strides, b.dtype)


def test_a_new_layout_records_a_new_plan(gpu_log):
    sk.gelu(X)
    sk.gelu(X)
    sk.gelu(_array((256, 512), f16, (1024, 1)))
    assert _plan.plan_count(sk.gelu) == 2


def test_errors_are_raised_every_time(gpu_log):
    for _ in range(2):
        with pytest.raises(ValueError, match="p must be"):
            sk.dropout(X, 1.5, 0)
    assert _plan.plan_count(sk.dropout) == 0


@pytest.mark.gpu
def test_replayed_calls_compute_on_the_gpu_and_follow_torchs_stream():
    torch = needs("torch")
    _plan.clear_plans()
    x = torch.randn(300, 1000, device="cuda", dtype=torch.float16)
    w = torch.randn(500, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    for i in range(3):  # record, then replays: fresh outputs, new inputs of the same layout
        x2 = (x + i).contiguous()
        with torch.cuda.stream(s):
            y = sk.softmax(x2)
            z = sk.silu_and_mul(x2[:, :1000])
            b = sk.add(x2[:, 250:750], w)
        s.synchronize()
        torch.testing.assert_close(y.double(), x2.double().softmax(-1), rtol=2e-3, atol=2e-3)
        g, u = x2[:, :500].double(), x2[:, 500:].double()
        torch.testing.assert_close(z.double(), torch.nn.functional.silu(g) * u, rtol=2e-3, atol=4e-3)
        torch.testing.assert_close(b.double(), x2[:, 250:750].double() + w.double(), rtol=2e-3, atol=2e-3)
    assert _plan.plan_count(sk.softmax) == 1 and _plan.plan_count(sk.add) == 1


@pytest.mark.gpu
def test_replayed_matmuls_compute_on_the_gpu():
    torch = needs("torch")
    _plan.clear_plans()
    for i in range(3):  # record, then replays: new operands and scales of the same layout
        a = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)        # split-K: two launches
        b = torch.randn(4096, 1000, device="cuda", dtype=torch.bfloat16)
        c = torch.randn(300, 700, device="cuda", dtype=torch.float16)
        d = torch.randn(700, 520, device="cuda", dtype=torch.float16)
        bias = torch.randn(520, device="cuda", dtype=torch.float16)
        y = sk.matmul(a, b, scale_a=0.5 * (i + 1))
        z = sk.matmul(c, d, bias=bias, activation="silu")
        ref_y = 0.5 * (i + 1) * (a.double() @ b.double())
        ref_z = torch.nn.functional.silu(c.double() @ d.double() + bias.double())
        torch.testing.assert_close(y.double(), ref_y, rtol=2e-2, atol=2e-2 * ref_y.abs().max().item() / 50)
        torch.testing.assert_close(z.double(), ref_z, rtol=2e-2, atol=2e-2 * ref_z.abs().max().item() / 50)
    assert _plan.plan_count(sk.matmul) == 2


PER_CALL = {
    # (entry, call with the recorded values, call with new values, what the entry's own path does with those)
    "dropout_seed_and_p": (sk.dropout, lambda f: f(X, 0.25, seed=12345), lambda f: f(X, 0.75, seed=987654321)),
    "dropout_seed_past_63_bits": (sk.dropout, lambda f: f(X, 0.5, 3), lambda f: f(X, 0.5, 2 ** 64 - 3)),
    "layer_norm_eps": (sk.layer_norm, lambda f: f(X, W, None, eps=1e-5, return_stats=True),
                       lambda f: f(X, W, None, eps=0.125, return_stats=True)),
    "rms_norm_eps_long_rows": (sk.rms_norm, lambda f: f(_array((2, 65536), bf16), None, 1e-6),
                               lambda f: f(_array((2, 65536), bf16), None, 3e-2)),
    "matmul_scales": (sk.matmul, lambda f: f(X, _array((512, 256), f16), scale_a=0.5, scale_b=3.0),
                      lambda f: f(X, _array((512, 256), f16), scale_a=0.25, scale_b=3.0)),
    "matmul_split_k_scale": (sk.matmul, lambda f: f(_array((128, 4096), bf16), _array((4096, 4096), bf16),
                                                    scale_a=2.0),
                             lambda f: f(_array((128, 4096), bf16), _array((4096, 4096), bf16), scale_a=0.5)),
}


@pytest.mark.parametrize("name", list(PER_CALL))
def test_per_call_scalars_are_filled_in_at_replay(gpu_log, name):
    entry, first, second = PER_CALL[name]
    first(entry)
    n = len(gpu_log)
    second(entry)                        # a replay of the first call's plan with the new values
    assert _plan.plan_count(entry) == 1
    m = len(gpu_log)
    second(entry.__wrapped_entry__)      # the entry point's own path for the new values
    replayed, own = _normalized(gpu_log[n:m]), _normalized(gpu_log[m:])
    assert replayed == own
    assert _normalized(gpu_log[:n]) != own  # the values did reach the launches


def test_seeds_the_launcher_specializes_apart_get_their_own_plans(gpu_log):
    # 1 is a constant and multiples of 16 are "divisible by 16" in the kernel's
    # specialization: a plan recorded for one class must not launch another's kernel.
    for seed in (5, 7, 1, 32, 48, 2 ** 40 + 3):
        sk.dropout(X, 0.5, seed)
    assert _plan.plan_count(sk.dropout) == 4


def test_per_call_values_are_validated_on_replay(gpu_log):
    sk.layer_norm(X, W, None, eps=1e-5)
    sk.dropout(X, 0.5, 1234)
    with pytest.raises(ValueError, match="eps must be"):
        sk.layer_norm(X, W, None, eps=-1.0)
    with pytest.raises(ValueError, match="p must be"):
        sk.dropout(X, 1.5, 1234)
    with pytest.raises(TypeError, match="seed must be an int"):
        sk.dropout(X, 0.5, 1.5)
    assert _plan.plan_count(sk.dropout) == 1 and _plan.plan_count(sk.layer_norm) == 1


def test_an_entry_that_skips_derived_is_never_replayed(gpu_log):
    def scalars(p):
        return (float(p),)

    @_plan.planned(per_call=scalars)
    def scaled(x, p):  # reads p directly: its recording must not become a plan
        return sk.mul.__wrapped_entry__(x, x) if p > 0 else x

    scaled(X, 1.0)
    assert list(_plan._plans[f"{__name__}.{scaled.__qualname__}"].values()) == [_plan._UNPLANNABLE]
