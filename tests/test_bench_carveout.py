"""``mpiring.bench.carveout``: the SM count target handed to cuBLAS, and ``--gemm-sms``.

The library is a fake standing in for libcublas (no GPU here); the call it records is the
one cuBLAS would get.
"""

from __future__ import annotations

import ctypes

import pytest

from mpiring.bench import carveout
from mpiring.bench.cli import parse_args


class FakeCublas:
    def __init__(self, status: int = 0) -> None:
        self.status, self.calls = status, []

    def cublasSetSmCountTarget(self, handle, sms):  # noqa: N802 - cuBLAS's name
        self.calls.append((handle.value, sms.value))
        return self.status


@pytest.fixture
def fake(monkeypatch):
    lib = FakeCublas()
    opened = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: opened.append(name) or lib)
    lib.opened = opened
    return lib


def test_the_target_reaches_the_handle_through_the_librarys_soname(fake) -> None:
    carveout.set_sm_count_target(0xABC0, 116, 13)
    assert fake.calls == [(0xABC0, 116)] and fake.opened == ["libcublas.so.13"]


def test_a_failing_status_and_a_negative_count_are_errors(fake) -> None:
    with pytest.raises(ValueError, match="0 \\(all\\) or positive"):
        carveout.set_sm_count_target(1, -1, 13)
    fake.status = 7
    with pytest.raises(RuntimeError, match="status 7"):
        carveout.set_sm_count_target(1, 8, 13)


def test_gemm_sms_option() -> None:
    assert parse_args([]).gemm_sms == 0
    assert parse_args(["--overlap", "gemm", "--gemm-sms", "116"]).gemm_sms == 116
    with pytest.raises(SystemExit):
        parse_args(["--gemm-sms", "-1"])


def test_the_overlap_banner_names_the_planned_sms() -> None:
    from mpiring.bench.loads import describe

    class Load:
        size, dtype, backend, sms = 8192, "float16", "CuPy", 116

    assert "CuPy, planned for 116 SMs)" in describe(Load(), 1.45e-3)
    Load.sms = 0
    assert "planned" not in describe(Load(), 1.45e-3)


def test_sm_budget_option() -> None:
    assert parse_args([]).sm_budget is None
    assert parse_args(["--overlap", "gemm", "--sm-budget", "16"]).sm_budget == 16
    with pytest.raises(SystemExit):
        parse_args(["--sm-budget", "0"])


def test_the_gemms_leave_the_budget_to_mpiring() -> None:
    """Without --gemm-sms, the GEMMs are planned for the SMs mpiring's budget leaves."""
    assert carveout.sms_left(None, 132) == 0  # no budget: every SM (cuBLAS's 0)
    assert carveout.sms_left(16, 132) == 116
    assert carveout.sms_left(131, 132) == 1
    for budget in (132, 200):
        with pytest.raises(ValueError, match=f"budget of {budget} leaves none of the GPU's 132 SMs"):
            carveout.sms_left(budget, 132)
