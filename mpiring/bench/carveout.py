"""SMs left free by the user's GEMMs: ``cublasSetSmCountTarget`` on a cuBLAS handle.

Measured on one H200 (``python -m tools.starve`` in a checkout, ``results/h200x1-starve*.json``):
beside a cuBLAS 8192^2 float16 GEMM planned for every SM, about one fold kernel in a hundred
waits for a whole GEMM (p99 1.15-1.6 ms against 14 us alone), whatever its grid, its stream
priority or a green context of its own; with the GEMM planned for 116 of the 132 SMs the
fold's p99 is 44.5 us and the GEMM 1.13x slower. The SMs an allreduce gets beside compute are
therefore the compute's to give: this module gives them, for the benchmark's GEMMs (CuPy's
handle, torch's) and for the repository's ``tools.starve``. PyTorch users can do the same for
their model with ``torch._C._set_sm_carveout_experimental`` (where their torch has it).
"""

from __future__ import annotations

import ctypes


def set_sm_count_target(handle: int, sms: int, cuda_major: int) -> None:
    """Plan the GEMMs of cuBLAS ``handle`` for ``sms`` SMs (0: every SM, cuBLAS's default),
    through ``libcublas.so.<cuda_major>`` (the library CuPy and torch load: the same one once
    loaded). Raises naming cuBLAS's status."""
    if sms < 0:
        raise ValueError(f"an SM count target must be 0 (all) or positive, got {sms}")
    lib = ctypes.CDLL(f"libcublas.so.{cuda_major}")
    status = lib.cublasSetSmCountTarget(ctypes.c_void_p(handle), ctypes.c_int(sms))
    if status != 0:
        raise RuntimeError(f"cublasSetSmCountTarget({sms}) returned cuBLAS status {status}")


def cupy_gemms_on(sms: int) -> None:
    """CuPy's cuBLAS GEMMs of this thread and device planned for ``sms`` SMs (0: all)."""
    import cupy

    set_sm_count_target(cupy.cuda.device.get_cublas_handle(), sms,
                        cupy.cuda.runtime.runtimeGetVersion() // 1000)


def torch_gemms_on(sms: int) -> None:
    """torch's current cuBLAS handle planned for ``sms`` SMs (0: all)."""
    import torch

    major = int(str(torch.version.cuda).split(".")[0])
    set_sm_count_target(int(torch.cuda.current_blas_handle()), sms, major)


def sms_left(budget: int | None, device_sms: int | None = None) -> int:
    """The SMs a GEMM is planned for beside a communicator holding ``budget`` SMs: the rest of
    the current GPU's (``device_sms``, read from CuPy unless given); 0 (every SM) without a
    budget. Raises ValueError where the budget leaves the GEMM no SM."""
    if budget is None:
        return 0
    if device_sms is None:
        import cupy

        device_sms = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    if budget >= device_sms:
        raise ValueError(f"an SM budget of {budget} leaves none of the GPU's {device_sms} SMs to the "
                         "GEMMs: lower --sm-budget, or give --gemm-sms")
    return device_sms - budget
