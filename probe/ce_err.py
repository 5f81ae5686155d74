import torch, tilec.stdlib_kernels as sk
torch.manual_seed(0)
for shape in [(1, 7), (5, 4097), (2, 16385), (7, 33), (3, 1000), (64, 32000)]:
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = (torch.randn(shape, device="cuda") * 3).to(dtype)
        t = torch.randint(0, shape[1], (shape[0],), device="cuda")
        got = sk.cross_entropy(x, t, reduction="none").double()
        ref = torch.nn.functional.cross_entropy(x.double(), t, reduction="none")
        d = (got - ref).abs()
        print(shape, dtype, "max abs", f"{d.max().item():.3g}", "rel", f"{(d.norm()/ref.norm()).item():.3g}", "worst row", d.argmax().item(), got[d.argmax()].item(), ref[d.argmax()].item())
