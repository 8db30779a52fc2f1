"""The kernels' CUDA sources compile, on a machine without a GPU: ``mpiring.cuda.sources``.

Every ``.cu`` file of ``mpiring/cuda/csrc`` goes through NVRTC (from ``cuda.bindings``) for
sm_90 with every warning an error, with every name expression its launcher looks kernels up
by, and each of those must lower to a mangled symbol: a typo in the C++, a dtype or op row
without its struct or functor, or a template that does not instantiate fails here, in CI,
instead of at a user's first allreduce. Planted errors show that the check can fail.

Without ``cuda.bindings.nvrtc`` these tests skip, unless ``MPIRING_REQUIRE_NVRTC=1`` (CI sets it:
``pip install -e '.[nvrtc]'``), which turns the missing compiler into a failure.
"""

from __future__ import annotations

import random
import re

import pytest
from nvrtc_support import compile_source

from mpiring.core.ops import DTYPES, OPS, REDUCTIONS, Op
from mpiring.cuda import sources


def test_the_compilation_units_are_known() -> None:
    """Every .cu file has its list of name expressions (a new file must say what it provides)."""
    assert sources.files() == ["direct.cu", "fold.cu", "fold_n.cu", "notice.cu", "oneshot_ll.cu"]
    for name in sources.files():
        assert sources.name_expressions(name)
    with pytest.raises(KeyError):
        sources.name_expressions("nonexistent.cu")


@pytest.mark.parametrize("name", sources.files())
def test_every_source_compiles_with_every_instantiation(nvrtc, name: str) -> None:
    """The file compiles warning-free for sm_90 and every name expression lowers to a kernel."""
    expressions = sources.name_expressions(name)
    compiled, log, lowered = compile_source(nvrtc, sources.source(name), name, expressions)
    assert compiled, f"{name} failed to compile:\n{log}"
    assert not log.strip(), f"{name} compiled with messages:\n{log}"
    assert set(lowered) == set(expressions)
    for expr, symbol in lowered.items():
        assert symbol.startswith("_Z"), (expr, symbol)
    assert len(set(lowered.values())) == len(expressions), "two name expressions lowered to one kernel"


ALONE = [("direct.cu", "oneshot"), ("direct.cu", "twoshot"), ("oneshot_ll.cu", "oneshot_ll"),
         ("notice.cu", "notice"), ("fold_n.cu", "fold_n")]


@pytest.mark.parametrize(("name", "kind"), ALONE, ids=[k for _, k in ALONE])
def test_a_kernel_compiles_alone(nvrtc, name: str, kind: str) -> None:
    """mpiring.cuda.direct_kernels compiles each kernel in a program of its own (its first call
    then waits for one instantiation, not all of them): one instantiation of each kind (drawn
    with a fixed seed) compiles warning-free without the others."""
    choices = [e for e in sources.name_expressions(name) if kind in e]
    expr = choices[random.Random(f"{name}:{kind}").randrange(len(choices))]
    compiled, log, lowered = compile_source(nvrtc, sources.source(name), name, [expr])
    assert compiled and not log.strip(), f"{expr} alone:\n{log}"
    assert list(lowered) == [expr]


def test_name_expressions_cover_every_dtype_and_op() -> None:
    """The launchers' look-ups (kernel_name, copy_name) are among the compiled expressions, for every
    DTYPES x OPS row, so the compile test above covers every struct and functor of the table."""
    fold, direct = sources.name_expressions("fold.cu"), sources.name_expressions("direct.cu")
    for dtype in DTYPES:
        for op in REDUCTIONS:
            assert sources.kernel_name("fold", dtype, op) in fold
            for kind in ("oneshot", "twoshot"):
                assert sources.kernel_name(kind, dtype, op) in direct
    for unit in sources.COPY_UNITS:
        assert sources.copy_name(unit) in fold
    assert sources.averaged_dtypes() == ["float16", "float32", "float64", "bfloat16"]
    for dtype in sources.averaged_dtypes():
        assert sources.average_name(dtype) in fold
    with pytest.raises(KeyError, match="avg has no kernel"):
        sources.kernel_name("fold", "float32", Op.AVG)
    assert sources.kernel_name("fold", "float32", Op.SUM) == "fold<F32, Sum>"
    assert sources.kernel_name("twoshot", "bfloat16", Op.MIN) == "twoshot<BF16, Min>"


