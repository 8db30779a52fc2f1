"""``python -m tools.host_anatomy``: its report's arithmetic, and its refusals on a machine
without GPUs (its timings need GPU arrays: tests/gpu/test_gpu_tools.py runs it there)."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from tools import host_anatomy

serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")


def test_report_prints_every_case_and_each_difference_per_rank() -> None:
    base = {case: 100.0 * (i + 1) for i, case in enumerate(host_anatomy.CASES)}
    ranks = [base, {case: value + 7 for case, value in base.items()}]
    lines = host_anatomy.report(ranks)
    assert len(lines) == len(host_anatomy.CASES) + 1 + len(host_anatomy.DIFFERENCES)
    for case, line in zip(host_anatomy.CASES, lines, strict=False):
        assert line.split()[-2:] == [f"{base[case]:.0f}", f"{base[case] + 7:.0f}"], line
    by_label = {label.split(":")[0]: line for (label, _), line in
                zip(host_anatomy.DIFFERENCES, lines[-len(host_anatomy.DIFFERENCES):], strict=True)}
    m = base
    assert by_label["table - alone"].split()[-2:] == [f"{m['table'] - m['alone']:+.0f}"] * 2
    slowdown = m["key+alone"] - m["key"] - m["alone"] + m["empty"]
    # every piece of rank 1 took 7 ns longer: each difference (as many + as - terms) is the same
    assert by_label["key+alone - key - alone + empty"].split()[-2:] == [f"{slowdown:+.0f}"] * 2
    assert by_label["check gpu - call"].split()[-1] == f"{m['call, check gpu'] - m['call']:+.0f}"


@serial
def test_without_gpus_it_says_so_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mpiring")
    from mpiring.bench.mode import probe_this_rank

    if probe_this_rank().usable:
        pytest.skip("this machine has GPUs: tests/gpu/test_gpu_tools.py runs the tool")
    assert host_anatomy.main([], MPI.COMM_WORLD) == 2
    assert "error:" in capsys.readouterr().err


@serial
def test_an_unknown_algorithm_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert host_anatomy.main(["--algo", "shiny"], MPI.COMM_WORLD) == 2
    assert "error:" in capsys.readouterr().err


@serial
def test_the_help_says_what_each_piece_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        host_anatomy.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "usage: python -m tools.host_anatomy" in out and "takes the difference apart" in out
