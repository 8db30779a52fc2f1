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

    assert "CuPy, planned for 116 SMs (--gemm-sms)" in describe(Load(), 1.45e-3)
    Load.sms = 0
    assert "planned" not in describe(Load(), 1.45e-3)
