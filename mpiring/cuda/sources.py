"""The CUDA C++ sources of the kernels (``csrc/``), as the compiler gets them. Pure: no CuPy.

Each ``.cu`` file is one compilation unit; its local ``#include "x.cuh"`` lines are inlined
here (recursively, each header once, behind a ``#line`` marker so compiler messages name the
right file and line). Two reasons: NVRTC, which CuPy compiles with, cannot find headers on its
own, and CuPy's kernel cache keys on the source text, so inlining makes a header edit a cache
miss instead of a stale binary.

:func:`name_expressions` lists the template instantiations each file must provide: the
launchers look kernels up by exactly these strings, and ``tests/test_cuda_sources.py``
compiles every file with every one of them, so a typo or an un-instantiable template fails CI
on a machine without a GPU.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..core.ops import DTYPES, OPS, REDUCTIONS, Op

CSRC = Path(__file__).with_name("csrc")

# NVRTC options of every compilation of these sources (CuPy adds the GPU architecture).
OPTIONS: tuple[str, ...] = ("--std=c++17",)


def rawmodule_options(arch: str) -> list[str]:
    """The NVRTC options a CuPy ``RawModule`` of these sources compiles with for ``arch``
    ("sm_90"): ours, plus the two CuPy adds. For compiling them elsewhere as the library does
    (the compile tests, ``tools.kernel_resources``)."""
    return [f"--gpu-architecture={arch}", *OPTIONS, "-ftz=true", "--device-as-default-execution-space"]


# The copy kernel's unit for each width in bytes, widest first (the launcher takes the first
# that the pointers and the byte count allow).
COPY_UNITS: dict[int, str] = {16: "uint4", 8: "unsigned long long", 4: "unsigned int",
                              2: "unsigned short", 1: "unsigned char"}

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[^\n]*$', re.M)


def files() -> list[str]:
    """The compilation units (``.cu`` files) in ``csrc/``, sorted."""
    return sorted(p.name for p in CSRC.glob("*.cu"))


def read(name: str) -> str:
    """The text of one file of ``csrc/`` as it is on disk (includes not inlined)."""
    path = CSRC / name
    if path.parent != CSRC or not path.is_file():
        raise FileNotFoundError(f"no CUDA source {name!r} in {CSRC}")
    return path.read_text(encoding="utf-8")


def source(name: str) -> str:
    """``csrc/<name>`` with its local includes inlined: the text handed to the compiler."""
    return _inline(name, set())


def _inline(name: str, seen: set[str]) -> str:
    seen.add(name)
    text = read(name)
    out: list[str] = []
    pos = 0
    for match in _INCLUDE.finditer(text):
        out.append(text[pos:match.start()])
        header = match.group(1)
        if header not in seen:
            resume = text.count("\n", 0, match.end()) + 2  # the line after the #include
            out.append(f'#line 1 "{header}"\n{_inline(header, seen)}')
            if not out[-1].endswith("\n"):
                out.append("\n")
            out.append(f'#line {resume} "{name}"')
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def kernel_name(kernel: str, dtype: str, op: Op) -> str:
    """The name expression of ``kernel`` ("fold", "oneshot", "twoshot", "oneshot_ll") for a dtype name and op
    (one of :data:`mpiring.core.ops.REDUCTIONS`: ``avg`` has no functor, it folds as ``sum``)."""
    functor = OPS[op].cuda
    if functor is None:
        raise KeyError(f"op {op.name.lower()} has no kernel of its own: it folds as sum")
    return f"{kernel}<{DTYPES[dtype].cuda}, {functor}>"


def average_name(dtype: str) -> str:
    """The name expression of the kernel dividing a result by the rank count (op ``avg``)."""
    return f"average<{DTYPES[dtype].cuda}>"


def averaged_dtypes() -> list[str]:
    """The dtypes ``avg`` takes: the floating-point ones."""
    return [name for name, row in DTYPES.items() if row.epsilon > 0]


def copy_name(unit: int) -> str:
    """The name expression of the copy kernel moving ``unit``-byte words."""
    return f"copy<{COPY_UNITS[unit]}>"


_KERNELS = {"fold.cu": ("fold",), "direct.cu": ("oneshot", "twoshot"), "oneshot_ll.cu": ("oneshot_ll",),
            "notice.cu": (), "fold_n.cu": ("fold_n",)}
_PLAIN = {"notice.cu": ["notice"]}  # kernels that are no template


def name_expressions(name: str) -> list[str]:
    """Every template instantiation that ``csrc/<name>`` must provide to its launcher."""
    if name not in _KERNELS:
        raise KeyError(f"no kernels are known for CUDA source {name!r}")
    names = [kernel_name(k, dtype, op) for k in _KERNELS[name] for dtype in DTYPES for op in REDUCTIONS]
    names += _PLAIN.get(name, [])
    if name == "fold.cu":
        names += [copy_name(unit) for unit in COPY_UNITS]
        names += [average_name(dtype) for dtype in averaged_dtypes()]
    return names
