"""A numpy Philox4x32-10 written from the paper's definition, to check the in-kernel one."""
from __future__ import annotations

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Four uint32 arrays of output words for counters (c0..c3) under key (k0, k1)."""
    c = [np.asarray(v, dtype=np.uint64) & MASK for v in (c0, c1, c2, c3)]
    k0, k1 = int(k0) & 0xFFFFFFFF, int(k1) & 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
        p0, p1 = c[0] * M0, c[2] * M1
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & MASK,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & MASK]
    return [v.astype(np.uint32) for v in c]


def randint4x(seed: int, offsets):
    """tc.randint4x's mapping: key = the seed's 64 bits, counter = (offset lo, offset hi, 0, 0)."""
    s = int(seed) & 0xFFFFFFFFFFFFFFFF
    off = np.asarray(offsets, dtype=np.int64).astype(np.uint64)
    zero = np.zeros_like(off)
    return philox4x32_10(off & MASK, off >> np.uint64(32), zero, zero, s & 0xFFFFFFFF, s >> 32)


def uniform(words):
    return (np.asarray(words) >> np.uint32(8)).astype(np.float64) * 2.0 ** -24


def dropout_keep(seed: int, n: int, p: float):
    """The keep mask dropout(x, p, seed) uses for the element of flat index 0..n-1."""
    i = np.arange(n, dtype=np.int64)
    words = randint4x(seed, i // 4)
    w = np.choose(i % 4, words)
    return uniform(w) >= np.float32(p)
