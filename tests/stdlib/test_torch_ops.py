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


def test_row_op_fake_shapes():
    T.register()
    with FakeTensorMode():
        x = torch.empty(6, 10, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(10, device="cuda", dtype=torch.bfloat16)
        for y in (T.rms_norm(x, w), T.layer_norm(x, w, w), T.softmax(x), T.log_softmax(x, 0), T.gelu(x, "tanh"),
                  T.swiglu(x, x), T.dropout(x, 0.1, 3)):
            assert y.shape == x.shape and y.dtype == x.dtype
        assert tuple(T.silu_and_mul(x).shape) == (6, 5)
        t = torch.empty(6, device="cuda", dtype=torch.int64)
        assert tuple(T.cross_entropy(x, t).shape) == () and tuple(T.cross_entropy(x, t, reduction="none").shape) == (6,)
        y, rstd = torch.ops.tilec.rms_norm(x, w, 1e-6)
        assert rstd.dtype == torch.float32 and tuple(rstd.shape) == (6,)
        y, mean, rstd = torch.ops.tilec.layer_norm(x, None, None, 1e-5)
        assert tuple(mean.shape) == tuple(rstd.shape) == (6,)
        dx, dw = torch.ops.tilec.rms_norm_backward(x, x, None, rstd)
        assert dx.shape == x.shape and tuple(dw.shape) == (0,)   # no weight: a 0-element placeholder
        loss, dlogits = torch.ops.tilec.cross_entropy_with_grad(x, t, -100, "sum", 0.0)
        assert tuple(loss.shape) == () and dlogits.shape == x.shape
        q = torch.empty(2, 5, 3, 8, device="cuda", dtype=torch.float16)
        cs = torch.empty(5, 4, device="cuda", dtype=torch.float32)
        assert T.rope(q, cs, cs).shape == q.shape
        h, w = torch.empty(2, 5, 16, device="cuda", dtype=torch.bfloat16), torch.empty(40, 16, device="cuda",
                                                                                      dtype=torch.bfloat16)
        t2 = torch.empty(2, 5, device="cuda", dtype=torch.int64)
        loss, dh, dw, db = torch.ops.tilec.linear_cross_entropy(h, w, t2, None, -100, "sum", 64, 0.0)
        assert tuple(loss.shape) == () and dh.shape == h.shape and dw.shape == w.shape and tuple(db.shape) == (0,)
        assert tuple(T.linear_cross_entropy(h, w, t2, reduction="none").shape) == (2, 5)
        a, b = torch.empty(7, 10, device="cuda"), torch.empty(3, 10, 5, device="cuda")
        assert tuple(T.matmul(a, b).shape) == (3, 7, 5) and tuple(T.matmul(b.transpose(1, 2), a.T).shape) == (3, 5, 7)


def test_embedding_and_add_rms_norm_fake_shapes():
    T.register()
    with FakeTensorMode():
        w = torch.empty(40, 16, device="cuda", dtype=torch.bfloat16)
        ids = torch.empty(2, 5, device="cuda", dtype=torch.int32)
        y = T.embedding(ids, w, padding_idx=-1)
        assert tuple(y.shape) == (2, 5, 16) and y.dtype == torch.bfloat16
        assert tuple(torch.ops.tilec.embedding_backward(y, ids, 40, 39).shape) == (40, 16)
        x = torch.empty(6, 10, device="cuda", dtype=torch.bfloat16)
        r = torch.empty(6, 10, device="cuda", dtype=torch.float32)
        y, h = T.add_rms_norm(x, r)
        assert y.shape == h.shape == x.shape and y.dtype == torch.bfloat16 and h.dtype == torch.float32
        dx, dw = torch.ops.tilec.add_rms_norm_backward(y, None, h, None, torch.empty(6, device="cuda"))
        assert dx.shape == x.shape and tuple(dw.shape) == (0,)


def _bf16(*shape, grad=True):
    return torch.empty(*shape, dtype=torch.bfloat16, requires_grad=grad)


# (name, function of the inputs returning the tensors whose gradient is taken, inputs, the ops expected)
_GRAPHS = [
    ("rms_norm", lambda x, w: torch.ops.tilec.rms_norm(x, w, 1e-6)[0], lambda: (_bf16(6, 10), _bf16(10)),
     ["rms_norm", "rms_norm_backward"]),
    ("layer_norm", lambda x, w, b: torch.ops.tilec.layer_norm(x, w, b, 1e-5)[0],
     lambda: (_bf16(6, 10), _bf16(10), _bf16(10)), ["layer_norm", "layer_norm_backward"]),
    ("layer_norm no bias", lambda x, w: torch.ops.tilec.layer_norm(x, w, None, 1e-5)[0],
     lambda: (_bf16(6, 10), _bf16(10)), ["layer_norm", "layer_norm_backward"]),
    ("softmax dim 0", lambda x: torch.ops.tilec.softmax(x, 0), lambda: (_bf16(6, 10),),
     ["softmax", "softmax_backward"]),
    ("log_softmax", lambda x: torch.ops.tilec.log_softmax(x, -1), lambda: (_bf16(6, 10),),
     ["log_softmax", "log_softmax_backward"]),
    ("gelu", lambda x: torch.ops.tilec.gelu(x, "tanh"), lambda: (_bf16(6, 10),), ["gelu", "gelu_backward"]),
    ("silu_and_mul", lambda x: torch.ops.tilec.silu_and_mul(x), lambda: (_bf16(6, 10),),
     ["silu_and_mul", "silu_and_mul_backward"]),
    ("swiglu", lambda g, u: torch.ops.tilec.swiglu(g, u), lambda: (_bf16(6, 10), _bf16(6, 10)),
     ["swiglu", "swiglu_backward"]),
    ("rope", lambda q, c: torch.ops.tilec.rope(q, c, c, False, None), lambda: (_bf16(2, 5, 3, 8), _bf16(5, 4, grad=False)),
     ["rope", "rope_backward"]),
    ("dropout", lambda x: torch.ops.tilec.dropout(x, 0.25, 11), lambda: (_bf16(6, 10),), ["dropout", "dropout"]),
    ("cross_entropy", lambda x, t: torch.ops.tilec.cross_entropy_with_grad(x, t, -100, "none", 0.0)[0],
     lambda: (_bf16(6, 10), torch.empty(6, dtype=torch.int64)), ["cross_entropy_with_grad"]),
    ("matmul", lambda a, b: torch.ops.tilec.matmul(a, b), lambda: (_bf16(7, 10), _bf16(10, 5)),
     ["matmul"] * 3),
    ("matmul batched, b shared", lambda a, b: torch.ops.tilec.matmul(a, b), lambda: (_bf16(3, 7, 10), _bf16(10, 5)),
     ["matmul"] * 3),
    ("matmul a shared", lambda a, b: torch.ops.tilec.matmul(a, b), lambda: (_bf16(7, 10), _bf16(3, 10, 5)),
     ["matmul"] * 3),
    ("linear_cross_entropy",
     lambda h, w, t, b: torch.ops.tilec.linear_cross_entropy(h, w, t, b, -100, "mean", None, 0.0)[0],
     lambda: (_bf16(2, 5, 16), _bf16(40, 16), torch.empty(2, 5, dtype=torch.int64), _bf16(40)),
     ["linear_cross_entropy"]),
    ("embedding", lambda w, i: torch.ops.tilec.embedding(w, i, None),
     lambda: (_bf16(40, 16), torch.empty(2, 5, dtype=torch.int64)), ["embedding", "embedding_backward"]),
    ("add_rms_norm", lambda x, r, w: torch.ops.tilec.add_rms_norm(x, r, w, 1e-6)[0],
     lambda: (_bf16(6, 10), _bf16(6, 10), _bf16(10)), ["add_rms_norm", "add_rms_norm_backward"]),
    # only the second output used: the backward makes the first's gradient zeros itself
    ("add_rms_norm residual only", lambda x, r, w: torch.ops.tilec.add_rms_norm(x, r, w, 1e-6)[1],
     lambda: (_bf16(6, 10), _bf16(6, 10), _bf16(10)), ["add_rms_norm", "add_rms_norm_backward"]),
]


@pytest.mark.parametrize("name,fn,inputs,expected", _GRAPHS, ids=[g[0] for g in _GRAPHS])
def test_forward_and_backward_traced_with_fake_tensors(name, fn, inputs, expected):
    # what AOTAutograd sees under torch.compile: each forward op, then its backward op, and
    # gradients of the inputs' shapes; with static and symbolic shapes
    T.register()
    args = inputs()
    wrt = [a for a in args if a.requires_grad]

    def step(*a):
        y = fn(*a)
        return torch.autograd.grad(y.float().square().sum(), [x for x in a if x.requires_grad])

    for mode in ("fake", "symbolic"):
        g = make_fx(step, tracing_mode=mode)(*args)
        ops = [n.target for n in g.graph.nodes if n.op == "call_function" and "tilec" in str(n.target)]
        assert ops == [getattr(torch.ops.tilec, e).default for e in expected]
        outs = [n for n in g.graph.nodes if n.op == "output"][0].args[0]
        assert [tuple(o.meta["val"].shape) for o in outs] == [tuple(a.shape) for a in wrt]
        assert [o.meta["val"].dtype for o in outs] == [a.dtype for a in wrt]
        # the unused outputs' gradients are not materialized (autograd's zeros: a weight-sized
        # fill for linear_cross_entropy); only a used output's missing gradient is made
        zeros = [n for n in g.graph.nodes if n.target is torch.ops.aten.zeros.default]
        assert len(zeros) == (name == "add_rms_norm residual only"), zeros


def test_out_variants_are_declared_mutating():
    T.register()
    for name in ("rms_norm", "layer_norm", "softmax", "log_softmax", "gelu", "silu_and_mul", "swiglu", "rope",
                 "dropout", "matmul"):
        schema = getattr(torch.ops.tilec, name + "_out").default._schema
        assert str(schema).endswith("Tensor(a!) out) -> ()"), schema
        assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == ["out"]
    with FakeTensorMode():
        x = torch.empty(6, 10, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(x)
        assert T.softmax(x, out=o) is o and T.rms_norm(x, None, out=x) is x   # in place too
        assert T.matmul(x, x.T, out=torch.empty(6, 6, device="cuda", dtype=torch.bfloat16)).shape == (6, 6)
        g = torch.empty(6, 10, device="cuda", requires_grad=True)
        with pytest.raises(ValueError, match="out= is not differentiable, and x requires grad"):
            T.gelu(g, out=torch.empty(6, 10, device="cuda"))
        with torch.no_grad():
            T.gelu(g, out=torch.empty(6, 10, device="cuda"))
        with pytest.raises(TypeError, match="out: tilec ops take CUDA tensors"):
            T.gelu(x, out=torch.empty(6, 10))

    def step(x, o):   # traced: the mutation is the op's, on its out argument
        T.swiglu(x, x, out=o)
        return o
    args = (torch.empty(6, 10), torch.empty(6, 10))
    T_check = T.check_cuda
    try:
        T.check_cuda = lambda **kw: None   # CPU fake tensors stand for CUDA ones here
        g = make_fx(step, tracing_mode="fake")(*args)
    finally:
        T.check_cuda = T_check
    assert [n.target for n in g.graph.nodes if n.op == "call_function"] == [torch.ops.tilec.swiglu_out.default]


def test_backward_of_a_backward_op_says_so():
    T.register()
    with FakeTensorMode():
        x = torch.empty(4, 16)
        dy = torch.empty(4, 16, requires_grad=True)
        y = torch.ops.tilec.gelu_backward(dy, x, "none")
        with pytest.raises(RuntimeError, match="tilec::gelu_backward has no backward yet, and dy requires grad"):
            y.sum().backward()


def test_inputs_the_op_cannot_differentiate_are_named():
    T.register()
    with FakeTensorMode():
        q = torch.empty(2, 5, 3, 8, device="cuda", requires_grad=True)
        cs = torch.empty(5, 4, device="cuda", requires_grad=True)
        with pytest.raises(ValueError, match="cos requires grad"):
            T.rope(q, cs, cs.detach())
        with torch.no_grad():
            T.rope(q, cs, cs)   # no gradient asked for: fine
        h = torch.empty(3, 8, device="cuda", requires_grad=True)
        w = torch.empty(5, 8, device="cuda")
        t = torch.empty(3, device="cuda", dtype=torch.int64)
        with pytest.raises(ValueError, match="reduction='none' gives no gradient, and hidden requires grad"):
            T.linear_cross_entropy(h, w, t, reduction="none")
        assert tuple(T.linear_cross_entropy(h.detach(), w, t, reduction="none").shape) == (3,)


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
def test_opcheck_row_ops_and_their_backwards():
    T.register()
    torch.manual_seed(1)
    dev = "cuda"
    x = torch.randn(37, 1000, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(1000, device=dev, dtype=torch.bfloat16)
    t = torch.randint(0, 1000, (37,), device=dev)
    _, rstd = torch.ops.tilec.rms_norm(x, w, 1e-6)
    _, mean, rstd_ln = torch.ops.tilec.layer_norm(x, w, w, 1e-5)
    y = torch.ops.tilec.softmax(x, -1)
    ly = torch.ops.tilec.log_softmax(x, -1)
    q = torch.randn(2, 33, 3, 64, device=dev, dtype=torch.float16)
    cs = torch.randn(33, 32, device=dev, dtype=torch.float32)
    a, b = torch.randn(45, 70, device=dev, dtype=torch.bfloat16), torch.randn(70, 29, device=dev, dtype=torch.bfloat16)
    cases = [("rms_norm", (x, w, 1e-6)), ("rms_norm", (x, None, 1e-6)), ("rms_norm_backward", (dy, x, w, rstd)),
             ("rms_norm_backward", (dy, x, None, rstd)),
             ("layer_norm", (x, w, w, 1e-5)), ("layer_norm_backward", (dy, x, w, w, mean, rstd_ln)),
             ("layer_norm_backward", (dy, x, None, None, mean, rstd_ln)),
             ("softmax", (x, -1)), ("softmax", (x, 0)), ("softmax_backward", (dy, y)),
             ("log_softmax", (x, -1)), ("log_softmax_backward", (dy, ly)),
             ("silu_and_mul", (x,)), ("silu_and_mul_backward", (dy[:, :500].contiguous(), x)),
             ("swiglu", (x, dy)), ("swiglu_backward", (dy, x, w.expand(37, 1000).contiguous())),
             ("gelu", (x, "none")), ("gelu_backward", (dy, x, "tanh")),
             ("rope", (q, cs, cs, False, None)), ("rope_backward", (q, cs, cs, True, -3)),
             ("dropout", (x, 0.3, 12345)),
             ("cross_entropy", (x, t, -100, "mean", 0.0)), ("cross_entropy", (x, t, -100, "none", 0.1)),
             ("cross_entropy_with_grad", (x, t, -100, "mean", 0.0)),
             ("cross_entropy_with_grad", (x, t, 5, "none", 0.2)),
             ("matmul", (a, b)), ("matmul", (a.unsqueeze(0).expand(3, -1, -1).contiguous(), b))]
    for name, args in cases:
        torch.library.opcheck(getattr(torch.ops.tilec, name).default, args)
    # the out= variants: opcheck checks that out is the only argument written
    outs = [("rms_norm_out", (x, w, 1e-6, torch.empty_like(x))), ("layer_norm_out", (x, w, w, 1e-5, torch.empty_like(x))),
            ("softmax_out", (x, -1, torch.empty_like(x))), ("log_softmax_out", (x, 0, torch.empty_like(x))),
            ("gelu_out", (x, "tanh", torch.empty_like(x))), ("silu_and_mul_out", (x, torch.empty_like(x[:, :500]))),
            ("swiglu_out", (x, dy, torch.empty_like(x))), ("rope_out", (q, cs, cs, False, None, torch.empty_like(q))),
            ("dropout_out", (x, 0.3, 7, torch.empty_like(x))), ("matmul_out", (a, b, a.new_empty(45, 29)))]
    for name, args in outs:
        torch.library.opcheck(getattr(torch.ops.tilec, name).default, args)
        getattr(torch.ops.tilec, name).default(*args)   # opcheck runs on copies: write args' own out
        op = name[:-4]
        ref = getattr(T, op)(*args[:-1]) if op not in ("rope",) else T.rope(q, cs, cs)
        assert _rel_err(args[-1], ref) < 1e-2, name   # as the functional op (which may keep statistics)


def _f64(*ts):
    return [t.detach().double().requires_grad_(t.requires_grad) for t in ts]


def _rope_ref(x, cos, sin):
    # half-split (NeoX/Llama) pairs, cos/sin of (seq, dim / 2) over (batch, seq, heads, dim)
    h = x.shape[-1] // 2
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _rms_ref(x, w, eps):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


F = torch.nn.functional
# (name, tilec function, float64 reference, input shapes, which inputs require grad)
_GRAD_CASES = [
    ("rms_norm", lambda x, w: T.rms_norm(x, w, 1e-6), lambda x, w: _rms_ref(x, w, 1e-6), [(37, 1000), (1000,)]),
    ("layer_norm", lambda x, w, b: T.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
     [(5, 7, 333), (333,), (333,)]),
    ("layer_norm long rows", lambda x, w, b: T.layer_norm(x, w, b),
     lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), [(3, 9001), (9001,), (9001,)]),
    ("softmax", lambda x: T.softmax(x), lambda x: torch.softmax(x, -1), [(37, 1000)]),
    ("softmax dim 1", lambda x: T.softmax(x, 1), lambda x: torch.softmax(x, 1), [(3, 77, 5)]),
    ("log_softmax", lambda x: T.log_softmax(x), lambda x: torch.log_softmax(x, -1), [(13, 20001)]),
    ("gelu", lambda x: T.gelu(x), lambda x: F.gelu(x), [(37, 999)]),
    ("gelu tanh", lambda x: T.gelu(x, "tanh"), lambda x: F.gelu(x, approximate="tanh"), [(37, 999)]),
    ("silu_and_mul", lambda x: T.silu_and_mul(x), lambda x: F.silu(x[..., :x.shape[-1] // 2]) * x[..., x.shape[-1] // 2:],
     [(3, 11, 2 * 345)]),
    ("swiglu", lambda g, u: T.swiglu(g, u), lambda g, u: F.silu(g) * u, [(37, 345), (37, 345)]),
    ("matmul", lambda a, b: T.matmul(a, b), lambda a, b: a @ b, [(77, 130), (130, 45)]),
    ("matmul batched", lambda a, b: T.matmul(a, b), lambda a, b: a @ b, [(3, 77, 130), (3, 130, 45)]),
    ("matmul b shared", lambda a, b: T.matmul(a, b), lambda a, b: a @ b, [(3, 77, 130), (130, 45)]),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name,fn,ref,shapes", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_gradients_match_float64_autograd(name, fn, ref, shapes, dtype):
    T.register()
    torch.manual_seed(len(name))
    tdt = getattr(torch, dtype)
    xs = [torch.randn(s, device="cuda", dtype=tdt, requires_grad=True) for s in shapes]
    y = fn(*xs)
    dy = torch.randn_like(y)
    y.backward(dy)
    xs64 = _f64(*xs)
    y64 = ref(*xs64)
    y64.backward(dy.double())
    tol = 1e-4 if dtype == "float32" else 3e-2
    if name.startswith("matmul") and dtype == "float32":
        tol = 1e-4   # true f32 products (no tf32)
    assert _rel_err(y, y64) < tol, name
    for i, (x, x64) in enumerate(zip(xs, xs64)):
        assert x.grad is not None and x.grad.dtype == x.dtype and x.grad.shape == x.shape
        assert _rel_err(x.grad, x64.grad) < tol * 3, (name, i, _rel_err(x.grad, x64.grad))


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient_matches_float64_autograd(reduction):
    T.register()
    torch.manual_seed(4)
    x = torch.randn(37, 5003, device="cuda", dtype=torch.float32, requires_grad=True)
    t = torch.randint(0, 5003, (37,), device="cuda")
    t[3] = -100
    loss = T.cross_entropy(x, t, reduction=reduction)
    g = torch.randn_like(loss)
    loss.backward(g)
    x64 = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(x64, t, reduction=reduction)
    ref.backward(g.double())
    assert _rel_err(loss, ref) < 1e-5 and _rel_err(x.grad, x64.grad) < 1e-4
    with torch.no_grad():   # no gradient wanted: the forward-only op
        assert _rel_err(T.cross_entropy(x, t, reduction=reduction), ref) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,chunk,with_bias", [("float32", None, True), ("float32", 64, False),
                                                   ("bfloat16", 128, True)])
def test_linear_cross_entropy_matches_float64_autograd(dtype, chunk, with_bias):
    T.register()
    tdt = getattr(torch, dtype)
    for rep in range(2):   # the second call of one layout replays the first's launches (stdlib_kernels/_plan.py)
        torch.manual_seed(6 + rep)
        h = torch.randn(3, 101, 136, device="cuda", dtype=tdt, requires_grad=True)    # 303 tokens: 5 chunks of 64
        w = (torch.randn(5003, 136, device="cuda", dtype=torch.float64) / 136 ** 0.5 * 3).to(tdt).requires_grad_(True)
        b = torch.randn(5003, device="cuda", dtype=tdt, requires_grad=True) if with_bias else None
        t = torch.randint(0, 5003, (3, 101), device="cuda")
        t[rep, :7] = -100
        loss = T.linear_cross_entropy(h, w, t, b, chunk=chunk)
        (loss * 2.5).backward()
        h64, w64 = _f64(h, w)
        b64 = _f64(b)[0] if with_bias else None
        ref = F.cross_entropy(F.linear(h64, w64, b64).reshape(-1, 5003), t.reshape(-1))
        (ref * 2.5).backward()
        tol = 1e-4 if dtype == "float32" else 3e-2
        assert _rel_err(loss, ref) < tol
        for got, want in ((h.grad, h64.grad), (w.grad, w64.grad)) + (((b.grad, b64.grad),) if with_bias else ()):
            assert got.dtype == tdt and _rel_err(got, want) < tol * 3
        with torch.no_grad():   # the loss alone (the forward-only kernels)
            assert _rel_err(T.linear_cross_entropy(h, w, t, b, chunk=chunk), ref) < tol


@pytest.mark.gpu
def test_opcheck_linear_cross_entropy():
    T.register()
    torch.manual_seed(7)
    h = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1000, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1000, device="cuda", dtype=torch.float32)
    t = torch.randint(0, 1000, (300,), device="cuda")
    for args in ((h, w, t, b, -100, "mean", 128, 0.0), (h, w, t, None, -100, "sum", None, 0.1)):
        torch.library.opcheck(torch.ops.tilec.linear_cross_entropy.default, args)
    torch.library.opcheck(torch.ops.tilec.linear_cross_entropy_loss.default, (h, w, t, None, -100, "none", 128, 0.1))


@pytest.mark.gpu
def test_rope_and_dropout_gradients():
    T.register()
    torch.manual_seed(5)
    x = torch.randn(2, 33, 3, 64, device="cuda", requires_grad=True)
    ang = torch.rand(33, 32, device="cuda", dtype=torch.float64) * 6
    cos, sin = ang.cos().float(), ang.sin().float()
    y = T.rope(x, cos, sin)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64 = x.detach().double().requires_grad_(True)
    _rope_ref(x64, cos.double(), sin.double()).backward(dy.double())
    assert _rel_err(x.grad, x64.grad) < 1e-5
    # dropout: the backward regenerates the forward's mask
    z = torch.randn(77, 1001, device="cuda", requires_grad=True)
    out = T.dropout(z, 0.3, 2024)
    dz = torch.randn_like(out)
    out.backward(dz)
    kept = out.detach() != 0
    assert 0.6 < kept.float().mean().item() < 0.8
    want = torch.where(kept, dz.double() * (out.detach().double() / z.detach().double()), 0.0)
    assert _rel_err(z.grad, want) < 1e-5


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


@pytest.mark.gpu
@pytest.mark.parametrize("used", ["out", "lse"])
def test_attention_gradient_through_one_output_only(used):
    """The other output's gradient arrives as None (not autograd's zeros): lse alone still
    gives the gradient of the log-sum-exp, out alone that of the output."""
    torch.manual_seed(11)
    q, k, v = _cuda_qkv("bshd", 2, 4, 2, 70, 70, 64, 64, torch.float16)
    o, lse = T.attention(q, k, v, causal=True, return_lse=True)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    o64, lse64 = torch_attention_ref(torch, q64, k64, v64, layout="bshd", causal=True)
    if used == "out":
        do = torch.randn_like(o)
        (o.float() * do.float()).sum().backward()
        (o64 * do.double()).sum().backward()
    else:
        dl = torch.randn_like(lse)
        (lse * dl).sum().backward()
        (lse64 * dl.double()).sum().backward()
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        want = torch.zeros_like(got, dtype=torch.float64) if want is None else want   # lse does not depend on v
        err = (got.double() - want).abs().max().item()
        assert err < 5e-3 * max(want.abs().max().item(), 1.0), (name, err)


@pytest.mark.gpu
def test_linear_cross_entropy_backward_runs_once():
    """Its gradients are scaled in place by the backward: autograd refuses a second backward
    (the saved gradients were modified) rather than give a wrong one."""
    T.register()
    torch.manual_seed(3)
    h = torch.randn(40, 64, device="cuda", requires_grad=True)
    w = torch.randn(300, 64, device="cuda", requires_grad=True)
    loss = T.linear_cross_entropy(h, w, torch.randint(0, 300, (40,), device="cuda"))
    (loss * 3.0).backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*tilec_linear_cross_entropyBackward"):
        loss.backward()


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
