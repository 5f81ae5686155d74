"""The compiler driver: artifacts, metadata, dumps, cache, and errors that name the op."""
import re
import textwrap

import pytest

from kernels import KERNELS
from llvmlite import ir as llvm_ir

from tilec import dtypes as dt
from tilec.abi import param_slots
from tilec.compiler import compile_kernel, compile_module
from tilec.errors import CompilationError
from tilec.ir import Location, parse
from tilec.ir.core import Op, register_op
from tilec.ir.types import ScalarType
from tilec.lowering.codegen import generate, rule
from tilec.lowering.codegen.casts import convert
from tilec.lowering.pipeline import stamp
from tilec.lowering.target import LLVMResult
from tilec.options import CompileOptions
from tilec.specialize import parse_signature
from tilec.target import Target

H100 = Target.from_arch("sm_90a")


def _spec(name):
    kernel, sig = KERNELS[name]
    return kernel, parse_signature(kernel, sig)


def test_artifacts_and_metadata():
    kernel, spec = _spec("control_flow")
    ck = compile_kernel(kernel, spec, CompileOptions(arch="sm_80", num_warps=2), use_cache=False)
    assert set(ck.asm) >= {"tile", "gpu", "llvm", "ptx", "cubin"}
    assert "tile.for" in ck.asm["tile"] and "#blocked" in ck.asm["gpu"]
    assert "define ptx_kernel void @control_flow" in ck.asm["llvm"]
    assert ".entry control_flow" in ck.asm["ptx"] and ".maxntid 64" in ck.asm["ptx"]
    md = ck.metadata
    assert (md["num_warps"], md["arch"], md["ptx_version"], md["name"]) == (2, "sm_80", "7.0", "control_flow")
    assert {"frontend", "passes", "codegen", "llvm_print", "llvm_parse", "llvm_opt", "emit"} <= set(md["timings"])
    assert all(v >= 0 for v in md["timings"].values()) and md["timings"]["llvm_print"] > 0
    func = parse(ck.asm["tile"]).func()
    assert ck.params == param_slots([a.type for a in func.regions[0].block.args])
    assert ck.arg_names == ["x", "out", "n"]


def test_dump_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_DUMP", str(tmp_path))
    kernel, spec = _spec("arith")
    compile_kernel(kernel, spec, CompileOptions(arch="sm_90a"), use_cache=False)
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = names[0].rsplit(".", 2)[0]
    assert stem.startswith("arith.") and len(stem.split(".")[1]) == 8
    assert names[0].endswith(".00-frontend.ir")
    assert any(n.endswith("-assign_layouts.ir") for n in names)
    assert names[-2].endswith("-llvm.ll") and names[-1].endswith("-ptx.ptx")
    numbers = [int(n.split(".")[2].split("-")[0]) for n in names]
    assert numbers == list(range(len(names)))


def test_dump_keeps_each_options_stages_apart(tmp_path, monkeypatch):
    """One specialization compiled for two archs writes two sets of stage files."""
    monkeypatch.setenv("TILEC_DUMP", str(tmp_path))
    kernel, spec = _spec("arith")
    for arch in ("sm_80", "sm_90a"):
        compile_kernel(kernel, spec, CompileOptions(arch=arch), use_cache=False)
    stems = {p.name.rsplit(".", 2)[0] for p in tmp_path.iterdir()}
    assert len(stems) == 2
    targets = {(tmp_path / f"{s}.{n:02d}-ptx.ptx").read_text().count(".target sm_90a")
               for s in stems for n in range(40) if (tmp_path / f"{s}.{n:02d}-ptx.ptx").exists()}
    assert targets == {0, 1}


@pytest.mark.slow
def test_cache_is_used(tmp_path, monkeypatch):
    from tilec.runtime import cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    kernel, spec = _spec("arith")
    first = compile_kernel(kernel, spec, CompileOptions(arch="sm_80"))
    cache.clear_memory()  # the second compile must come from disk
    second = compile_kernel(kernel, spec, CompileOptions(arch="sm_80"))
    assert second.asm["ptx"] == first.asm["ptx"] and second is not first
    other = compile_kernel(kernel, spec, CompileOptions(arch="sm_90a"))
    assert ".target sm_90a" in other.asm["ptx"]


