"""--nccl-tests output: nccl-tests' column layout (src/util.cu), byte for byte where it can be,
so that scripts parsing all_reduce_perf's output read mpiring's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.bench.nccl_format import NcclTestsTable, fixed, footer_lines, header_lines, result_line
from mpiring.bench.nccl_names import nccl_type, op_name, type_name
from mpiring.bench.results import Row

# all_reduce_perf's header and one of its lines (nccl-tests 2.19, float sum, 8 ranks)
NCCL_HEADER = [
    "#                                                              out-of-place                  "
    "     in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     "
    "time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             "
    "(us)  (GB/s)  (GB/s)         ",
]
NCCL_LINE = ("   134217728      33554432     float     sum      -1  1234.50  108.72  190.26       0"
             "  1230.10  109.11  190.94       0")


def row(placement: str, time_us: float | None, wrong: int | None = 0, **kw) -> Row:
    size = 134217728
    alg = None if time_us is None else size / (time_us * 1e-6) / 1e9
    base = dict(size_bytes=size, count=size // 4, dtype="float32", op="sum", algo="nccl",
                batches="-", placement=placement, nranks=8, status="ok", check="OK",
                wrong=wrong, time_us=time_us, algbw_gbs=alg,
                busbw_gbs=None if alg is None else alg * 2 * 7 / 8)
    base.update(kw)
    return Row(**base)


def test_header_is_nccl_tests_header():
    assert header_lines() == NCCL_HEADER


def test_a_line_is_nccl_tests_line():
    assert result_line(row("out", 1234.5), row("in", 1230.1)) == NCCL_LINE


@pytest.mark.parametrize(("value", "width", "text"), [
    (1234.5, 7, "1234.50"), (12345.6, 7, "12345.6"), (1234567.0, 7, "1234567"),
    (123456789.0, 7, "1.2e+08"), (0.001, 6, "  0.00"), (364.04, 6, "364.04"),
    (12345.0, 6, " 12345"), (1234567.0, 6, " 1e+06"), (None, 7, "    N/A"),
    (math.nan, 6, "   N/A"),
])
def test_fixed_follows_get_float_str(value, width, text):
    assert fixed(value, width) == text


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False), st.sampled_from([6, 7]))
def test_fixed_always_fits_its_column(value, width):
    assert len(fixed(value, width)) == width


def test_unchecked_points_say_na_and_untimed_ones_too():
    line = result_line(row("out", 1234.5, wrong=None), None)
    assert line.split()[5:] == ["1234.50", "108.72", "190.26", "N/A", "N/A", "N/A", "N/A", "N/A"]
    assert line.endswith("  190.26    N/A" + "      N/A     N/A     N/A     N/A")
    failed = row("out", None, wrong=17, status="fail", check="FAIL")
    assert result_line(failed, None).split()[5:9] == ["N/A", "N/A", "N/A", "17"]


def test_footer_counts_failed_points_and_averages_busbw():
    rows = [row("out", 1000.0), row("in", 2000.0),
            row("out", None, wrong=3, status="fail", check="FAIL")]
    avg = (rows[0].busbw_gbs + rows[1].busbw_gbs) / 2
    assert footer_lines(rows) == ["# Out of bounds values : 1 FAILED",
                                  f"# Avg bus bandwidth    : {avg:g} ", "#"]
    assert footer_lines(rows[:2])[0] == "# Out of bounds values : 0 OK"


def test_one_table_per_algorithm_with_a_line_per_size():
    table = NcclTestsTable(("out", "in"))
    lines: list[str] = []
    for algo in ("nccl", "ring"):
        for size in (1024, 2048):
            for place in ("out", "in"):
                lines += table.add(row(place, 10.0, algo=algo, size_bytes=size, count=size // 4,
                                       batches="-" if algo == "nccl" else "auto"))
    lines += table.close()
    assert table.close() == []
    data = [line for line in lines if not line.startswith("#")]
    assert [line.split()[0] for line in data] == ["1024", "2048", "1024", "2048"]
    assert sum(line.startswith("# Avg bus bandwidth") for line in lines) == 2
    starts = [line for line in lines if line.startswith("# Collective test starting")]
    assert starts == ["# Collective test starting: mpiring allreduce, algorithm nccl",
                      "# Collective test starting: mpiring allreduce, algorithm ring, batches auto"]


def test_a_size_missing_a_placement_still_gets_its_line():
    table = NcclTestsTable(("out", "in"))
    first = table.add(row("out", 10.0, size_bytes=1024, count=256))  # its in-place never came
    second = table.add(row("out", 10.0, size_bytes=2048, count=512))
    assert not [x for x in first if not x.startswith("#")]
    assert [x.split()[0] for x in second if not x.startswith("#")] == ["1024"]
    assert [x.split()[0] for x in table.close() if not x.startswith("#")] == ["2048"]


def test_type_and_op_names():
    assert nccl_type("float32") == "float" and nccl_type("bfloat16") == "bfloat16"
    assert [type_name(n) for n in ("half", "float", "double")] == ["float16", "float32", "float64"]
    assert op_name("MAX") == "max"
    with pytest.raises(ValueError, match="the bench does not time avg"):
        op_name("avg")


def test_tables_name_their_collective_and_allgather_has_no_redop():
    table = NcclTestsTable(("out",))
    lines: list[str] = []
    for collective in ("allreduce", "reduce_scatter", "allgather"):
        lines += table.add(row("out", 10.0, collective=collective, count=(134217728 // 4) // 8))
    lines += table.close()
    starts = [line for line in lines if line.startswith("# Collective test starting")]
    assert starts == [f"# Collective test starting: mpiring {c}, algorithm nccl"
                      for c in ("allreduce", "reduce_scatter", "allgather")]
    data = [line.split() for line in lines if not line.startswith("#")]
    assert [d[3] for d in data] == ["sum", "sum", "none"]  # all_gather_perf's redop column
    assert [d[1] for d in data] == ["4194304"] * 3  # count: as given (one rank's block)
