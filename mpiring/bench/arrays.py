"""Where benchmark buffers live: host memory (numpy), GPU memory (CuPy), or GPU bfloat16
(torch, since CuPy has no bfloat16). One class per memory space, same methods:

  empty / store / poison / copy          buffers and their contents
  mismatches                             compare a piece with exact expected values
  synchronize / timer                    ordering and timing (MPI.Wtime or CUDA events)
  free_bytes / release                   memory accounting for the fits-in-memory check

Inputs are generated as int32 by :mod:`mpiring.bench.data` with the space's array module
``xp`` (numpy or cupy); ``store`` converts them to the benchmark dtype.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import is_float


@dataclass(frozen=True)
class Mismatch:
    """Wrong elements of one buffer on one rank: how many, and the first one."""

    count: int
    index: int
    got: float
    expected: float

    def describe(self, total: int, what: str = "elements") -> str:
        return (f"{self.count} of {total} {what} wrong, first at index {self.index}: "
                f"got {self.got!r}, expected {self.expected!r}")


def _poison_value(dtype: np.dtype) -> Any:
    return np.nan if is_float(dtype) else np.iinfo(np.dtype(dtype)).max


def _scalar(x: Any) -> float | int:
    v = float(x)
    return int(v) if v.is_integer() else v


class HostTimer:
    """Wall-clock time of a region with ``MPI.Wtime``."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self._wtime = MPI.Wtime
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self._wtime()

    def stop(self) -> float:
        return self._wtime() - self._t0


class CudaTimer:
    """Device time of a region: CUDA events recorded on the current CuPy stream."""

    def __init__(self) -> None:
        import cupy

        self._cp = cupy
        self._begin = cupy.cuda.Event()
        self._end = cupy.cuda.Event()

    def start(self) -> None:
        self._begin.record(self._cp.cuda.get_current_stream())

    def stop(self) -> float:
        self._end.record(self._cp.cuda.get_current_stream())
        self._end.synchronize()
        return self._cp.cuda.get_elapsed_time(self._begin, self._end) / 1e3


def host_available_bytes() -> int | None:
    """MemAvailable of this node (Linux), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class HostSpace:
    """numpy arrays in host memory."""

    name = "host"
    xp = np

    def __init__(self, ranks_on_node: int = 1) -> None:
        self.ranks_on_node = max(1, ranks_on_node)

    def empty(self, count: int, dtype: np.dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def store(self, dst: np.ndarray, start: int, values: np.ndarray) -> None:
        dst[start:start + len(values)] = values

    def poison(self, arr: np.ndarray) -> None:
        arr.fill(_poison_value(arr.dtype))

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def mismatches(self, got: np.ndarray, start: int, expected: np.ndarray) -> Mismatch | None:
        seg = got[start:start + len(expected)]
        bad = seg != expected.astype(got.dtype)
        n = int(np.count_nonzero(bad))
        if not n:
            return None
        i = int(np.argmax(bad))
        return Mismatch(n, start + i, _scalar(seg[i]), _scalar(expected[i]))

    def synchronize(self) -> None:
        pass

    def timer(self) -> HostTimer:
        return HostTimer()

    def free_bytes(self) -> int | None:
        """This rank's share of the node's available memory."""
        avail = host_available_bytes()
        return None if avail is None else avail // self.ranks_on_node

    def release(self) -> None:
        pass

    def describe(self) -> str:
        return "host memory (numpy)"


class CupySpace:
    """CuPy arrays on this rank's current GPU."""

    name = "cuda"

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        self.xp = cupy

    def empty(self, count: int, dtype: np.dtype) -> Any:
        return self.cp.empty(count, dtype=dtype)

    def store(self, dst: Any, start: int, values: Any) -> None:
        dst[start:start + values.size] = values

    def poison(self, arr: Any) -> None:
        arr.fill(_poison_value(arr.dtype))

    def copy(self, dst: Any, src: Any) -> None:
        self.cp.copyto(dst, src)

    def mismatches(self, got: Any, start: int, expected: Any) -> Mismatch | None:
        cp = self.cp
        seg = got[start:start + expected.size]
        bad = seg != expected.astype(got.dtype)
        n = int(cp.count_nonzero(bad))
        if not n:
            return None
        i = int(cp.argmax(bad))
        return Mismatch(n, start + i, _scalar(seg[i].get()), _scalar(expected[i].get()))

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()

    def timer(self) -> CudaTimer:
        return CudaTimer()

    def free_bytes(self) -> int | None:
        free, _total = self.cp.cuda.runtime.memGetInfo()
        return int(free) + int(self.cp.get_default_memory_pool().free_bytes())

    def release(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()

    def describe(self) -> str:
        return "GPU memory (CuPy)"


class TorchBf16Space(CupySpace):
    """bfloat16 GPU buffers as torch tensors (CuPy has no bfloat16); generation and the
    other dtypes' work stay in CuPy, exchanged through DLPack on the same device."""

    def __init__(self) -> None:
        super().__init__()
        try:
            import torch
        except ImportError:
            raise ImportError("bfloat16 GPU buffers need torch (CuPy has no bfloat16)") from None
        self.torch = torch
        self.device = torch.device("cuda", self.cp.cuda.Device().id)
        torch.cuda.set_device(self.device)

    def empty(self, count: int, dtype: np.dtype) -> Any:
        return self.torch.empty(count, dtype=self.torch.bfloat16, device=self.device)

    def _from_cupy(self, values: Any) -> Any:
        return self.torch.from_dlpack(values).to(self.torch.bfloat16)

    def store(self, dst: Any, start: int, values: Any) -> None:
        dst[start:start + values.size].copy_(self._from_cupy(values))

    def poison(self, arr: Any) -> None:
        arr.fill_(float("nan"))

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def mismatches(self, got: Any, start: int, expected: Any) -> Mismatch | None:
        seg = got[start:start + expected.size]
        bad = seg != self._from_cupy(expected)
        n = int(bad.sum().item())
        if not n:
            return None
        i = int(bad.nonzero()[0].item())
        return Mismatch(n, start + i, _scalar(seg[i].item()), _scalar(expected[i].get()))

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)
        super().synchronize()

    def free_bytes(self) -> int | None:
        cached = self.torch.cuda.memory_reserved(self.device) - self.torch.cuda.memory_allocated(
            self.device)
        return int(super().free_bytes() or 0) + int(cached)

    def release(self) -> None:
        self.torch.cuda.empty_cache()
        super().release()

    def describe(self) -> str:
        return "GPU memory (torch bfloat16, CuPy for the rest)"


def make_space(gpu: bool, dtype: np.dtype, ranks_on_node: int) -> Any:
    """The memory space for this run."""
    if not gpu:
        return HostSpace(ranks_on_node)
    if np.dtype(dtype).name == "bfloat16":
        return TorchBf16Space()
    return CupySpace()
