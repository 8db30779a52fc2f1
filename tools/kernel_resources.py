"""``python -m tools.kernel_resources``: registers, stack and spills of mpiring's kernels, no GPU.

A kernel variant that keeps per-thread arrays in local memory, or spills past its register
budget, can lose microseconds a call before any GPU run shows it: a rework of the direct
kernels' copies did (two-shot 3.4-4.7 us slower on 4 x H200 in CUDA graphs), and ptxas said
why (a 608-byte stack frame where the kernel had 144). This compiles a source of
``mpiring/cuda/csrc`` as the library does (NVRTC, its options, its includes inlined) to code
for one GPU architecture with ``--ptxas-options=-v`` and prints, for each kernel instantiation
asked for, ptxas's report: registers, stack frame, spill stores and loads::

    python -m tools.kernel_resources                          # direct.cu, float32 sum
    python -m tools.kernel_resources oneshot_ll.cu --dtype F16 --op Max
    python -m tools.kernel_resources --text variant.cu --like direct.cu   # a variant's text as is

``--text`` compiles a file's text unchanged (its includes already inlined, e.g. from
``mpiring.cuda.sources.source``) with the kernel names of ``--like``. Needs
``cuda.bindings.nvrtc`` (``pip install -e '.[nvrtc]'``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

from mpiring.cuda import sources

ARCH = "sm_90"
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


class Resources(NamedTuple):
    """What ptxas reports for one kernel."""

    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int


def parse_ptxas(log: str) -> dict[str, Resources]:
    """ptxas's ``-v`` report per entry function (mangled name), from a compile log."""
    found: dict[str, Resources] = {}
    entry, frame = None, (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry, frame = m.group(1), (0, 0, 0)
        elif (m := _FRAME.search(line)) and entry:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _REGS.search(line)) and entry:
            found[entry] = Resources(int(m.group(1)), *frame)
            entry = None
    return found


def _ok(nvrtc: Any, result: tuple) -> Any:
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {status}")
    return values[0] if len(values) == 1 else values


def compile_program(nvrtc: Any, code: str, name: str, expressions: list[str],
                    options: list[str]) -> tuple[bool, str, dict[str, str]]:
    """Compile ``code`` with NVRTC ``options``, ``expressions`` (name expressions of kernel
    instantiations) added: (compiled, the compiler's log, each expression's lowered name where
    it compiled). The compile tests' helper too (tests/nvrtc_support.py)."""
    prog = _ok(nvrtc, nvrtc.nvrtcCreateProgram(code.encode(), name.encode(), 0, [], []))
    try:
        for expr in expressions:
            _ok(nvrtc, nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        size = _ok(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log))
        text = log.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, text, {}
        lowered = {expr: _ok(nvrtc, nvrtc.nvrtcGetLoweredName(prog, expr.encode())).decode()
                   for expr in expressions}
        return True, text, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def measure(nvrtc: Any, code: str, name: str, expressions: list[str],
            arch: str = ARCH) -> dict[str, Resources]:
    """Compile ``code`` to ``arch`` code with the library's options and ptxas's report; the
    resources of each of ``expressions`` (name expressions of kernel instantiations)."""
    options = [*sources.rawmodule_options(arch), "--ptxas-options=-v"]
    compiled, text, lowered = compile_program(nvrtc, code, name, expressions, options)
    if not compiled:
        raise RuntimeError(f"{name} did not compile:\n{text}")
    report = parse_ptxas(text)
    return {expr: report[lowered[expr]] for expr in expressions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kernel_resources",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("source", nargs="?", default="direct.cu",
                        help=f"a source of mpiring/cuda/csrc (default direct.cu; one of "
                             f"{', '.join(sources.files())})")
    parser.add_argument("--dtype", default="F32", help="the kernels' element type (csrc/types.cuh's name)")
    parser.add_argument("--op", default="Sum", help="the kernels' reduction functor (Sum, Prod, Max, Min)")
    parser.add_argument("--text", help="compile this file's text as is instead (with --like's kernel names)")
    parser.add_argument("--like", help="with --text: the csrc file whose kernels it has (default: SOURCE)")
    parser.add_argument("--arch", default=ARCH, help=f"GPU architecture (default {ARCH})")
    args = parser.parse_args(argv)
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        sys.exit(f"python -m tools.kernel_resources needs cuda.bindings.nvrtc ({exc}): "
                 "pip install -e '.[nvrtc]'")
    like = args.like or args.source
    if like not in sources.files():
        sys.exit(f"no CUDA source {like!r} in mpiring/cuda/csrc (known: {', '.join(sources.files())})")
    wanted = f"<{args.dtype}, {args.op}>"
    expressions = [e for e in sources.name_expressions(like) if e.endswith(wanted)]
    if not expressions:
        sys.exit(f"{like} has no kernel instantiated for {wanted}")
    code = Path(args.text).read_text(encoding="utf-8") if args.text else sources.source(like)
    report = measure(nvrtc, code, like, expressions, args.arch)
    print(f"# {args.text or like} for {args.arch}: ptxas -v, per kernel")
    print(f"{'kernel':<28} {'registers':>9} {'stack':>7} {'spill stores':>13} {'spill loads':>12}")
    for expr, r in report.items():
        print(f"{expr:<28} {r.registers:>9} {r.stack_bytes:>6}B {r.spill_stores:>12}B {r.spill_loads:>11}B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
