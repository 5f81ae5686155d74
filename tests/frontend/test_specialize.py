"""Specialization of calls, signature text, grids and the kernel object."""
import numpy as np
import pytest

import tilec as tc
from tilec.ir.types import ScalarType, ViewType
from tilec.kernel import normalize_grid
from tilec.specialize import ArrayInfo, parse_signature, register_array_adapter, specialize, _ADAPTERS


@tc.kernel
def scale(x, out, n, alpha, flag, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    mask = offs < n
    v = tc.load(x.ptr + offs, mask=mask)
    if flag:
        v = v * alpha
    tc.store(out.ptr + offs, v, mask=mask)


@tc.kernel(do_not_specialize=["n"])
def scale_dns(x, out, n, alpha, flag, BLOCK: tc.constexpr):
    offs = tc.program_id(0) * BLOCK + tc.arange(0, BLOCK)
    tc.store(out.ptr + offs, tc.load(x.ptr + offs, mask=offs < n) * n, mask=offs < n)


def test_scalars_views_and_constexprs():
    x = np.zeros((8, 32), np.float16)
    spec, args = specialize(scale, (x, x[:, ::2], 32, 0.5, True), {"BLOCK": 64})
    # extents and run-time strides divisible by 16 are marked (8 rows: no; 32 columns and row stride: yes)
    assert spec["x"].type == ViewType(tc.float16, 2, (None, 1), tc.int32, 16, (1, 16), (16, 1))
    assert spec["out"].type.strides == (None, None)          # a non-unit last stride is not specialized
    assert spec["n"].kind == "scalar" and spec["n"].divisible_by_16
    assert spec["alpha"].type == ScalarType(tc.float32)
    assert spec["flag"].type == ScalarType(tc.bool_)
    assert spec.constexprs == {"BLOCK": 64}
    assert spec.arg_names == ["x", "out", "n", "alpha", "flag"]
    assert len(args) == 5 and args[0] is x


def test_int_width_one_folding_and_do_not_specialize():
    x = np.zeros(4, np.float32)
    spec, args = specialize(scale, (x, x, 2 ** 40 + 1, 1.0, False), {"BLOCK": 4})
    assert spec["n"].type == ScalarType(tc.int64) and not spec["n"].divisible_by_16
    spec, args = specialize(scale, (x, x, 1, 1.0, False), {"BLOCK": 4})
    assert spec["n"].kind == "one" and len(args) == 4
    m = scale.ir(spec)
    assert m.func().attrs["arg_names"] == ["x", "out", "alpha", "flag"]
    spec, args = specialize(scale_dns, (x, x, 1, 1.0, False), {"BLOCK": 4})
    assert spec["n"].kind == "scalar" and not spec["n"].divisible_by_16 and len(args) == 5
    assert np.int64(5) is not None and specialize(scale, (x, x, np.int64(5), np.float64(2), False),
                                                  {"BLOCK": 4})[0]["alpha"].type == ScalarType(tc.float64)


@tc.kernel
def add_arg(x, out, s, WANT: tc.constexpr):
    r = tc.load(x, index=(0,), shape=(16,)) + s
    tc.static_assert(r.dtype == WANT, "x + s has the dtype of a typed scalar")
    tc.store(out, index=(0,), tile=r)


def test_one_is_specialized_by_value_not_type():
    """A specialized 1 is a constant of the argument's type (i32, or a numpy integer's own),
    never a weak Python int: `i8 tile + s` is i32 for s = 1 as for s = 2."""
    x, out = np.zeros(16, np.int8), np.zeros(16, np.int32)
    for s in (1, 2):
        spec, args = specialize(add_arg, (x, out, s), {"WANT": tc.int32})
        assert spec["s"].kind == ("one" if s == 1 else "scalar") and len(args) == (2 if s == 1 else 3)
        add_arg.ir(spec)  # the static_assert holds for both
    spec, _ = specialize(add_arg, (x, out, 1), {"WANT": tc.int32})
    assert "tile.constant {value = 1} : i32" in str(add_arg.ir(spec))
    with pytest.raises(tc.CompilationError, match="x \\+ s has the dtype of a typed scalar"):
        add_arg.ir(specialize(add_arg, (x, out, 1), {"WANT": tc.int8})[0])
    wide, _ = specialize(add_arg, (x, np.zeros(16, np.int64), np.int64(1)), {"WANT": tc.int64})
    assert wide["s"].kind == "one" and wide["s"].type == ScalarType(tc.int64)
    assert "tile.constant {value = 1} : i64" in str(add_arg.ir(wide))
    assert wide["s"].text() == "1:i64" and parse_signature(add_arg, str(wide)) == wide
    assert parse_signature(add_arg, "x=i8[?], out=i32[?], s=1, WANT=i32")["s"].type == ScalarType(tc.int32)
    with pytest.raises(ValueError, match="needs an integer type"):
        parse_signature(add_arg, "x=i8[?], out=i32[?], s=1:f32, WANT=i32")


def test_index_width_and_alignment():
    big = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), shape=(2, 2 ** 31), strides=(4, 0))
    spec, _ = specialize(scale, (big, np.zeros(3, np.float32)[1:], 3, 1.0, True), {"BLOCK": 4})
    assert spec["x"].type.index is tc.int64
    assert spec["out"].type.align == 4


