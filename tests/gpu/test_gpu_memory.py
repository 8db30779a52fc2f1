"""The memory users hand in, and the memory set-up relies on.

* Views into one pooled CuPy allocation (what frameworks pass: slices of a big arena, at any
  element offset): every algorithm writes exactly the recv view, never a byte of the guards
  around it or of the send view, also when views break 16-byte alignment on some ranks only.
* Memory mapped with the CUDA virtual memory API (cuMemCreate/cuMemMap, what PyTorch's
  expandable segments use), made of several physical pieces: mpiring never exports user
  memory (it copies into its own IPC staging), so such buffers must work with every algorithm.
* A node whose drivers report peer access that does not work: set-up's probe must turn that
  into a SetupError on every rank, and a later communicator must still come up.
"""

from __future__ import annotations

import cupy
import pytest
from gpu_helpers import WORLD, agree, fit, mismatches, poison, rank_input, reference, runnable, span_for
from mpi4py import MPI

import mpiring

ALGOS = ["ring", "oneshot", "twoshot", "oneshot-ll", "auto", "nccl", "nccl-ring"]
OPS = list(mpiring.core.ops.REDUCTIONS)
RANK = WORLD.rank
GUARD = 64  # elements per guard region: 128 bytes or more, a multiple of 16 bytes

# (count, extra elements before the send view, extra elements between send and recv): the
# extras move the views off 16-byte boundaries, on some ranks only where they depend on RANK.
CASES = [
    (1, 0, 0),
    (7, 1, 2),
    (4099, 3, 1),
    (65_537, RANK % 4, 3),
    (1_000_003, 5 + RANK, RANK % 2),
]

_BITS = {2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}


def bits(a: cupy.ndarray) -> cupy.ndarray:
    """The raw bits of ``a`` (so NaN and -0.0 compare exactly)."""
    return a.view(_BITS[a.dtype.itemsize])


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=120)
    yield c
    c.close()


# -- pooled views ----------------------------------------------------------------------------


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", ["float16", "float32", "int64"])
@pytest.mark.parametrize("algo", ALGOS)
def test_pooled_views_never_touch_neighbours(comm, algo, dtype):
    errors = []
    for case, (count, lead, gap) in enumerate(CASES):
        count = fit(algo, count, dtype)
        op = OPS[case % len(OPS)]
        for placement in ("out", "in"):
            salt = 2 * case + (placement == "in")
            s0 = GUARD + lead
            if placement == "out":  # [guard 0 | send | guard 1 | recv | guard 2]
                r0 = s0 + count + GUARD + gap
                regions = ((0, s0), (s0 + count, r0), (r0 + count, r0 + count + GUARD))
            else:  # [guard 0 | recv | guard 1], in place
                r0 = s0
                regions = ((0, r0), (r0 + count, r0 + count + GUARD))
            big = cupy.empty(regions[-1][1], dtype=dtype)  # one block of the default pool
            for k, (lo, hi) in enumerate(regions):  # a distinct pattern per guard (exact in fp16)
                big[lo:hi] = (cupy.arange(hi - lo, dtype=cupy.int64) % 199 + 300 + 500 * k).astype(dtype)
            x = rank_input(RANK, count, dtype, salt, span_for(op))
            recv = big[r0:r0 + count]
            if placement == "out":
                send = big[s0:s0 + count]
                send[...] = x
                poison(recv)
            else:
                send = MPI.IN_PLACE
                recv[...] = x
            before = big.copy()
            comm.Allreduce(send, recv, op, algorithm=algo)
            wrong = mismatches(recv, reference(op, WORLD.size, count, salt))
            # Everything outside recv (guards and, out of place, the send view) bit for bit.
            changed = (int(cupy.count_nonzero(bits(big[:r0]) != bits(before[:r0])))
                       + int(cupy.count_nonzero(bits(big[r0 + count:]) != bits(before[r0 + count:]))))
            if wrong or changed:
                errors.append(f"{algo} {dtype} {op.name} n={count} lead={lead} gap={gap} {placement}: "
                              f"{wrong} wrong elements, {changed} elements outside recvbuf changed")
    agree(not errors, "; ".join(errors))


# -- CUDA virtual memory (cuMemCreate / cuMemMap) ---------------------------------------------


def _ok(driver, result: tuple, what: str):
    """The value of a cuda.bindings call, or raise naming the call and its CUresult."""
    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {result[0]}")
    return result[1] if len(result) > 1 else None


