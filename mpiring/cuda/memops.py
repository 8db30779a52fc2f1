"""GPU-side waits and signals: CUDA stream memory operations on 64-bit sequence flags.

``wait_geq`` makes a stream wait (on the GPU, no host round trip) until a flag reaches a
value; ``write`` makes a stream store a value once everything before it on that stream is
done. The write is preceded by a system-wide memory fence (the driver's default), so a peer
that sees the flag also sees the data copied before it. Where the GPU can flush remote
writes, waits ask for it, so data written by a peer before its flag is visible to the work
the wait releases.
"""

from __future__ import annotations

from ..core.errors import SetupError
from ..core.install import cuda_choices


class StreamMemOps:
    """Bound to one device; raises on any driver error."""

    def __init__(self, device_id: int) -> None:
        try:
            from cuda.bindings import driver
        except ImportError as err:
            raise SetupError(
                f"mpiring's GPU path needs cuda-bindings, which the extra of your CUDA major brings "
                f"({cuda_choices()}): {err}"
            ) from None
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
        self._wait_flags = int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
        if flush:
            self._wait_flags |= int(d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_FLUSH)
        self._write_flags = int(d.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT)
        self._wait = d.cuStreamWaitValue64
        self._write = d.cuStreamWriteValue64

    def _check(self, err, what: str) -> None:
        if err != self._driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what} failed: {err}")

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        """Work enqueued on ``stream`` after this waits until ``*addr >= value``."""
        (err,) = self._wait(stream, addr, value, self._wait_flags)
        if err != self._ok:
            self._check(err, "cuStreamWaitValue64")

    def write(self, stream: int, addr: int, value: int) -> None:
        """``*addr = value`` once the work enqueued on ``stream`` before it has finished."""
        (err,) = self._write(stream, addr, value, self._write_flags)
        if err != self._ok:
            self._check(err, "cuStreamWriteValue64")