def test_specialization_is_hashable_and_keys_the_ir_cache():
    x = np.zeros(64, np.float32)
    s1, _ = specialize(scale, (x, x, 64, 1.0, True), {"BLOCK": 64})
    s2, _ = specialize(scale, (x.copy(), x.copy(), 128, 2.0, True), {"BLOCK": 64})
    assert s1 == s2 and hash(s1) == hash(s2)
    assert scale.ir(s1) is scale.ir(s2)
    s3, _ = specialize(scale, (x, x, 64, 1.0, True), {"BLOCK": 32})
    assert s3 != s1


def test_argument_errors_name_the_parameter():
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="missing a required argument: 'flag'"):
        specialize(scale, (x, x, 4, 1.0), {"BLOCK": 4})
    with pytest.raises(TypeError, match="too many positional arguments"):
        specialize(scale, (x, x, 4, 1.0, True, 4, 5), {})
    with pytest.raises(TypeError, match="parameter 'alpha' got a list"):
        specialize(scale, (x, x, 4, [1.0], True), {"BLOCK": 4})
    with pytest.raises(TypeError, match="parameter 'BLOCK' is a tc.constexpr"):
        specialize(scale, (x, x, 4, 1.0, True), {"BLOCK": x})
    with pytest.raises(TypeError, match="parameter 'x': 0-d arrays"):
        specialize(scale, (np.zeros((), np.float32), x, 4, 1.0, True), {"BLOCK": 4})


def test_array_adapters():
    class Fake:
        def __init__(self, n):
            self.n = n

    register_array_adapter(lambda o: isinstance(o, Fake),
                           lambda o: ArrayInfo(4096, (o.n,), (1,), tc.bfloat16, "cuda:0"))
    try:
        spec, args = specialize(scale, (Fake(10), Fake(10), 10, 1.0, True), {"BLOCK": 16})
        assert spec["x"].type == ViewType(tc.bfloat16, 1, (1,), tc.int32, 16)
        assert isinstance(args[0], Fake)
    finally:
        _ADAPTERS.pop(0)


def test_parse_signature():
    spec = parse_signature(scale, "x=f32[?,?]:strided:i64, out=bf16[?]:align=2, n=i32:16, alpha=f32, flag=bool, "
                                  "BLOCK=256")
    assert spec["x"].type == ViewType(tc.float32, 2, (None, None), tc.int64, 16)
    assert spec["out"].type == ViewType(tc.bfloat16, 1, (1,), tc.int32, 2)
    assert spec["n"].divisible_by_16 and spec["flag"].type == ScalarType(tc.bool_)
    assert spec.constexprs == {"BLOCK": 256}
    assert parse_signature(scale, str(spec)) == spec
    positional = parse_signature(scale, "f32[?], f32[?], 1, f32, i1, 8")
    assert positional["n"].kind == "one" and positional.constexprs == {"n": 1, "BLOCK": 8}
    assert parse_signature(scale, str(positional)) == positional
    for bad, msg in [("x=f32[?]", "does not give parameter 'out'"),
                     ("x=f32[?], out=f32[?], n=i32, alpha=f32, flag=i1, BLOCK=x+", "is a tc.constexpr"),
                     ("x=q32[?], out=f32[?], n=i32, alpha=f32, flag=i1, BLOCK=1", "unknown dtype"),
                     ("x=f32[?], out=f32[?], n=f32:16, alpha=f32, flag=i1, BLOCK=1", "divisible by 16"),
                     ("x=f32[?], zz=f32[?]", "has no parameter 'zz'")]:
        with pytest.raises(ValueError, match=msg):
            parse_signature(scale, bad)
    assert "f16[?,?]:strided" in parse_signature.__doc__


