"""tilec.nn (dsl/nn.py) and tilec.integrations.transformers.

On the CPU: `import tilec` without torch, the modules' parameter names (torch's and Hugging
Face's), a decoder layer of tilec.nn modules traced forward and backward with fake tensors
(each op and its backward op), the transformers patch on a tiny LlamaForCausalLM traced the
same way (where transformers is installed). On the GPU (`gpu`): the layer against a float64
torch reference (values and every gradient), torch.compile(fullgraph=True) with no graph
break, a CUDA graph of its forward and backward replayed on new data, LinearCrossEntropyLoss,
and the patched tiny Llama against the unpatched one."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import tilec  # noqa: E402
from tilec.stdlib_kernels import torch_ops as T  # noqa: E402

from attention_ref import torch_attention_ref  # noqa: E402

tnn = tilec.nn
F = torch.nn.functional


class DecoderLayer(torch.nn.Module):
    """A Llama decoder layer of tilec.nn modules (Hugging Face's parameter names)."""

    def __init__(self, dim=256, heads=4, kv_heads=2, ffn=384, eps=1e-6):
        super().__init__()
        self.input_layernorm = tnn.RMSNorm(dim, eps)
        self.self_attn = tnn.Attention(dim, heads, kv_heads)
        self.post_attention_layernorm = tnn.RMSNorm(dim, eps)
        self.mlp = tnn.SwiGLUMLP(dim, ffn)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


def _rms(x, w, eps):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


def _rope(x, inv_freq):
    # (b, s, h, d), half-split pairs at positions 0..s-1
    pos = torch.arange(x.shape[1], device=x.device, dtype=torch.float64)
    ang = torch.outer(pos, inv_freq.double())
    c, s = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def reference_layer(layer, P, x):
    """DecoderLayer's forward in plain torch with the parameters P (float64 leaves)."""
    a, eps = layer.self_attn, layer.input_layernorm.variance_epsilon
    b, s, _ = x.shape
    h = _rms(x, P["input_layernorm.weight"], eps)
    q = (h @ P["self_attn.q_proj.weight"].T).view(b, s, a.num_heads, a.head_dim)
    k = (h @ P["self_attn.k_proj.weight"].T).view(b, s, a.num_key_value_heads, a.head_dim)
    v = (h @ P["self_attn.v_proj.weight"].T).view(b, s, a.num_key_value_heads, a.head_dim)
    inv = a.rotary_emb.inv_freq
    o, _ = torch_attention_ref(torch, _rope(q, inv), _rope(k, inv), v, causal=True)
    x = x + o.reshape(b, s, -1) @ P["self_attn.o_proj.weight"].T
    h = _rms(x, P["post_attention_layernorm.weight"], eps)
    m = (F.silu(h @ P["mlp.gate_proj.weight"].T) * (h @ P["mlp.up_proj.weight"].T)) @ P["mlp.down_proj.weight"].T
    return x + m


class OpSpy(TorchDispatchMode):
    """Counts the tilec ops dispatched under it."""

    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "tilec" in str(func):
            self.seen[str(func).split(".")[1]] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def cpu_fake(monkeypatch):
    """Fake CPU tensors stand for CUDA ones (this torch has no CUDA): the device check is off."""
    monkeypatch.setattr(T, "check_cuda", lambda **kw: None)
    T.register()


# ----------------------------------------------------------------------------- CPU
def test_import_tilec_never_imports_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tilec, tilec.stdlib_kernels\n"
            "try:\n    tilec.nn\nexcept ImportError as e:\n    print('ImportError')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "ImportError"


def test_parameter_names_are_torchs_and_hugging_faces():
    layer = DecoderLayer()
    assert sorted(layer.state_dict()) == sorted([
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight"])
    assert tuple(layer.self_attn.k_proj.weight.shape) == (2 * 64, 256)
    ln = tnn.LayerNorm(10)
    assert sorted(ln.state_dict()) == sorted(torch.nn.LayerNorm(10).state_dict())
    assert tnn.LayerNorm(10, bias=False).bias is None and tnn.LayerNorm(10, elementwise_affine=False).weight is None
    rot = tnn.RotaryEmbedding(8, base=100.0)
    assert torch.allclose(rot.inv_freq, 1.0 / 100.0 ** (torch.arange(0, 8, 2).float() / 8))
    assert "inv_freq" not in rot.state_dict()   # a non-persistent buffer, as Hugging Face's


def test_bad_module_arguments():
    with pytest.raises(ValueError, match="normalized_shape"):
        tnn.LayerNorm((4, 5))
    with pytest.raises(ValueError, match="num_key_value_heads"):
        tnn.Attention(64, 4, 3)
    with pytest.raises(ValueError, match="dim must be even"):
        tnn.RotaryEmbedding(7)
    with pytest.raises(ValueError, match="reduction"):
        tnn.LinearCrossEntropyLoss(reduction="avg")


def test_decoder_layer_traced_forward_and_backward(cpu_fake):
    layer = DecoderLayer(dim=64, heads=4, kv_heads=2, ffn=96).to(torch.bfloat16)
    loss_fn = tnn.LinearCrossEntropyLoss()
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = {n: torch.empty_like(p).requires_grad_(True) for n, p in layer.named_parameters()}
        x = torch.empty(2, 33, 64, dtype=torch.bfloat16, requires_grad=True)
        head = torch.empty(97, 64, dtype=torch.bfloat16, requires_grad=True)
        target = torch.empty(2, 33, dtype=torch.int64)
        spy = OpSpy()
        with spy:
            y = torch.func.functional_call(layer, params, (x,))
            loss = loss_fn(y, head, target)
            grads = torch.autograd.grad(loss, [x, head, *params.values()])
    assert y.shape == x.shape and loss.shape == ()
    assert [g.shape for g in grads] == [x.shape, head.shape, *(p.shape for p in params.values())]
    assert spy.seen == {"rms_norm": 2, "rms_norm_backward": 2, "rope": 2, "rope_backward": 2, "attention": 1,
                        "attention_backward": 1, "swiglu": 1, "swiglu_backward": 1, "linear_cross_entropy": 1}


def test_decoder_layer_exports_as_one_graph(cpu_fake):
    # torch.export traces with fake tensors through dynamo, which a graph break would stop:
    # what torch.compile(fullgraph=True) needs of the modules' Python
    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = DecoderLayer(dim=64, heads=4, kv_heads=2, ffn=96)
            self.head = torch.nn.Linear(64, 97, bias=False)
            self.loss = tnn.LinearCrossEntropyLoss()

        def forward(self, x, target):
            return self.loss(self.layer(x), self.head.weight, target)

    model = WithLoss().to(torch.bfloat16)
    x, target = torch.randn(2, 33, 64, dtype=torch.bfloat16), torch.randint(0, 97, (2, 33))
    ep = torch.export.export(model, (x, target))
    ops = Counter(str(n.target) for n in ep.graph.nodes if "tilec" in str(n.target))
    assert ops == {"tilec.rms_norm.default": 2, "tilec.rope.default": 2, "tilec.attention.default": 1,
                   "tilec.swiglu.default": 1, "tilec.linear_cross_entropy.default": 1}


@pytest.fixture
def hf_llama():
    transformers = pytest.importorskip("transformers")
    import importlib
    mod = importlib.import_module("transformers.models.llama.modeling_llama")
    original = mod.apply_rotary_pos_emb
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    yield transformers, cfg
    mod.apply_rotary_pos_emb = getattr(mod.apply_rotary_pos_emb, "__tilec_original__", original)


def test_transformers_patch_traced(hf_llama, cpu_fake):
    transformers, cfg = hf_llama
    from tilec.integrations import transformers as tt
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    done = tt.apply(model)
    assert done == {"rms_norm": 5, "mlp": 2, "rope": 1, "attention": 1, "loss": 1}
    assert tt.apply(model) == {"rms_norm": 0, "mlp": 0, "rope": 0, "attention": 1, "loss": 0}   # nothing twice
    with FakeTensorMode(allow_non_fake_inputs=True):
        params = {n: torch.empty_like(p).requires_grad_(True) for n, p in model.named_parameters()}
        ids = torch.randint(0, 97, (2, 33))
        spy = OpSpy()
        with spy:
            out = torch.func.functional_call(model, params, (ids,), {"labels": ids})
            grads = torch.autograd.grad(out.loss, list(params.values()))
    assert out.loss.shape == () and out.logits is None
    assert [g.shape for g in grads] == [p.shape for p in params.values()]
    assert spy.seen == {"rms_norm": 5, "rms_norm_backward": 5, "rope": 4, "rope_backward": 4, "attention": 2,
                        "attention_backward": 2, "swiglu": 2, "swiglu_backward": 2, "linear_cross_entropy": 1}


def test_transformers_patch_refuses_other_models():
    from tilec.integrations import transformers as tt

    class Config:
        model_type = "gpt2"

    class Model(torch.nn.Module):
        config = Config()

    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        tt.apply(Model())


# ----------------------------------------------------------------------------- GPU
def _rel(got, want):
    return (got.double() - want.double()).abs().max().item() / max(want.double().abs().max().item(), 1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [("float16", 1e-2), ("bfloat16", 4e-2)])   # (attention: 2-byte)
def test_decoder_layer_matches_float64(dtype, tol):
    torch.manual_seed(0)
    layer = DecoderLayer().cuda().to(getattr(torch, dtype))
    x = torch.randn(2, 77, 256, device="cuda", dtype=layer.input_layernorm.weight.dtype, requires_grad=True)
    y = layer(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    P = {n: p.detach().double().requires_grad_(True) for n, p in layer.named_parameters()}
    x64 = x.detach().double().requires_grad_(True)
    y64 = reference_layer(layer, P, x64)
    y64.backward(dy.double())
    assert _rel(y, y64) < tol
    assert _rel(x.grad, x64.grad) < 3 * tol
    for n, p in layer.named_parameters():
        assert _rel(p.grad, P[n].grad) < 3 * tol, n


@pytest.mark.gpu
def test_decoder_layer_compiles_fullgraph_without_breaks():
    torch.manual_seed(1)
    layer = DecoderLayer().cuda().to(torch.bfloat16)
    explanation = torch._dynamo.explain(layer)(torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(layer, fullgraph=True)   # a graph break raises
    x = torch.randn(2, 100, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    xc = x.detach().clone().requires_grad_(True)
    layer(x).float().square().mean().backward()
    want = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad(set_to_none=True)
    compiled(xc).float().square().mean().backward()   # AOTAutograd's backward through the *_backward ops
    assert _rel(xc.grad, x.grad) < 3e-2
    for g, p in zip(want, layer.parameters()):
        assert _rel(p.grad, g) < 3e-2


@pytest.mark.gpu
def test_decoder_layer_cuda_graph_capture_and_replay():
    torch.manual_seed(2)
    layer = DecoderLayer().cuda().to(torch.bfloat16)
    params = list(layer.parameters())
    x = torch.randn(2, 100, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm up: every kernel compiles before the capture
        for _ in range(2):
            layer(x).backward(dy)
    torch.cuda.current_stream().wait_stream(side)
    layer.zero_grad(set_to_none=True)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(x)
        out.backward(dy)
    captured = [x.grad] + [p.grad for p in params]   # written by every replay
    for _ in range(2):
        with torch.no_grad():
            x.copy_(torch.randn_like(x))
            dy.copy_(torch.randn_like(dy))
        graph.replay()
        torch.cuda.synchronize()
        xe = x.detach().clone().requires_grad_(True)
        ye = layer(xe)
        want = torch.autograd.grad(ye, [xe] + params, dy)
        # the same kernels on the same data (cuBLAS may pick another algorithm inside a graph, so
        # not asserted bit for bit; a replay on stale inputs would be off by O(1))
        assert _rel(out, ye) < 1e-2
        for got, w in zip(captured, want):
            assert _rel(got, w) < 1e-2


@pytest.mark.gpu
def test_layer_norm_module_and_linear_cross_entropy_loss():
    torch.manual_seed(3)
    ln = tnn.LayerNorm(333).cuda()
    ref = torch.nn.LayerNorm(333).cuda().double()
    with torch.no_grad():
        ln.weight.copy_(torch.randn(333))
        ln.bias.copy_(torch.randn(333))
        ref.weight.copy_(ln.weight)
        ref.bias.copy_(ln.bias)
    x = torch.randn(5, 7, 333, device="cuda", requires_grad=True)
    x64 = x.detach().double().requires_grad_(True)
    ln(x).square().sum().backward()
    ref(x64).square().sum().backward()
    assert _rel(x.grad, x64.grad) < 1e-4 and _rel(ln.weight.grad, ref.weight.grad) < 1e-4
    h = torch.randn(300, 64, device="cuda", requires_grad=True)
    w = torch.randn(1000, 64, device="cuda", requires_grad=True)
    t = torch.randint(0, 1000, (300,), device="cuda")
    loss = tnn.LinearCrossEntropyLoss(chunk=128)(h, w, t)
    loss.backward()
    h64, w64 = (v.detach().double().requires_grad_(True) for v in (h, w))
    want = F.cross_entropy(h64 @ w64.T, t)
    want.backward()
    assert _rel(loss, want) < 1e-5 and _rel(h.grad, h64.grad) < 1e-4 and _rel(w.grad, w64.grad) < 1e-4


@pytest.mark.gpu
def test_patched_tiny_llama_matches_eager(hf_llama):
    import copy
    transformers, cfg = hf_llama
    from tilec.integrations import transformers as tt
    torch.manual_seed(4)
    eager = transformers.LlamaForCausalLM(copy.deepcopy(cfg)).cuda().to(torch.bfloat16).train()
    patched = transformers.LlamaForCausalLM(copy.deepcopy(cfg)).cuda().to(torch.bfloat16).train()
    patched.load_state_dict(eager.state_dict())
    ids = torch.randint(0, 97, (2, 45), device="cuda")
    labels = ids.clone()
    labels[0, :5] = -100
    a = eager(input_ids=ids, labels=labels)     # before the patch (its rope is the module's)
    a.loss.backward()
    with torch.no_grad():
        logits = eager(input_ids=ids).logits
    tt.apply(patched)
    b = patched(input_ids=ids, labels=labels)
    b.loss.backward()
    assert b.logits is None and _rel(b.loss, a.loss) < 2e-2
    for (n, p), q in zip(eager.named_parameters(), patched.parameters()):
        assert _rel(q.grad, p.grad) < 1e-1, n   # bf16 both ways, rounded at different points
    with torch.no_grad():   # without labels: the model's own forward through the patched layers
        assert _rel(patched(input_ids=ids).logits, logits) < 5e-2
