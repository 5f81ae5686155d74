"""Run by test_fault_gpu.py (and by hand): a tilec kernel stores far outside its array, then
the process tries what it can still do. One line per step, `STEP: ok` or `STEP: DriverError
context_lost=... launch=... :: message`; exits 0 once every step has answered (a hang or a
crash is what the test guards against).

    python tests/runtime/fault_recovery_demo.py
"""
import numpy as np

import tilec as tc
import tilec.runtime as rt


@tc.kernel
def poke(out, x, far, BLOCK: tc.constexpr):
    offs = tc.arange(0, BLOCK)
    tc.store(out.ptr + far + offs, tc.load(x.ptr + offs))   # `far` elements past out: no memory there


@tc.kernel
def fill(out, BLOCK: tc.constexpr):
    tc.store(out.ptr + tc.arange(0, BLOCK), tc.full((BLOCK,), 1.0, tc.float32))


def step(label, fn):
    try:
        fn()
        print(f"{label}: ok", flush=True)
    except tc.DriverError as e:
        text = str(e).replace("\n", " ")
        print(f"{label}: DriverError context_lost={e.context_lost} launch={e.launch!r} :: {text}", flush=True)


x = rt.from_numpy(np.arange(64, dtype=np.float32).reshape(4, 16))
out = rt.zeros((32,), tc.float32)
step("GOOD", lambda: (fill[(1,)](out, BLOCK=16), rt.synchronize()))   # compiled and loaded before the fault
step("LAUNCH", lambda: poke[(3,)](out, x, 1 << 40, BLOCK=16))
step("SYNC", rt.synchronize)
step("RELAUNCH", lambda: poke[(3,)](out, x, 1 << 40, BLOCK=16))
step("OTHER", lambda: fill[(1,)](out, BLOCK=16))
step("NEWKERNEL", lambda: fill[(1,)](out, BLOCK=32))                  # a new signature: compile, then load
step("ALLOC", lambda: rt.zeros((4,), tc.float32))
step("COPY", out.to_numpy)
print("DONE", flush=True)
