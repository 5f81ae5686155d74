"""Kernels whose pointer loads are realigned (tc.load(..., realign=True)): shared by the CPU
tests (tests/codegen/test_realign.py) and the GPU ones (tests/runtime/test_realign_gpu.py)."""
import tilec as tc


@tc.kernel
def shifted_copy(x, y, shift, n, REALIGN: tc.constexpr, BLOCK: tc.constexpr, POLICY: tc.constexpr = None):
    # y[i] = x[i + shift] for i < n: x's pointers run contiguous from an address that is
    # aligned only when shift is a multiple of the group; y's are aligned. Masked: the
    # first and last groups of x hold elements nothing wants.
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    t = tc.load(x.ptr + shift + offs, mask=offs < n, other=-1, realign=REALIGN, eviction_policy=POLICY)
    tc.store(y.ptr + offs, t, mask=offs < n)


@tc.kernel
def shifted_copy_full(x, y, shift, REALIGN: tc.constexpr, BLOCK: tc.constexpr):
    # unmasked: every element of x[shift : shift + grid * BLOCK] is wanted
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.store(y.ptr + offs, tc.load(x.ptr + shift + offs, realign=REALIGN))


@tc.kernel
def shifted_windows(x, y, lead, n, REALIGN: tc.constexpr, GROUP: tc.constexpr, BLOCK: tc.constexpr):
    # A row of x read in y's window: y's row starts `lead` elements into an aligned window
    # of y; x's (one row, any offset) is read at the same columns. The mask is two compares
    # per element against two values per group, as the stdlib's windows make it.
    grp = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK // GROUP)[:, None] * GROUP
    e = tc.arange(0, GROUP)[None, :]
    lo = lead - grp
    inside = (e >= lo) & (e < lo + n)
    t = tc.load(x.ptr - lead + grp + e, mask=inside, other=0, realign=REALIGN)
    tc.store(y.ptr - lead + grp + e, t, mask=inside)
