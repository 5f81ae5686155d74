"""embedding and add_rms_norm on the GPU: torch.library.opcheck of their custom ops, values and
gradients against float64 torch autograd on odd shapes (many duplicate ids, ids 0 and num - 1,
padding_idx, single-tile and looped rows), determinism, the tilec.nn modules, torch.compile
(fullgraph) and CUDA graph capture and replay."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tilec.stdlib_kernels import torch_ops as T  # noqa: E402

pytestmark = pytest.mark.gpu
F = torch.nn.functional


def _rel_err(got, want):
    got, want = got.detach().double(), want.detach().double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def _ids(shape, n, spread=None, dtype=torch.int64):
    """Random ids in [0, spread or n) with 0 and n - 1 among them."""
    ids = torch.randint(0, spread or n, shape, device="cuda", dtype=dtype)
    flat = ids.view(-1)
    flat[0] = 0
    flat[-1] = n - 1
    return ids


def _rms_ref(h, w, eps):
    return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * w


def test_opcheck_embedding_and_add_rms_norm():
    T.register()
    torch.manual_seed(0)
    w = torch.randn(100, 72, device="cuda", dtype=torch.bfloat16)
    ids = _ids((7, 13), 100, spread=10)
    g = torch.randn(7, 13, 72, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(37, 1000, device="cuda", dtype=torch.bfloat16)
    r, nw = torch.randn_like(x), torch.randn(1000, device="cuda", dtype=torch.bfloat16)
    _, h, rstd = torch.ops.tilec.add_rms_norm(x, r, nw, 1e-6)
    cases = [("embedding", (w, ids, None)), ("embedding", (w, ids.int(), 3)),
             ("embedding", (w.float().requires_grad_(True), ids, None)),
             ("embedding_backward", (g, ids, 100, None)), ("embedding_backward", (g, ids.int(), 100, 0)),
             ("add_rms_norm", (x, r, nw, 1e-6)), ("add_rms_norm", (x, r.float(), None, 1e-5)),
             ("add_rms_norm", (x.float().requires_grad_(True), r.float().requires_grad_(True),
                               nw.float().requires_grad_(True), 1e-6)),
             ("add_rms_norm_backward", (x, r, h, nw, rstd)), ("add_rms_norm_backward", (x, None, h, None, rstd))]
    for name, args in cases:
        torch.library.opcheck(getattr(torch.ops.tilec, name).default, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,d,shape,spread,id_dtype", [(1000, 72, (5, 77), None, torch.int64),
                                                       (50257, 129, (3, 333), 7, torch.int32),
                                                       (11, 1, (1000,), None, torch.int64)])
def test_embedding_and_its_gradient_match_float64(dtype, n, d, shape, spread, id_dtype):
    torch.manual_seed(n + d)
    w = torch.randn(n, d, device="cuda", dtype=dtype, requires_grad=True)
    ids = _ids(shape, n, spread, id_dtype)
    y = T.embedding(ids, w)
    assert y.shape == (*shape, d) and y.dtype == dtype
    assert torch.equal(y, w.detach()[ids.long()])   # a gather: bit for bit
    dy = torch.randn_like(y)
    y.backward(dy)
    w64 = w.detach().double().requires_grad_(True)
    F.embedding(ids.long(), w64).backward(dy.double())
    assert w.grad.dtype == dtype and w.grad.shape == w.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert _rel_err(w.grad, w64.grad) < tol
    unused = torch.ones(n, dtype=torch.bool, device="cuda")
    unused[ids.long().view(-1)] = False
    assert not w.grad[unused].any()


def test_embedding_gradient_padding_idx_and_determinism():
    torch.manual_seed(2)
    w = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ids = _ids((8, 500), 300, spread=20)   # 4000 ids over 20 rows (and row 299)
    dy = torch.randn(8, 500, 64, device="cuda", dtype=torch.bfloat16)
    grads = []
    for _ in range(2):
        w.grad = None
        T.embedding(ids, w, padding_idx=-299).backward(dy)   # row 1
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1])   # no atomics: the same bits every run
    w64 = w.detach().double().requires_grad_(True)
    F.embedding(ids, w64, padding_idx=1).backward(dy.double())
    assert not grads[0][1].any()
    assert _rel_err(grads[0], w64.grad) < 1e-2


# packed rows, one tile per row (the backward's tile kernel up to 8192), 8192 < the backward's
# column tiles, 16384 < the forward's loop
_ADD_NORM_CASES = [((5, 37, 1000), True), ((64, 4096), True), ((3, 9001), True), ((2, 17000), True),
                   ((7, 333), False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,with_weight", _ADD_NORM_CASES, ids=[f"{s}-{w}" for s, w in _ADD_NORM_CASES])
def test_add_rms_norm_gradients_match_float64(dtype, shape, with_weight):
    torch.manual_seed(shape[-1])
    eps = 1e-6
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    r = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(shape[-1], device="cuda", dtype=dtype, requires_grad=True) if with_weight else None
    y, h = T.add_rms_norm(x, r, w, eps)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    torch.autograd.backward((y, h), (dy, dh))
    x64, r64 = (t.detach().double().requires_grad_(True) for t in (x, r))
    w64 = w.detach().double().requires_grad_(True) if with_weight else None
    h64 = x64 + r64
    y64 = _rms_ref(h64, w64 if with_weight else 1.0, eps)
    torch.autograd.backward((y64, h64), (dy.double(), dh.double()))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert _rel_err(h, h64) < tol and _rel_err(y, y64) < tol
    assert x.grad.dtype == dtype and r.grad.dtype == dtype
    assert _rel_err(x.grad, x64.grad) < 3 * tol and _rel_err(r.grad, r64.grad) < 3 * tol
    if with_weight:
        assert _rel_err(w.grad, w64.grad) < 3 * tol


def test_add_rms_norm_with_f32_residual_and_unused_new_residual():
    torch.manual_seed(5)
    x = torch.randn(33, 515, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(33, 515, device="cuda", dtype=torch.float32, requires_grad=True)
    w = torch.randn(515, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y, h = T.add_rms_norm(x, r, w)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    dy = torch.randn_like(y)
    y.backward(dy)   # h unused: its gradient is zeros
    x64, r64, w64 = (t.detach().double().requires_grad_(True) for t in (x, r, w))
    _rms_ref(x64 + r64, w64, 1e-6).backward(dy.double())
    assert _rel_err(y, _rms_ref(x64 + r64, w64, 1e-6)) < 2e-2
    for got, want in ((x.grad, x64.grad), (r.grad, r64.grad), (w.grad, w64.grad)):
        assert _rel_err(got, want) < 3e-2


def test_nn_embedding_and_rms_norm_with_residual():
    import tilec
    tnn = tilec.nn
    torch.manual_seed(6)
    emb = tnn.Embedding(500, 96, padding_idx=3, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.Embedding(500, 96, padding_idx=3, device="cuda", dtype=torch.bfloat16)
    ref.load_state_dict(emb.state_dict())
    assert not emb.weight[3].any()
    ids = _ids((4, 50), 500, spread=40)
    ids[0, :5] = 3
    dy = torch.randn(4, 50, 96, device="cuda", dtype=torch.bfloat16)
    out = emb(ids)
    assert torch.equal(out, ref(ids))
    out.backward(dy)
    ref(ids).float().backward(dy.float())
    assert _rel_err(emb.weight.grad, ref.weight.grad) < 1e-2 and not emb.weight.grad[3].any()
    norm = tnn.RMSNorm(96, eps=1e-5, device="cuda", dtype=torch.float32)
    x, r = torch.randn(7, 96, device="cuda"), torch.randn(7, 96, device="cuda")
    y, h = norm(x, r)
    assert torch.equal(h, x + r) and _rel_err(y, norm(x + r)) < 1e-5


def test_compile_fullgraph_embedding_and_add_rms_norm():
    torch.manual_seed(7)
    w = torch.randn(1000, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    nw = torch.randn(128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ids = _ids((2, 65), 1000)
    r = torch.randn(2, 65, 128, device="cuda", dtype=torch.bfloat16)

    def block(ids, r):
        y, h = T.add_rms_norm(T.embedding(ids, w), r, nw)
        return y, h

    compiled = torch.compile(block, fullgraph=True)
    outs = []
    for fn in (block, compiled):
        w.grad = nw.grad = None
        y, h = fn(ids, r)
        (y.float().square().sum() + h.float().sum()).backward()
        outs.append((y.detach(), h.detach(), w.grad.clone(), nw.grad.clone()))
    for got, want in zip(outs[1], outs[0]):
        assert torch.equal(got, want)   # the same kernels on the same data


def test_cuda_graph_capture_and_replay():
    torch.manual_seed(8)
    w = torch.randn(777, 200, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    nw = torch.randn(200, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(3, 91, 200, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ids = _ids((3, 91), 777, spread=50)
    dy = torch.randn(3, 91, 200, device="cuda", dtype=torch.bfloat16)

    def step(w, nw, r):
        y, _h = T.add_rms_norm(T.embedding(ids, w), r, nw)
        y.backward(dy)
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm up: kernels compile on their first call, not in the capture
        for _ in range(2):
            step(w, nw, r)
    torch.cuda.current_stream().wait_stream(side)
    for t in (w, nw, r):
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step(w, nw, r)
    for _ in range(2):   # new values in the captured tensors, then replay
        with torch.no_grad():
            for t in (w, nw, r, dy):
                t.copy_(torch.randn_like(t))
            ids.copy_(_ids((3, 91), 777, spread=50))
        graph.replay()
        torch.cuda.synchronize()
        we, nwe, re_ = (t.detach().clone().requires_grad_(True) for t in (w, nw, r))
        ye = step(we, nwe, re_)
        assert torch.equal(y, ye)
        for got, want in ((w.grad, we.grad), (nw.grad, nwe.grad), (r.grad, re_.grad)):
            assert torch.equal(got, want)


def test_argument_errors_name_the_argument():
    w = torch.randn(10, 4, device="cuda")
    with pytest.raises(TypeError, match="input: embedding takes int32 or int64"):
        T.embedding(torch.zeros(3, device="cuda"), w)
    with pytest.raises(ValueError, match="padding_idx must be"):
        T.embedding(torch.zeros(3, dtype=torch.int64, device="cuda"), w, padding_idx=10)
    with pytest.raises(TypeError, match="input: tilec ops take CUDA tensors"):
        T.embedding(torch.zeros(3, dtype=torch.int64), w)
    with pytest.raises(TypeError, match="residual: tilec ops take CUDA tensors"):
        T.add_rms_norm(w, w.cpu())