def test_grids():
    assert normalize_grid((3,), {}) == (3, 1, 1)
    assert normalize_grid(np.int64(2), {}) == (2, 1, 1)
    assert normalize_grid(lambda a: (a["n"] // a["BLOCK"], 2), {"n": 64, "BLOCK": 16}) == (4, 2, 1)
    with pytest.raises(TypeError, match="tuple of 1 to 3 ints"):
        normalize_grid((1, 2, 3, 4), {})
    with pytest.raises(ValueError, match=">= 0"):
        normalize_grid((-1,), {})


def test_launch_with_callable_grid_on_the_interpreter():
    rng = np.random.default_rng(1)
    x = rng.random(100, dtype=np.float32)
    out = np.zeros_like(x)
    with tc.interpret():
        scale[lambda a: ((a["n"] + a["BLOCK"] - 1) // a["BLOCK"],)](
            x, out, 100, 3.0, True, BLOCK=32, num_warps=4)
    np.testing.assert_allclose(out, 3.0 * x, rtol=1e-6)
    with tc.interpret(), pytest.raises(ValueError, match="num_warps"):
        scale[(1,)](x, out, 100, 3.0, True, BLOCK=32, num_warps=3)


def test_source_hash_follows_called_funcs(tmp_path):
    import importlib.util
    src = ("import tilec as tc\nK = 4\n@tc.func\ndef f(x):\n    return x + {c}\n"
           "@tc.kernel\ndef k(x):\n    tc.store(x, index=(0,), tile=tc.zeros((K,), tc.float32) + f(1.0))\n")
    hashes = []
    for i, c in enumerate(("1.0", "2.0")):
        p = tmp_path / f"mod{i}.py"
        p.write_text(src.format(c=c))
        spec = importlib.util.spec_from_file_location(f"mod{i}", p)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        hashes.append(mod.k.source_hash())
    assert hashes[0] != hashes[1] and len(hashes[0]) == 64


def test_signature_with_constexpr_keywords_and_misspelled_options():
    @tc.kernel
    def copy(x, out, BK: tc.constexpr):
        tc.store(out, index=(0,), tile=tc.load(x, index=(0,), shape=(BK,)))

    spec = copy.specialization("x=f32[?], out=f32[?]", BK=64)
    assert spec.constexprs == {"BK": 64}
    assert spec == copy.specialization("x=f32[?], out=f32[?], BK=64")
    with pytest.raises(ValueError, match="'BK' is given twice"):
        copy.specialization("x=f32[?], out=f32[?], BK=64", BK=32)
    with pytest.raises(TypeError, match="'out' is a run-time parameter; give its type in the signature"):
        copy.specialization("x=f32[?], BK=64", out=np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="'num_warp'; did you mean 'num_warps'"):
        copy.compile("x=f32[?], out=f32[?], BK=64", num_warp=4)
    with pytest.raises(TypeError, match="'BKK'; did you mean 'BK'"):
        copy.compile(np.zeros(4, np.float32), np.zeros(4, np.float32), BKK=4)
    with pytest.raises(TypeError, match="'num_warp'; did you mean 'num_warps'"):
        with tc.interpret():
            copy[(1,)](np.zeros(4, np.float32), np.zeros(4, np.float32), BK=4, num_warp=4)
    with pytest.raises(TypeError, match="a signature string comes alone"):
        copy.compile("x=f32[?]", "out=f32[?]")