@pytest.mark.slow
def test_dump_bypasses_a_warm_cache(tmp_path, monkeypatch):
    from tilec.runtime import cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path / "cache"))
    cache.clear_memory()
    kernel, spec = _spec("arith")
    compile_kernel(kernel, spec, CompileOptions(arch="sm_80"))  # now cached
    dump = tmp_path / "dump"
    monkeypatch.setenv("TILEC_DUMP", str(dump))
    compile_kernel(kernel, spec, CompileOptions(arch="sm_80"))
    names = [p.name for p in dump.iterdir()]
    assert any(n.endswith("-frontend.ir") for n in names) and any(n.endswith("-ptx.ptx") for n in names)
    cache.clear_memory()


def test_cache_key_follows_the_compilers_own_source(tmp_path, monkeypatch):
    """Editing any tilec source file (here: a stand-in package tree) changes the key."""
    import tilec
    from tilec import compiler
    pkg = tmp_path / "tilec"
    (pkg / "ir").mkdir(parents=True)
    (pkg / "ir" / "grammar.lark").write_text("start: NAME\n")
    (pkg / "passes.py").write_text("X = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "passes.cpython-311.pyc").write_bytes(b"ignored")
    kernel, spec = _spec("arith")
    opts = CompileOptions(arch="sm_80").validated()

    def key():
        monkeypatch.setattr(compiler, "_COMPILER_HASH", None)
        return compiler.cache_key(kernel, spec, opts)

    monkeypatch.setattr(tilec, "__path__", [str(pkg)])
    base = key()
    assert key() == base  # stable
    (pkg / "__pycache__" / "passes.cpython-311.pyc").write_bytes(b"changed")
    assert key() == base  # bytecode is not source
    (pkg / "passes.py").write_text("X = 2\n")
    edited_py = key()
    (pkg / "ir" / "grammar.lark").write_text("start: INT\n")
    edited_lark = key()
    assert len({base, edited_py, edited_lark}) == 3
    monkeypatch.setattr(compiler, "_COMPILER_HASH", None)


def test_compiler_hash_is_computed_once(monkeypatch):
    from tilec import compiler
    first = compiler.compiler_source_hash()
    monkeypatch.setattr(compiler, "_tree_digest", lambda root: pytest.fail("hashed twice"))
    assert compiler.compiler_source_hash() == first


def test_invalid_options_name_the_kernel():
    kernel, spec = _spec("arith")
    with pytest.raises(CompilationError, match="in kernel 'arith', during options: num_warps"):
        compile_kernel(kernel, spec, CompileOptions(num_warps=5))


@register_op
class _Unlowerable(Op):
    name = "test.unlowerable"
    num_results = 0

    def infer_types(self):
        return []


def _module_with(op_text):
    return parse(textwrap.dedent(f"""
        module {{
          tile.func {{sym_name = "k", arg_names = ["x"]}} (
            {{
              ^bb0(%x: view<1xf32, strides=[1], index=i32, align=16>):
                %p = tile.view_ptr %x : ptr<f32>
                {op_text}
                tile.return
            }}
          )
        }}
    """))


def test_missing_rule_names_kernel_op_and_location():
    m = _module_with('test.unlowerable loc("kern.py":7:3)')
    with pytest.raises(CompilationError) as e:
        generate(stamp(m, CompileOptions(arch="sm_80").validated()))
    err = e.value
    assert err.kernel == "k" and err.stage == "codegen of test.unlowerable"
    assert err.loc == Location("kern.py", 7, 3)
    assert str(err).startswith("kern.py:7:3: in kernel 'k'") and "no codegen rule" in str(err)


def test_rule_failure_is_wrapped():
    m = _module_with('%v = tile.constant {value = 1.0} : f32\n'
                     '                %t = tile.constant {value = true} : i1\n'
                     '                %o = tile.atomic_rmw %p, %v, %t {kind = "add", sem = "bogus"} : f32 '
                     'loc("kern.py":9:5)')
    with pytest.raises(CompilationError, match="kern.py:9:5: in kernel 'k', during codegen of tile.atomic_rmw: "
                                               "cannot lower 'tile.atomic_rmw': atomic sem must be one of"):
        compile_module(m, CompileOptions(arch="sm_80").validated(), run_ptxas=False)


@register_op
class _FpextOfF8Bits(Op):
    """Stands for a codegen bug: its rule fpext's an f8's i8 bits, which LLVM rejects."""
    name = "test.fpext_f8_bits"
    operands_spec = ("x",)

    def infer_types(self):
        return [ScalarType(dt.float32)]


@register_op
class _ConvertMislabelled(_FpextOfF8Bits):
    """Stands for a codegen bug: its rule hands casts.convert f8 bits labelled f16."""
    name = "test.convert_mislabelled"


@rule(_FpextOfF8Bits)
def _fpext_f8_bits(ctx, op):
    ctx.set(op.results[0], ctx.builder.fpext(ctx.get(op.operands[0]), llvm_ir.FloatType()))


@rule(_ConvertMislabelled)
def _convert_mislabelled(ctx, op):
    ctx.set(op.results[0], convert(ctx.builder, ctx.get(op.operands[0]), dt.float16, dt.float32, ctx.target))


def _f8_module(op_text):
    return parse(textwrap.dedent(f"""
        module {{
          tile.func {{sym_name = "k", arg_names = ["x"]}} (
            {{
              ^bb0(%x: view<1xf32, strides=[1], index=i32, align=16>):
                %p = tile.view_ptr %x : ptr<f32>
                %c = tile.constant {{value = 1.5}} : f8e4m3
                %v = {op_text}
                tile.store %p, %v
                tile.return
            }}
          )
        }}
    """))


def test_llvm_rejection_names_the_op_and_location():
    """An instruction LLVM refuses is traced back to the op whose rule emitted it."""
    m = _f8_module('test.fpext_f8_bits %c : f32 loc("kern.py":11:4)')
    with pytest.raises(CompilationError) as e:
        compile_module(m, CompileOptions(arch="sm_80").validated(), run_ptxas=False)
    err = e.value
    assert err.loc == Location("kern.py", 11, 4)
    assert "fpext i8" in err.msg and "(in the code generated for 'test.fpext_f8_bits')" in err.msg
    assert str(err).startswith("kern.py:11:4: in kernel 'k', during LLVM (code of test.fpext_f8_bits)")


def test_conversion_of_a_mislabelled_value_is_an_internal_error():
    """casts.convert checks the LLVM type against the dtype it is told: no invalid IR."""
    m = _f8_module('test.convert_mislabelled %c : f32 loc("kern.py":12:6)')
    with pytest.raises(CompilationError, match=r"kern.py:12:6: in kernel 'k', during codegen of "
                                               r"test.convert_mislabelled: cannot lower 'test.convert_mislabelled': "
                                               r"internal error: a f16 element must be an LLVM half, got i8"):
        compile_module(m, CompileOptions(arch="sm_80").validated(), run_ptxas=False)


def test_scalar_kernel_compiles():
    m = _module_with('%v = tile.constant {value = 2.5} : f32\n                tile.store %p, %v')
    ck = compile_module(m, CompileOptions(arch="sm_90a").validated())
    assert "st.global.b32" in ck.asm["ptx"] or "st.global.f32" in ck.asm["ptx"]


def test_default_arch_without_a_gpu(monkeypatch):
    from tilec.runtime import driver
    monkeypatch.setattr(driver, "is_available", lambda: False)
    kernel, spec = _spec("casts")
    ck = compile_kernel(kernel, spec, CompileOptions(), use_cache=False)
    assert ck.metadata["arch"] == "sm_90a" and ".target sm_90a" in ck.asm["ptx"]


def test_early_return_inside_regions():
    m = parse(textwrap.dedent("""
        module {
          tile.func {sym_name = "k", arg_names = ["x", "n"]} (
            {
              ^bb0(%x: view<1xi32, strides=[1], index=i32, align=16>, %n: i32):
                %pid = tile.program_id {axis = 0} : i32
                %big = tile.cmp %pid, %n {pred = "ge"} : i1
                tile.if %big (
                  {
                    ^bb0():
                      tile.return
                  },
                  {
                    ^bb0():
                      tile.yield
                  }
                )
                %zero = tile.constant {value = 0} : i32
                %one = tile.constant {value = 1} : i32
                %r = tile.for %zero, %n, %one, %zero (
                  {
                    ^bb0(%i: i32, %acc: i32):
                      %neg = tile.cmp %i, %pid {pred = "gt"} : i1
                      tile.if %neg (
                        {
                          ^bb0():
                            tile.return
                        },
                        {
                          ^bb0():
                            tile.yield
                        }
                      )
                      %a2 = tile.add %acc, %i : i32
                      tile.yield %a2
                  }
                ) : i32
                %p = tile.addptr (tile.view_ptr %x : ptr<i32>), %pid : ptr<i32>
                tile.store %p, %r
                tile.return
            }
          )
        }
    """).replace("(tile.view_ptr %x : ptr<i32>)", "%xp").replace(
        "%r = tile.for", "%xp = tile.view_ptr %x : ptr<i32>\n                %r = tile.for"))
    from tilec.lowering.pipeline import run_pipeline
    opts = CompileOptions(arch="sm_80").validated()
    ll = str(generate(run_pipeline(parse(str(m)), opts)))
    assert ll.count("ret void") == 3  # both early exits and the end
    ck = compile_module(m, opts)
    assert "st.global" in ck.asm["ptx"] and ck.asm["cubin"]


def test_spilling_kernel_is_reassembled_with_min_ctas(monkeypatch):
    from tilec import compiler
    from tilec.lowering import ptxas

    calls = []

    def fake_assemble(ptx, arch):
        calls.append(ptx)
        spills = 0 if ".minnctapersm 1" in ptx else 64
        return ptxas.PtxasResult(b"cubin", registers=255 if not spills else 32, spill_stores=spills,
                                 spill_loads=spills)
    monkeypatch.setattr(ptxas, "assemble", fake_assemble)
    ptx = ".visible .entry k(\n)\n.maxntid 128\n{\n\tret;\n}\n"
    kept, result = compiler._assemble(LLVMResult("ll", ptx, {}), H100)
    assert ".maxntid 128\n.minnctapersm 1\n" in kept.ptx and result.spill_stores == 0 and len(calls) == 2
    assert kept.llvm == "ll"
    calls.clear()
    kept, result = compiler._assemble(kept, H100)  # no spills: one run, PTX unchanged
    assert len(calls) == 1 and result.registers == 255


@pytest.mark.parametrize("narrow_spills", [False, True])
def test_floor_that_spills_tries_narrow_invariants_first(monkeypatch, narrow_spills):
    from tilec import compiler
    from tilec.lowering import ptxas

    def fake_assemble(ptx, arch):  # the floor spills unless the kernel keeps its invariants narrow
        spills = 0 if "narrow" in ptx and not narrow_spills or ".minnctapersm" not in ptx else 16
        return ptxas.PtxasResult(b"cubin", registers=80, spill_stores=spills, spill_loads=spills)
    monkeypatch.setattr(ptxas, "assemble", fake_assemble)
    plain = LLVMResult("plain", ".visible .entry k(\n)\n.maxntid 256\n.minnctapersm 3\n{\n\tret;\n}\n", {})
    narrow = LLVMResult("narrow", plain.ptx.replace("ret;", "ret; // narrow"), {})
    kept, result = compiler._assemble(plain, H100, lambda: narrow)
    if narrow_spills:   # the floor is dropped from the plain kernel instead
        assert kept.llvm == "plain" and ".minnctapersm" not in kept.ptx
    else:
        assert kept is narrow
    assert result.spill_stores == 0
    # a kernel that fits its floor is not emitted again
    kept, _ = compiler._assemble(narrow, H100, lambda: pytest.fail("emitted again")) if not narrow_spills \
        else (narrow, None)
    assert kept is narrow


@pytest.mark.parametrize("fits_from,natural,kept", [(6, 96, 6), (6, 72, None), (1, 200, None)])
def test_floor_that_spills_steps_down(monkeypatch, fits_from, natural, kept):
    # 128 threads: floor 7 allows 72 registers, 6 80, 5 96, 4 128, 3 168, 2 255
    from tilec import compiler
    from tilec.lowering import ptxas

    tried = []

    def fake_assemble(ptx, arch):
        floor = re.search(r"\.minnctapersm (\d+)", ptx)
        floor = int(floor.group(1)) if floor else 0
        tried.append(floor)
        spills = 16 if floor > fits_from else 0
        return ptxas.PtxasResult(b"cubin", registers=natural if not floor else 64, spill_stores=spills,
                                 spill_loads=spills)
    monkeypatch.setattr(ptxas, "assemble", fake_assemble)
    plain = LLVMResult("plain", ".visible .entry k(\n)\n.maxntid 128, 1, 1\n.minnctapersm 8\n{\n\tret;\n}\n", {})
    got, result = compiler._assemble(plain, H100)
    if kept:        # the highest floor that fits, after the natural count says which are worth it
        assert f".minnctapersm {kept}\n" in got.ptx and tried == [8, 0, 7, 6]
    elif natural == 72:   # floor 7 holds 72 registers: without a floor is as good
        assert ".minnctapersm" not in got.ptx and tried == [8, 0]
    else:           # no floor fits: dropped
        assert ".minnctapersm" not in got.ptx and tried == [8, 0, 7, 6, 5, 4, 3]
    assert result.spill_stores == 0 and got.llvm == "plain"
