"""GPU-side waits and signals: CUDA stream memory operations on 64-bit sequence flags, and the
copy-engine copies that go with them.

``wait_geq`` makes a stream wait (on the GPU, no host round trip) until a flag reaches a
value; ``write`` makes a stream store a value once everything before it on that stream is
done. The write is preceded by a system-wide memory fence (the driver's default), so a peer
that sees the flag also sees the data copied before it. Where the GPU can flush remote
writes, waits ask for it, so data written by a peer before its flag is visible to the work
the wait releases. ``copy`` is ``cuMemcpyAsync`` (unified addressing: any two device
pointers, a peer's mapped through CUDA IPC included).

Every entry point is the driver's (``cuda.bindings``), so a failure is a ``CUresult`` said in
one shape (:meth:`StreamMemOps.error`), which the compiled stream program
(:mod:`mpiring.cuda.streamprog`) raises too.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..core.errors import SetupError
from ..core.install import cuda_choices


class StreamMemOps:
    """Bound to one device; raises on any driver error. ``driver``: ``cuda.bindings.driver``
    unless given (tests pass a stand-in with the same functions and enums)."""

    def __init__(self, device_id: int, driver: ModuleType | Any = None) -> None:
        if driver is None:
            try:
                from cuda.bindings import driver as bindings
            except ImportError as err:
                raise SetupError(
                    f"mpiring's GPU path needs cuda-bindings, which the extra of your CUDA major brings "
                    f"({cuda_choices()}): {err}"
                ) from None
            driver = bindings
        self._driver = d = driver
        self._ok = d.CUresult.CUDA_SUCCESS
        attr = d.CUdevice_attribute
        err, dev = d.cuDeviceGet(device_id)
        self._check(err, "cuDeviceGet")
        err, ok = d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev)
        self._check(err, "cuDeviceGetAttribute")
        if not ok:
            raise SetupError(f"GPU {device_id} does not support 64-bit stream memory operations, "
                             "which mpiring's GPU signalling needs (driver too old?)")
        err, flush = d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev)
        self._check(err, "cuDeviceGetAttribute")
        #: the flags of every wait (GEQ, and FLUSH where the GPU can flush remote writes)
        self.wait_flags = int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        if flush:
            self.wait_flags |= int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_FLUSH)
        #: the flags of every write (the default: behind a system-wide fence)
        self.write_flags = int(d.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT)
        self._wait = d.cuStreamWaitValue64
        self._write = d.cuStreamWriteValue64
        self._copy = d.cuMemcpyAsync

    def error(self, what: str, status: Any) -> RuntimeError:
        """The error of driver function ``what`` that answered ``status`` (a ``CUresult`` or its
        number): what every method here raises."""
        return RuntimeError(f"{what} failed: {self._driver.CUresult(int(status))}")

    def _check(self, err, what: str) -> None:
        if err != self._ok:
            raise self.error(what, err)

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        """Work enqueued on ``stream`` after this waits until ``*addr >= value``."""
        (err,) = self._wait(stream, addr, value, self.wait_flags)
        if err != self._ok:
            self._check(err, "cuStreamWaitValue64")

    def write(self, stream: int, addr: int, value: int) -> None:
        """``*addr = value`` once the work enqueued on ``stream`` before it has finished."""
        (err,) = self._write(stream, addr, value, self.write_flags)
        if err != self._ok:
            self._check(err, "cuStreamWriteValue64")

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from device address ``src`` to ``dst`` on ``stream`` (a copy engine)."""
        (err,) = self._copy(dst, src, nbytes, stream)
        if err != self._ok:
            self._check(err, "cuMemcpyAsync")
