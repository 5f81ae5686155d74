"""tilec's stdlib as torch custom ops (stdlib_kernels/torch_ops.py).

On the CPU: registration, the fake implementations' shapes (FakeTensorMode, symbolic
tracing), the autograd wiring traced with fake tensors, argument errors. On the GPU
(`gpu`): torch.library.opcheck of each op, gradients against float64 autograd,
torch.compile(fullgraph=True) of an attention block, CUDA graph capture and replay."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tilec.stdlib_kernels import torch_ops as T  # noqa: E402

from attention_ref import torch_attention_ref  # noqa: E402


def test_stdlib_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tilec.stdlib_kernels\n"
            "from tilec.stdlib_kernels import torch_ops\n"
            "try:\n    torch_ops.register()\nexcept ImportError as e:\n    print('ImportError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "ImportError" in out and "needs PyTorch" in out


def test_register_is_idempotent_and_defines_every_op():
    T.register()
    T.register()
    T._registered = False      # as after a second import of the module: existing ops are kept
    T.register()
    assert T._registered
    for name, spec in T.OPS.items():
        schema = str(getattr(torch.ops.tilec, name).default._schema)
        assert schema == f"tilec::{name}{spec.schema}"


def _qkv(layout="bshd", b=2, h=8, hk=2, n_q=100, n_k=77, d=64, dv=32, device="cpu", grad=False):
    def shape(n, hh, dd):
        return (b, n, hh, dd) if layout == "bshd" else (b, hh, n, dd)
    return tuple(torch.empty(shape(n, hh, dd), dtype=torch.float16, device=device, requires_grad=grad)
                 for n, hh, dd in ((n_q, h, d), (n_k, hk, d), (n_k, hk, dv)))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_attention_fake_shapes(layout):
    T.register()
    with FakeTensorMode():
        q, k, v = _qkv(layout, device="cuda")   # fake CUDA tensors: no device needed
        o, lse = T.attention(q, k, v, causal=True, window=(10, -1), layout=layout, return_lse=True)
        assert o.device.type == "cuda" and o.dtype == torch.float16 and lse.dtype == torch.float32
        assert tuple(o.shape) == ((2, 100, 8, 32) if layout == "bshd" else (2, 8, 100, 32))
        assert tuple(lse.shape) == (2, 8, 100) and o.is_contiguous()
        grads = torch.ops.tilec.attention_backward(o, q, k, v, o, lse, None, True, None, 10, -1, None, layout)
        assert [tuple(g.shape) for g in grads] == [tuple(t.shape) for t in (q, k, v)]


def test_forward_only_fake_shapes():
    T.register()
    with FakeTensorMode():
        x = torch.empty(6, 10, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(10, device="cuda", dtype=torch.bfloat16)
        for y in (T.rms_norm(x, w), T.layer_norm(x, w, w), T.softmax(x), T.log_softmax(x, 0), T.gelu(x, "tanh")):
            assert y.shape == x.shape and y.dtype == x.dtype
        assert tuple(T.silu_and_mul(x).shape) == (6, 5)
        t = torch.empty(6, device="cuda", dtype=torch.int64)
        assert tuple(T.cross_entropy(x, t).shape) == () and tuple(T.cross_entropy(x, t, reduction="none").shape) == (6,)


def test_autograd_wiring_traced_with_fake_tensors():
    # the forward, then the backward op with lse's gradient, as AOTAutograd sees them
    T.register()

    def step(q, k, v):
        o, lse = torch.ops.tilec.attention(q, k, v, True, None, -1, -1, None, "bhsd")
        return torch.autograd.grad(o.float().sum() + lse.sum(), (q, k, v))

    args = _qkv("bhsd", b=1, h=4, hk=2, n_q=9, n_k=13, d=16, dv=8, grad=True)
    for mode in ("fake", "symbolic"):
        g = make_fx(step, tracing_mode=mode)(*args)
        ops = [n.target for n in g.graph.nodes if n.op == "call_function" and "tilec" in str(n.target)]
        assert ops == [torch.ops.tilec.attention.default, torch.ops.tilec.attention_backward.default]
        outs = [n for n in g.graph.nodes if n.op == "output"][0].args[0]
        assert [tuple(o.meta["val"].shape) for o in outs] == [tuple(a.shape) for a in args]


def test_backward_through_a_forward_only_op_says_so():
    T.register()
    with FakeTensorMode():
        x = torch.empty(4, 16)
        w = torch.empty(16, requires_grad=True)
        y = torch.ops.tilec.rms_norm(x, w, 1e-6)
        with pytest.raises(RuntimeError, match="tilec::rms_norm has no backward yet, and weight requires grad"):
            y.sum().backward()


def test_arguments_must_be_cuda_tensors_named():
    T.register()
    with FakeTensorMode():
        q, k, v = _qkv(device="cuda")
        qc, kc, vc = _qkv()
        with pytest.raises(TypeError, match="k: tilec ops take CUDA tensors.*but q is on cuda"):
            T.attention(q, kc, v)
        with pytest.raises(TypeError, match="q: tilec ops take CUDA tensors"):
            T.attention(qc, kc, vc)
        with pytest.raises(TypeError, match="v: expected a torch.Tensor"):
            T.attention(q, k, "v")
        with pytest.raises(TypeError, match="weight: tilec ops take CUDA tensors"):
            T.rms_norm(torch.empty(4, 8, device="cuda"), torch.empty(8))
        with pytest.raises(TypeError, match="window"):
            T.attention(q, k, v, window=(3,))
        with pytest.raises(ValueError, match="layout"):
            T.attention(q, k, v, layout="sbhd")


# ----------------------------------------------------------------------------- GPU
def _cuda_qkv(layout, b, h, hk, n_q, n_k, d, dv, dtype, grad=True):
    def shape(n, hh, dd):
        return (b, n, hh, dd) if layout == "bshd" else (b, hh, n, dd)
    return tuple(torch.randn(shape(n, hh, dd), device="cuda", dtype=dtype, requires_grad=grad)
                 for n, hh, dd in ((n_q, h, d), (n_k, hk, d), (n_k, hk, dv)))


@pytest.mark.gpu
def test_opcheck_attention_and_its_backward():
    T.register()
    torch.manual_seed(0)
    q, k, v = _cuda_qkv("bshd", 2, 4, 2, 77, 93, 64, 64, torch.float16)
    torch.library.opcheck(torch.ops.tilec.attention.default, (q, k, v, True, None, -1, -1, None, "bshd"))
    torch.library.opcheck(torch.ops.tilec.attention.default, (q, k, v, False, 0.2, 30, 5, 20.0, "bshd"))
    qb, kb, vb = _cuda_qkv("bhsd", 1, 4, 4, 50, 50, 128, 128, torch.bfloat16, grad=False)
    o, lse = torch.ops.tilec.attention(qb, kb, vb, True, None, -1, -1, None, "bhsd")
    do, dlse = torch.randn_like(o), torch.randn_like(lse)
    torch.library.opcheck(torch.ops.tilec.attention_backward.default,
                          (do, qb, kb, vb, o, lse, dlse, True, None, -1, -1, None, "bhsd"))


@pytest.mark.gpu
def test_opcheck_forward_only_ops():
    T.register()
    torch.manual_seed(1)
    x = torch.randn(37, 1000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 1000, (37,), device="cuda")
    cases = [("rms_norm", (x, w, 1e-6)), ("layer_norm", (x, w, w, 1e-5)), ("softmax", (x, -1)),
             ("log_softmax", (x, -1)), ("silu_and_mul", (x,)), ("gelu", (x, "none")),
             ("cross_entropy", (x, t, -100, "mean")), ("cross_entropy", (x, t, -100, "none"))]
    for name, args in cases:
        torch.library.opcheck(getattr(torch.ops.tilec, name).default, args)


ATTN_CASES = [
    ("bshd", (2, 4, 2), (77, 93), (64, 64), "float16", dict(causal=True)),
    ("bhsd", (1, 6, 3), (130, 130), (128, 128), "bfloat16", dict(window=(40, 3))),
    ("bshd", (2, 2, 1), (65, 65), (96, 64), "float16", dict(softcap=10.0, scale=0.1)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,heads,lens,dims,dtype,kw", ATTN_CASES)
def test_attention_gradients_match_float64_autograd(layout, heads, lens, dims, dtype, kw):
    torch.manual_seed(sum(lens))
    tdt = getattr(torch, dtype)
    q, k, v = _cuda_qkv(layout, *heads, *lens, *dims, tdt)
    o, lse = T.attention(q, k, v, layout=layout, return_lse=True, **kw)
    do, dl = torch.randn_like(o), torch.randn_like(lse)
    ((o.float() * do.float()).sum() + (lse * dl).sum()).backward()
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    o64, lse64 = torch_attention_ref(torch, q64, k64, v64, layout=layout, **kw)
    ((o64 * do.double()).sum() + (lse64 * dl.double()).sum()).backward()
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    assert (o.double() - o64).abs().max().item() < tol
    assert (lse.double() - lse64).abs().max().item() < 1e-3
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        err = (got.double() - want).abs().max().item()
        assert err < tol * max(want.abs().max().item(), 1.0), (name, err)


def _rel_err(got, want):
    return (got.float() - want.float()).abs().max().item() / max(want.float().abs().max().item(), 1e-6)


class Block(torch.nn.Module):
    """A grouped-query causal self-attention block with tilec's attention."""

    def __init__(self, dim=256, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.heads, self.hd)
        k, v = self.wkv(x).view(b, n, 2, self.kv_heads, self.hd).unbind(2)
        o = T.attention(q, k, v, causal=True)
        return x + self.wo(o.reshape(b, n, -1))


