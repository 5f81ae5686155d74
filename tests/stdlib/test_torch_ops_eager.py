"""torch_ops' eager path: in plain eager mode an op runs its implementation directly (an
autograd.Function made from the same OpSpec), not through torch.ops.tilec's dispatch; wherever
something traces (a dispatch mode, fake tensors, torch.compile) the registered op runs. Both give
the same bits: the same kernels run."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tilec.stdlib_kernels import torch_ops as T  # noqa: E402


class _Seen(TorchDispatchMode):
    """Records the name of every op dispatched under it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


# a CPU-only torch build aborts the process in autograd on a fake CUDA tensor that requires grad
@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="torch built without CUDA")
def test_a_dispatch_mode_or_fake_tensors_see_the_registered_ops():
    # a mode is how make_fx, FlopCounterMode and friends observe ops: the op path, never the direct one
    T.register()
    assert not T._tracing()
    with _Seen() as seen:
        assert T._tracing()
    with FakeTensorMode():
        x = torch.empty(6, 10, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(10, device="cuda", dtype=torch.bfloat16)
        y = T.rms_norm(x, w)     # fake tensors are not plain tensors: the op (and its fake) runs
        assert y.shape == x.shape
    assert "rms_norm" not in T._EAGER
    del seen


def _rope_tables(s, half):
    ang = torch.rand(s, half, device="cuda") * 6
    return ang.cos(), ang.sin()


def _cases():
    def bf(*shape, grad=True):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
    cos, sin = _rope_tables(70, 32)
    return [
        ("rms_norm", lambda x, w: T.rms_norm(x, w, 1e-5), (bf(3, 70, 512), bf(512)), ["rms_norm", "rms_norm_backward"]),
        ("layer_norm", lambda x, w, b: T.layer_norm(x, w, b), (bf(70, 300), bf(300), bf(300)),
         ["layer_norm", "layer_norm_backward"]),
        ("rope", lambda q: T.rope(q, cos, sin), (bf(2, 70, 4, 64),), ["rope", "rope_backward"]),
        ("swiglu", lambda g, u: T.swiglu(g, u), (bf(70, 333), bf(70, 333)), ["swiglu", "swiglu_backward"]),
        ("softmax dim 0", lambda x: T.softmax(x, 0), (bf(70, 33),), ["softmax", "softmax_backward"]),
        ("attention", lambda q, k, v: T.attention(q, k, v, causal=True), (bf(2, 70, 4, 64), bf(2, 70, 2, 64),
                                                                        bf(2, 70, 2, 64)),
         ["attention", "attention_backward"]),
        ("matmul", lambda a, b: T.matmul(a, b), (bf(70, 130), bf(130, 45)), ["matmul"]),
        ("linear_cross_entropy",
         lambda h, w: T.linear_cross_entropy(h, w, torch.arange(70, device="cuda") * 7 % 1000),
         (bf(70, 64), bf(1000, 64)), ["linear_cross_entropy"]),
    ]


@pytest.mark.gpu
def test_eager_calls_skip_the_op_dispatch_and_give_the_same_bits():
    T.register()
    torch.manual_seed(0)
    for name, fn, inputs, ops in _cases():
        results = {}
        for direct in (False, True):
            T.EAGER_DIRECT = direct
            T._EAGER.clear()
            try:
                xs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
                y = fn(*xs)
                torch.manual_seed(1)
                (y.float() * torch.randn_like(y, dtype=torch.float32)).sum().backward()
                results[direct] = [y.detach()] + [x.grad for x in xs if x.requires_grad]
                assert sorted(T._EAGER) == (sorted(ops) if direct else []), name
            finally:
                T.EAGER_DIRECT = True
        for a, b in zip(results[False], results[True]):
            assert torch.equal(a, b), name


@pytest.mark.gpu
def test_without_a_gradient_the_implementation_runs_alone():
    T.register()
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    T._EAGER.clear()
    with torch.no_grad():
        y = T.rms_norm(x, torch.ones(256, device="cuda", dtype=torch.bfloat16, requires_grad=True))
    assert y.grad_fn is None and "rms_norm" in T._EAGER
    y2 = T.rms_norm(x, None)
    assert y2.grad_fn is None and torch.equal(y, y2)


@pytest.mark.gpu
def test_a_backward_op_differentiated_directly_says_so():
    T.register()
    x = torch.randn(4, 16, device="cuda")
    dy = torch.randn(4, 16, device="cuda", requires_grad=True)
    y = T._call("gelu_backward", dy, x, "none")
    assert "gelu_backward" in T._EAGER
    with pytest.raises(RuntimeError, match="tilec::gelu_backward has no backward yet, and dy requires grad"):
        y.sum().backward()
