"""The launcher's fast per-call signature must be at least as fine as the frontend's
specialization: two arrays with one signature must get one ViewType, or a prepared
launch would run a kernel compiled for the other array."""
from hypothesis import given, settings, strategies as st

from tilec import dtypes as dt
from tilec.runtime.launcher import _array_sig
from tilec.specialize import ArrayInfo, view_type_for

extents = st.sampled_from([1, 2, 3, 15, 16, 17, 32, 1000, 4096])
strides = st.sampled_from([0, 1, 2, 3, 4, 6, 8, 16, 17, 24, 48, 1000, 4096, 20008, -1, -16, -24])
arrays = st.builds(
    lambda shape, strd, ptr, d: ArrayInfo(ptr, tuple(shape), tuple(strd[:len(shape)]), d, "cuda:0"),
    st.lists(extents, min_size=1, max_size=3),
    st.lists(strides, min_size=3, max_size=3),
    st.sampled_from([0, 2, 4, 8, 16, 4096 + 8, 4096]),
    st.sampled_from([dt.float32, dt.float16, dt.int8, dt.float64]),
)


@settings(max_examples=400, deadline=None)
@given(arrays, arrays)
def test_equal_signatures_mean_equal_specializations(a, b):
    if _array_sig(tuple(a)) == _array_sig(tuple(b)):
        assert view_type_for(a) == view_type_for(b)


few_strides = st.lists(st.sampled_from([1, 3, 5, 8, 24, 40, 64, 192]), min_size=3, max_size=3)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([2, 3, 64]), min_size=1, max_size=3), few_strides, few_strides)
def test_arrays_differing_only_in_strides(shape, sa, sb):
    # one shape and pointer, strides from a small set: signatures collide often
    a = ArrayInfo(0, tuple(shape), tuple(sa[:len(shape)]), dt.float32, "cuda:0")
    b = ArrayInfo(0, tuple(shape), tuple(sb[:len(shape)]), dt.float32, "cuda:0")
    if _array_sig(tuple(a)) == _array_sig(tuple(b)):
        assert view_type_for(a) == view_type_for(b)


def test_column_major_and_strided_matrices_differ():
    col = ArrayInfo(0, (64, 64), (1, 64), dt.float32, "cuda:0")
    strided = ArrayInfo(0, (64, 64), (3, 192), dt.float32, "cuda:0")
    assert view_type_for(col) != view_type_for(strided)
    assert _array_sig(tuple(col)) != _array_sig(tuple(strided))