def test_every_table_row_names_a_struct_of_types_cuh() -> None:
    """DTYPES[*].cuda are element structs and OPS[*].cuda functors defined in types.cuh."""
    defined = set(re.findall(r"^struct (\w+)", sources.read("types.cuh"), re.M))
    assert {row.cuda for row in DTYPES.values()} <= defined
    assert {row.cuda for row in OPS.values() if row.op in REDUCTIONS} <= defined
    assert [row.op for row in OPS.values() if row.cuda is None] == [Op.AVG]


def _line_of(text: str, needle: str) -> int:
    """The 1-based line of ``needle`` in ``text`` (which holds it exactly once)."""
    assert text.count(needle) == 1, needle
    return text[:text.index(needle)].count("\n") + 1


# case: (compilation unit, text in it, its planted replacement, file and line offset the log names)
PLANTED = {
    # one ';' removed from the fold kernel's scalar tail: the parser stops at the next line's '}'
    "missing semicolon": ("fold.cu", "out[i] = T::st(Op::f(T::ld(in[i]), T::ld(slot[i])));",
                          "out[i] = T::st(Op::f(T::ld(in[i]), T::ld(slot[i])))", ("fold.cu", 1)),
    # an undeclared identifier in the direct kernels' barrier
    "undeclared identifier": ("direct.cu", "if (spins % 256) continue;", "if (spins % SPINS) continue;",
                              ("direct.cu", 0)),
    # struct Ctl grows a field the numpy mirror lacks: contract.cuh's static_asserts stop the build
    "moved Ctl field": ("direct.cu", "  long long timeout_ns;", "  int extra;\n  long long timeout_ns;",
                        None),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_error_fails_to_compile(nvrtc, case: str, capsys) -> None:
    """The check can fail: each planted error stops the build, and the log names the file and
    line of the on-disk source (the #line markers of the inlined headers are right)."""
    unit, old, new, where = PLANTED[case]
    code = sources.source(unit)
    assert code.count(old) == 1
    bad = code.replace(old, new)
    compiled, log, _ = compile_source(nvrtc, bad, unit, sources.name_expressions(unit))
    with capsys.disabled():
        print(f"\n--- NVRTC log, planted error '{case}':\n{log}")
    assert not compiled, f"the planted error '{case}' compiled"
    assert "error" in log
    if where is None:
        assert 'static assertion failed with "Ctl layout"' in log, log
    else:
        path, offset = where
        line = _line_of(sources.read(path), old) + offset
        assert f"{path}({line}): error" in log, log


def test_a_misspelled_instantiation_fails(nvrtc) -> None:
    """A name expression naming no struct (a table row without C++) fails the build."""
    compiled, log, _ = compile_source(nvrtc, sources.source("fold.cu"), "fold.cu",
                                      ["fold<F32, Sum>", "fold<F8, Sum>"])
    assert not compiled and "F8" in log, log


def test_headers_are_inlined_once_with_line_markers(tmp_path, monkeypatch) -> None:
    """source() inlines local includes recursively, each header once, and resumes the including
    file's line numbers after each header."""
    (tmp_path / "a.cu").write_text('// a\n#include "b.cuh"\n#include "c.cuh"\nint a;\n')
    (tmp_path / "b.cuh").write_text("int b;\n")
    (tmp_path / "c.cuh").write_text('#include "b.cuh"\nint c;\n')
    monkeypatch.setattr(sources, "CSRC", tmp_path)
    assert sources.source("a.cu") == (
        '// a\n#line 1 "b.cuh"\nint b;\n#line 3 "a.cu"\n'
        '#line 1 "c.cuh"\n\nint c;\n#line 4 "a.cu"\nint a;\n'
    )
    with pytest.raises(FileNotFoundError):
        sources.source("missing.cu")


def test_shipped_sources_include_nothing_left() -> None:
    """The texts handed to CuPy hold no #include (NVRTC could not resolve them), each header once."""
    for name in sources.files():
        code = sources.source(name)
        assert not re.search(r'^\s*#\s*include', code, re.M), name
        for guard in set(re.findall(r"^#ifndef (MPIRING_\w+_CUH)", code, re.M)):
            assert code.count(f"#define {guard}") == 1
