"""``tools.kernel_resources``: ptxas's report parsed per kernel, and the library's kernels
compiled for sm_90 on a machine without a GPU (NVRTC), each within the registers its
``__launch_bounds__`` allows."""

from __future__ import annotations

from typing import Any

import pytest

from mpiring.cuda import sources
from tools import kernel_resources
from tools.kernel_resources import Resources, parse_ptxas

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z7twoshotI3F323SumEvPKNT_1SEPS3_xPK3Ctliyy' for 'sm_90'
ptxas info    : Function properties for _Z7twoshotI3F323SumEvPKNT_1SEPS3_xPK3Ctliyy
ptxas         .     144 bytes stack frame, 24 bytes spill stores, 56 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 144 bytes cumulative stack size, 140 bytes smem
ptxas info    : Compiling entry function '_Z5emptyv' for 'sm_90'
ptxas info    : Used 4 registers
"""


def test_the_report_is_read_per_entry_function() -> None:
    """Registers and the frame line of each entry; an entry without a frame line has none."""
    assert parse_ptxas(LOG) == {"_Z7twoshotI3F323SumEvPKNT_1SEPS3_xPK3Ctliyy": Resources(128, 144, 24, 56),
                                "_Z5emptyv": Resources(4, 0, 0, 0)}
    assert parse_ptxas("no ptxas here") == {}


@pytest.mark.parametrize(("name", "limit"), [("direct.cu", 65536 // 512), ("oneshot_ll.cu", 65536 // 512)])
def test_the_kernels_fit_their_launch_bounds(nvrtc: Any, name: str, limit: int) -> None:
    """Every float32-sum kernel of the file reports its resources; registers within 65536 / 512
    (DIRECT_THREADS and LL_THREADS are 512), and the same whether the text comes inlined by the
    tool or handed over as is (--text)."""
    expressions = [e for e in sources.name_expressions(name) if e.endswith("<F32, Sum>")]
    report = kernel_resources.measure(nvrtc, sources.source(name), name, expressions)
    assert sorted(report) == sorted(expressions) and expressions
    assert all(0 < r.registers <= limit for r in report.values()), report


def test_the_command_prints_a_row_per_kernel(nvrtc: Any, tool, tmp_path) -> None:
    variant = tmp_path / "variant.cu"
    variant.write_text(sources.source("direct.cu"), encoding="utf-8")
    done = tool("kernel_resources", ["--text", str(variant), "--like", "direct.cu", "--op", "Max"], limit=300)
    assert done.returncode == 0, done.stderr
    assert "oneshot<F32, Max>" in done.stdout and "twoshot<F32, Max>" in done.stdout
    refused = tool("kernel_resources", ["fold9.cu"], limit=120)
    assert refused.returncode != 0 and "no CUDA source 'fold9.cu'" in refused.stderr
