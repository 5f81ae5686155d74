"""tilec time of every membound case of >= 256 MB against a copy of the same bytes, for the
installed tilec (run it once per build to compare two builds in one device call)."""
import json, sys
import torch
sys.path.insert(0, "bench")
import membound as mb
import tilec
ms = mb._timer()
mb._warm_up(torch)
rows = []
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None  # shape names to keep, as 4096x50257
for op in mb.OPS:
    for shape, dtype in op.cases:
        if only and "x".join(map(str, shape)) not in only:
            continue
        inputs = op.make(torch, shape, getattr(torch, dtype))
        moved = op.bytes_moved(*inputs)
        if moved < 256e6:
            continue
        a = torch.empty(int(moved) // 2, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
        t = ms(lambda: op.tilec(*inputs)); c = ms(lambda: b.copy_(a))
        rows.append((op.name, "x".join(map(str, shape)), dtype, round(100 * c / t, 1)))
        print(*rows[-1], flush=True)
        del a, b, inputs
json.dump({"tilec": tilec.__file__, "rows": rows}, open(sys.argv[1], "w"))
