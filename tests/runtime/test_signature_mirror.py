"""One specialization signature (`specialize.signature_of`): the launcher keys prepared launches
on it and the specialization derives its view types from it (`view_type_of`). Checked against
a direct reading of the array, written here as the rule's reference: a signature that lost
something the view type needs would give two arrays one prepared launch but two kernels."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilec import dtypes as dt
from tilec.ir.types import ViewType
from tilec.specialize import (ArrayInfo, array_signature, int_signature, scalar_spec, signature_of,
                              stride_divisibility, view_type_for)

extents = st.sampled_from([1, 2, 3, 15, 16, 17, 32, 1000, 4096, 2 ** 31 + 16])
strides = st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16, 17, 24, 48, 1000, 4096, 20008, -1, -16, -24, 2 ** 30])
arrays = st.builds(
    lambda shape, strd, ptr, d: ArrayInfo(ptr, tuple(shape), tuple(strd[:len(shape)]), d, 0),
    st.lists(extents, min_size=1, max_size=3),
    st.lists(strides, min_size=3, max_size=3),
    st.sampled_from([0, 2, 4, 8, 16, 4096 + 8, 4096]),
    st.sampled_from([dt.float32, dt.float16, dt.int8, dt.float64]),
)


def reference_view_type(info: ArrayInfo) -> ViewType:
    """The view type read straight from the array (docs/internals.md, Specialization)."""
    rank = len(info.shape)
    static = [None] * rank
    if info.strides[-1] == 1 or info.shape[-1] == 1:
        static[-1] = 1
    elif rank >= 2 and info.strides[-2] == 1:
        static[-2] = 1
    max_offset = sum((s - 1) * abs(st) for s, st in zip(info.shape, info.strides) if s > 0)
    small = max_offset < 2 ** 31 and all(s < 2 ** 31 for s in info.shape)
    item = info.dtype.itemsize
    align = 16 if info.ptr % 16 == 0 else (item if info.ptr % item == 0 else 1)
    shape_div = tuple(16 if s % 16 == 0 else 1 for s in info.shape)
    stride_div = tuple(stride_divisibility(s) if st is None else 1 for s, st in zip(info.strides, static))
    return ViewType(info.dtype, rank, tuple(static), dt.int32 if small else dt.int64, align, shape_div, stride_div)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(arrays)
def test_the_view_type_of_the_signature_is_the_arrays(a):
    assert view_type_for(a) == reference_view_type(a)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(arrays, arrays)
def test_equal_signatures_mean_equal_specializations(a, b):
    if array_signature(a) == array_signature(b):
        assert reference_view_type(a) == reference_view_type(b)


def test_column_major_and_strided_matrices_differ():
    col = ArrayInfo(0, (64, 64), (1, 64), dt.float32, 0)
    strided = ArrayInfo(0, (64, 64), (3, 192), dt.float32, 0)
    assert view_type_for(col) != view_type_for(strided)
    assert array_signature(col) != array_signature(strided)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1), st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1))
def test_int_signatures_decide_the_scalar_spec(a, b):
    # for Python ints the launcher's int part and specialize's ParamSpec come from one rule
    assert signature_of(a) == (int_signature(a), None)
    if int_signature(a) == int_signature(b):
        assert scalar_spec("n", a) == scalar_spec("n", b)


def test_signatures_of_other_arguments():
    assert signature_of(2.5) == (float, None)
    assert signature_of(True) == (bool, None)
    assert signature_of(np.int64(16)) == ((np.int64, int_signature(16)), None)
    assert signature_of(np.float32(1)) == (np.float32, None)
    assert signature_of("x") == (None, None)
    a = np.zeros((4, 16), np.float32)
    sig, info = signature_of(a)
    assert info.device == -1 and info.shape == (4, 16) and sig == array_signature(info)