class VmmRange:
    """``pieces`` physical allocations (cuMemCreate, pinned on ``device``) mapped back to back
    into one reserved address range, readable and writable from ``device``: one contiguous
    buffer whose pages come from several allocations, as with PyTorch's expandable segments."""

    def __init__(self, driver, device: int, piece_bytes: int, pieces: int) -> None:
        d = self._d = driver
        self.handles: list = []
        self.mapped: list[int] = []
        self.reserved = None
        prop = d.CUmemAllocationProp()
        prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        gran = int(_ok(d, d.cuMemGetAllocationGranularity(
            prop, d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity"))
        self.piece = -(-piece_bytes // gran) * gran
        self.size = self.piece * pieces
        try:
            self.reserved = _ok(d, d.cuMemAddressReserve(self.size, gran, d.CUdeviceptr(0), 0),
                                "cuMemAddressReserve")
            self.ptr = int(self.reserved)
            for k in range(pieces):
                handle = _ok(d, d.cuMemCreate(self.piece, prop, 0), "cuMemCreate")
                self.handles.append(handle)
                _ok(d, d.cuMemMap(self.ptr + k * self.piece, self.piece, 0, handle, 0), "cuMemMap")
                self.mapped.append(self.ptr + k * self.piece)
            access = d.CUmemAccessDesc()
            access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device
            access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _ok(d, d.cuMemSetAccess(self.reserved, self.size, [access], 1), "cuMemSetAccess")
        except BaseException:
            self.release()
            raise

    def array(self, offset: int, count: int, dtype, device: int) -> cupy.ndarray:
        """A CuPy view of ``count`` elements at byte ``offset`` into the range."""
        mem = cupy.cuda.UnownedMemory(self.ptr, self.size, self, device)
        return cupy.ndarray((count,), dtype, cupy.cuda.MemoryPointer(mem, offset))

    def release(self) -> list[str]:
        """Unmap, release and unreserve; return the calls that failed (cleanup goes on)."""
        d, problems = self._d, []
        for addr in self.mapped:
            (err,) = d.cuMemUnmap(addr, self.piece)
            if err != d.CUresult.CUDA_SUCCESS:
                problems.append(f"cuMemUnmap: {err}")
        self.mapped.clear()
        for handle in self.handles:
            (err,) = d.cuMemRelease(handle)
            if err != d.CUresult.CUDA_SUCCESS:
                problems.append(f"cuMemRelease: {err}")
        self.handles.clear()
        if self.reserved is not None:
            (err,) = d.cuMemAddressFree(self.reserved, self.size)
            if err != d.CUresult.CUDA_SUCCESS:
                problems.append(f"cuMemAddressFree: {err}")
            self.reserved = None
        return problems


def _vmm_supported(driver, device: int) -> bool:
    attrs = driver.CUdevice_attribute
    attr = getattr(attrs, "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", None)
    if attr is None:  # the older name of the same attribute
        attr = attrs.CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED
    try:
        dev = _ok(driver, driver.cuDeviceGet(device), "cuDeviceGet")
        return bool(_ok(driver, driver.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute"))
    except RuntimeError:
        return False


@pytest.mark.mpi(min_size=2)
def test_vmm_memory_works(comm):
    driver = pytest.importorskip("cuda.bindings.driver")
    device = comm.device
    if not all(WORLD.allgather(_vmm_supported(driver, device))):  # skip on every rank or none
        pytest.skip("a GPU without CUDA virtual memory management")
    largest = 3_000_001  # float32 elements: two-shot runs several chunks, the ring many batches
    itemsize = 4
    vmm, problem = None, None
    try:
        # Three pieces; the send view straddles the 1st/2nd boundary, recv the 2nd/3rd.
        vmm = VmmRange(driver, device, largest * itemsize + 64, pieces=3)
    except Exception as err:  # reported through agree, on every rank
        problem = f"{type(err).__name__}: {err}"
    errors = []
    try:
        agree(problem is None, f"VMM allocation failed: {problem}")
        for salt, algo in enumerate(runnable(ALGOS)):
            count = fit(algo, largest, "float32")
            nbytes = count * itemsize
            send_at = (vmm.piece - nbytes // 2) // 16 * 16  # 16-byte aligned
            recv_at = (2 * vmm.piece - nbytes // 2) // 16 * 16 + 4  # 4 bytes off: unaligned
            send = vmm.array(send_at, count, cupy.float32, device)
            recv = vmm.array(recv_at, count, cupy.float32, device)
            x = rank_input(RANK, count, cupy.float32, salt)
            send[...] = x
            poison(recv)
            comm.Allreduce(send, recv, mpiring.Op.SUM, algorithm=algo)
            wrong = mismatches(recv, reference(mpiring.Op.SUM, WORLD.size, count, salt))
            sent = int(cupy.count_nonzero(bits(send) != bits(x)))
            # In place on the VMM memory too.
            recv[...] = rank_input(RANK, count, cupy.float32, salt + 100)
            comm.Allreduce(MPI.IN_PLACE, recv, mpiring.Op.MAX, algorithm=algo)
            wrong_in = mismatches(recv, reference(mpiring.Op.MAX, WORLD.size, count, salt + 100))
            if wrong or sent or wrong_in:
                errors.append(f"{algo} n={count}: {wrong} wrong out of place, {sent} sendbuf elements "
                              f"changed, {wrong_in} wrong in place")
        del send, recv
    finally:
        cupy.cuda.runtime.deviceSynchronize()  # nothing may still use the range
        if vmm is not None:
            errors += [f"cleanup: {p}" for p in vmm.release()]
    agree(not errors, "; ".join(errors))


# -- peer access that is reported but does not work ----------------------------------------

BROKEN = 1  # the rank whose writes into peers never arrive
PHRASE = "peer-to-peer access is reported but does not work"


class _DropPeerWrites:
    """``cupy.cuda.runtime`` as the set-up probe sees it on a node with broken P2P: synchronous
    device-to-device copies whose destination lies outside this rank's own staging allocation
    (that is: into a peer's, through the IPC mapping) silently do nothing."""

    def __init__(self, rt, base: int, nbytes: int) -> None:
        self._rt, self._lo, self._hi = rt, base, base + nbytes
        self.dropped = 0

    def __getattr__(self, name: str):
        return getattr(self._rt, name)

    def memcpy(self, dst: int, src: int, size: int, kind: int) -> None:
        if kind == self._rt.memcpyDeviceToDevice and not self._lo <= dst < self._hi:
            self.dropped += 1
            return
        self._rt.memcpy(dst, src, size, kind)


@pytest.mark.mpi(min_size=2)
def test_broken_peer_access_is_a_setup_error(monkeypatch):
    from mpiring.cuda import staging

    original = staging.IpcStaging._probe_peers
    dropped: list[int] = []

    def probe(self, cupy_module):
        # Every rank first clears the rows the probe writes into its staging and waits for the
        # others: cudaMalloc does not clear memory, and a pattern left there by an earlier
        # communicator in this process would make the probe pass whatever arrives now.
        self._rt.memset(self.base + self.layout.ring_slot(0), 0, 64 * self.size)
        self._rt.deviceSynchronize()
        self.node.Barrier()
        if self.rank != BROKEN:
            return original(self, cupy_module)
        rt = self._rt
        self._rt = broken = _DropPeerWrites(rt, self.base, self.layout.alloc_bytes)
        try:
            return original(self, cupy_module)
        finally:
            self._rt = rt
            dropped.append(broken.dropped)

    before = dict(mpiring.cuda.live_resources())
    errors = []
    with monkeypatch.context() as patch:
        patch.setattr(staging.IpcStaging, "_probe_peers", probe)
        try:
            mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=60).close()
            errors.append("set-up succeeded although rank 1's writes into peers never arrived")
        except mpiring.SetupError as err:
            if PHRASE not in str(err):
                errors.append(f"SetupError without '{PHRASE}': {err}")
        except Exception as err:  # reported through agree, on every rank
            errors.append(f"{type(err).__name__} instead of SetupError: {err}")
    if RANK == BROKEN and sum(dropped) == 0:
        errors.append(f"the probe made no device-to-device memcpy into a peer to drop ({dropped})")
    after = dict(mpiring.cuda.live_resources())
    if after != before:
        errors.append(f"the failed set-up left live_resources() at {after}, {before} before it")
    agree(not errors, "; ".join(errors))

    # A fresh communicator (real probe) comes up and works.
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=60) as c:
        for salt, algo in enumerate(("ring", "oneshot", "twoshot")):
            count = fit(algo, 70_001, "float32")
            x = rank_input(RANK, count, cupy.float32, salt)
            out = cupy.empty_like(x)
            poison(out)
            c.Allreduce(x, out, algorithm=algo)
            wrong = mismatches(out, reference(mpiring.Op.SUM, WORLD.size, count, salt))
            if wrong:
                errors.append(f"after the failed set-up, {algo}: {wrong} wrong elements")
    agree(not errors, "; ".join(errors))