@pytest.mark.gpu
def test_compile_fullgraph_matches_eager():
    T.register()
    torch.manual_seed(2)
    block = Block().cuda().to(torch.bfloat16)
    compiled = torch.compile(block, fullgraph=True)   # a graph break raises
    for n in (100, 147):   # a second length: recompiled or dynamic, never broken
        x = torch.randn(2, n, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        xc = x.detach().clone().requires_grad_(True)
        y = block(x)
        y.float().square().mean().backward()
        grads = [p.grad.clone() for p in block.parameters()]
        block.zero_grad(set_to_none=True)
        yc = compiled(xc)
        yc.float().square().mean().backward()
        # bf16: inductor rounds the fused residual add once, eager twice
        assert _rel_err(yc, y) < 2e-2 and _rel_err(xc.grad, x.grad) < 3e-2
        for g, p in zip(grads, block.parameters()):
            assert _rel_err(p.grad, g) < 3e-2
        block.zero_grad(set_to_none=True)
    explanation = torch._dynamo.explain(Block().cuda().to(torch.bfloat16))(
        torch.randn(1, 64, 256, device="cuda", dtype=torch.bfloat16))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay_forward_and_backward():
    T.register()
    torch.manual_seed(3)
    q, k, v = _cuda_qkv("bshd", 2, 4, 2, 200, 200, 64, 64, torch.float16)
    do = torch.randn(2, 200, 4, 64, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm up: the kernels compile on their first call, not in the capture
        for _ in range(2):
            T.attention(q, k, v, causal=True).backward(do)
    torch.cuda.current_stream().wait_stream(side)
    for t in (q, k, v):
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = T.attention(q, k, v, causal=True)
        out.backward(do)
    for _ in range(2):   # new inputs in the captured tensors, then replay
        with torch.no_grad():
            for t in (q, k, v, do):
                t.copy_(torch.randn_like(t))
        graph.replay()
        torch.cuda.synchronize()
        qe, ke, ve = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        oe = T.attention(qe, ke, ve, causal=True)
        oe.backward(do)
        assert torch.equal(out, oe)   # the same kernels on the same data: bit for bit
        for got, want in ((q.grad, qe.grad), (k.grad, ke.grad), (v.grad, ve.grad)):
            assert torch.equal(got, want)


@pytest.mark.gpu
def test_cpu_tensor_mixed_with_cuda_is_named():
    q, k, v = _cuda_qkv("bshd", 1, 2, 2, 8, 8, 16, 16, torch.float16, grad=False)
    with pytest.raises(TypeError, match="v: tilec ops take CUDA tensors"):
        T.attention(q, k, v.cpu())
