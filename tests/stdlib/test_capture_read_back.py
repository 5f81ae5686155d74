"""During a CUDA graph capture an op must not read device memory back to the host: the
entry points that would (a matmul scale given as a device array, embedding_backward's
DeviceArray ids sorted on the host) refuse with an error naming the argument before any
launch; mla_decode skips its host check of the lengths instead. The captures themselves run
on the GPU (tests/runtime/test_graph_gpu.py, tests/stdlib/test_torch_ops.py)."""
from __future__ import annotations

import numpy as np
import pytest

import tilec as tc
import tilec.stdlib_kernels as sk
from tilec.stdlib_kernels import _common


@pytest.fixture
def capture(monkeypatch):
    """A tc.Graph capture running on this thread, as the stdlib sees it."""
    monkeypatch.setattr(_common, "current_stream", lambda: 7)


def _device_array(shape, dtype):
    itemsize = dtype.itemsize
    strides = tuple(int(np.prod(shape[i + 1:])) * itemsize for i in range(len(shape)))
    return tc.DeviceArray(1 << 20, shape, strides, dtype, 0)


def test_a_device_scale_is_refused_while_capturing(capture):
    a = np.ones((4, 8), np.float16)
    with pytest.raises(RuntimeError, match="matmul: scale_a would be read back.*CUDA graph capture.*Python float"):
        sk.matmul(a, a.T.copy(), scale_a=_device_array((1,), tc.float32))


def test_host_scales_still_work_while_capturing(capture):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 16)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    got = sk.matmul(a, b, scale_a=np.array([2.0], np.float32), scale_b=0.5)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_embedding_backward_refuses_device_ids_it_would_sort_on_the_host(capture):
    grad = _device_array((6, 4), tc.float32)
    ids = _device_array((6,), tc.int64)
    with pytest.raises(RuntimeError, match="embedding_backward: indices would be read back"):
        sk.embedding_backward(grad, ids, 10)


def test_no_capture_no_refusal():
    assert not _common.capturing(np.ones(3))
    _common.refuse_read_back(np.ones(3), "x", "op", "")     # host arrays are never refused
