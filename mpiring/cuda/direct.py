"""One-launch allreduce kernels that use every NVLink at once: one-shot and two-shot.

Both push: every byte crossing NVLink is a store into a peer's staging, never a load from
it (remote stores are posted; remote loads wait a full round trip).

* **one-shot** (small messages, latency): each rank stores its input into row ``me`` of every
  peer's slot, meets the others at a flag barrier, then reduces the rows of its own slot in
  rank order 0..n-1, so every rank computes bit-identical results.
* **two-shot** (medium messages, bandwidth): per chunk, each rank stores shard s of its input
  into row ``me`` of rank s's input staging, meets the others, reduces its own shard from
  its rows and stores the result into its output and into every peer's output staging, meets
  them again, then copies the other shards into its output. Each shard is reduced by one
  rank only, so results are bit-identical on all ranks.

**Barriers.** Block b of every rank meets block b of every other rank: thread t < n of block
b stores the block's sequence number into rank t's flag ``[me][b]`` with release semantics
(system scope) after ``__syncthreads``, then spins with acquire loads until its own flag
``[t][b]`` reaches it. Ranges are cut into 16-byte words and word w of a range always
belongs to thread ``w % (grid size)``, on every rank, in every step, whether the caller's
pointers allow 16-byte accesses or not (then the thread moves the word element by element):
so a block only ever needs its namesakes. Sequence numbers come from a per-block counter in
device memory, which makes the launches replayable in a CUDA graph.

**No wait is unbounded.** A spinning thread reads the GPU clock now and then: past the
communicator's timeout it aborts the communicator (writes ``1 + rank`` into every rank's
abort word), reports the rank it waited for in the host status block, and the kernel returns
without writing output. A spinning thread that finds the abort word set (a peer gave up)
reports that and returns too. The same holds inside a replayed CUDA graph.

**Reuse without extra barriers.** A rank writes into a peer's region only after a barrier
that the peer entered after its last read of that region: one-shot alternates two slots by
sequence parity (the barrier of the next call separates a slot's readers from its next
writers); in two-shot, a chunk's second barrier separates the readers of the input staging
from the next chunk's writers, and the next chunk's first barrier separates the readers of
the output staging from the next writers. Kernels of one communicator never run concurrently
(the context orders them), so counters and flags serve one kernel at a time. Data written by
peers is read with L2-only loads (``ld.global.cg``), so no stale L1 line is ever used.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ops import Op
from .kernels import OPS, TYPES, TYPES_SOURCE
from .layout import MAX_RANKS, StagingLayout
from .status import STATUS_SOURCE

THREADS = 512
WORD = 16  # bytes: rows and shards start on 16-byte boundaries of the staging

_SOURCE = r"""
typedef unsigned long long u64;
#define MAXR 8
#define UNROLL 4  // words in flight per thread in copies: loads are latency-bound otherwise
__device__ __forceinline__ long long lmin(long long a, long long b) { return a < b ? a : b; }

struct Ctl {                      // written once at set-up; see DirectKernels.__init__
  u64 flags[MAXR];                // rank r's flag table [src][block], as mapped here
  u64 oneshot[MAXR][2];           // rank r's two one-shot slots
  u64 twoshot_in[MAXR];           // rank r's two-shot input staging
  u64 twoshot_out[MAXR];          // rank r's two-shot output staging
  u64 aborts[MAXR];               // rank r's abort word
  u64 counters;                   // this rank's per-block barrier counters
  u64 status;                     // this rank's host status block (see mpiring/cuda/status.py)
  long long twoshot_bytes;        // bytes per two-shot staging half
  long long timeout_ns;           // how long a barrier may wait for a peer
  int rank, size, blocks, pad;
};

__device__ __forceinline__ void st_release(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
  u64 v; asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ uint4 ldcg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <class S> __device__ __forceinline__ S ldcg(const S* p) {
  if constexpr (sizeof(S) == 2) { unsigned short v; asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
  else if constexpr (sizeof(S) == 4) { unsigned v; asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
  else { u64 v; asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
}

__device__ __forceinline__ u64 clock_ns() {
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

// Block b of every rank meets block b of every other rank (see the module docstring): thread
// t < size waits for rank t. Returns true, in every thread of the block, if the kernel must
// stop because the communicator is aborted (a wait here timed out, or some rank aborted it).
__device__ __forceinline__ bool barrier(const Ctl* c, u64 seq, int kind, int step) {
  __syncthreads();
  const int t = threadIdx.x;
  int stop = 0;
  if (t < c->size) {
    st_release((u64*)c->flags[t] + (size_t)c->rank * c->blocks + blockIdx.x, seq);
    const u64* mine = (const u64*)c->flags[c->rank] + (size_t)t * c->blocks + blockIdx.x;
    u64 since = 0;
    for (unsigned spins = 1; ld_acquire(mine) < seq; ++spins) {
      if (spins % 256) continue;                  // the clock and abort word now and then only
      const u64 by = *(const volatile u64*)c->aborts[c->rank];
      if (by) { report((long long*)c->status, ST_ABORTED, kind, (long long)by - 1, seq, step); stop = 1; break; }
      const u64 now = clock_ns();
      if (!since) { since = now; continue; }
      if (now - since > (u64)c->timeout_ns) {     // give up: stop every rank's kernels, say why
        report((long long*)c->status, ST_TIMED_OUT, kind, t, seq, step);
        for (int r = 0; r < c->size; ++r) st_release((u64*)c->aborts[r], (u64)c->rank + 1);
        stop = 1; break;
      }
    }
  }
  return __syncthreads_or(stop);
}

// Word w (16 bytes) of a range of len elements at p. "vec": p allows 16-byte accesses;
// "peer": the data was written by another GPU (L2-only loads). Partial words move element-wise.
template <class S> __device__ __forceinline__ uint4 load_word(const S* p, long long w, long long len, bool vec, bool peer) {
  const int V = 16 / sizeof(S);
  const long long i0 = w * V;
  if (vec && i0 + V <= len) return peer ? ldcg((const uint4*)p + w) : ((const uint4*)p)[w];
  uint4 u; u.x = u.y = u.z = u.w = 0u;
  S* e = reinterpret_cast<S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) e[k] = peer ? ldcg(p + i0 + k) : p[i0 + k];
  return u;
}
template <class S> __device__ __forceinline__ void store_word(S* p, long long w, long long len, bool vec, uint4 u) {
  const int V = 16 / sizeof(S);
  const long long i0 = w * V;
  if (vec && i0 + V <= len) { ((uint4*)p)[w] = u; return; }
  const S* e = reinterpret_cast<const S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) p[i0 + k] = e[k];
}

template <class T> struct Pack {             // the elements of one word, widened
  typedef typename T::S S; typedef typename T::A A;
  enum { V = 16 / sizeof(S) };
  A a[V];
  __device__ __forceinline__ void load(uint4 u) { const S* p = (const S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = T::ld(p[k]); }
  template <class Op> __device__ __forceinline__ void fold(uint4 u) { const S* p = (const S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = Op::f(a[k], T::ld(p[k])); }
  __device__ __forceinline__ uint4 store() const { uint4 u; S* p = (S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) p[k] = T::st(a[k]);
    return u; }
};

#define GRID_THREAD const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x

// dst[0:len] = src[0:len], word by word.
template <class S>
__device__ __forceinline__ void copy_range(S* dst, bool dst_vec, const S* src, bool src_vec, bool src_peer, long long len) {
  GRID_THREAD;
  const long long nw = (len + 16 / sizeof(S) - 1) / (16 / sizeof(S));
  for (long long w = tid; w < nw; w += UNROLL * stride) {
    uint4 u[UNROLL];
#pragma unroll
    for (int h = 0; h < UNROLL; ++h)
      if (w + h * stride < nw) u[h] = load_word(src, w + h * stride, len, src_vec, src_peer);
#pragma unroll
    for (int h = 0; h < UNROLL; ++h)
      if (w + h * stride < nw) store_word(dst, w + h * stride, len, dst_vec, u[h]);
  }
}

// out[0:len] = srcs[0] op srcs[1] op ... in rank order. srcs[me] is the caller's input (16-byte
// accessible if in_vec); the others are staging written by peers. With dsts, the result is
// also stored into every dsts[r], r != me (peers' staging).
template <class T, class Op>
__device__ __forceinline__ void reduce_range(typename T::S* out, bool vec, const typename T::S* const* srcs,
                                             typename T::S* const* dsts, int me, int n, long long len) {
  typedef typename T::S S;
  GRID_THREAD;
  const long long nw = (len + 16 / sizeof(S) - 1) / (16 / sizeof(S));
  for (long long w = tid; w < nw; w += 2 * stride) {
    uint4 u[2][MAXR];
#pragma unroll
    for (int h = 0; h < 2; ++h)                 // issue every load of two words before the first use
#pragma unroll
      for (int r = 0; r < MAXR; ++r)
        if (r < n && w + h * stride < nw)
          u[h][r] = load_word(srcs[r], w + h * stride, len, r == me ? vec : true, r != me);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long k = w + h * stride;
      if (k >= nw) break;
      Pack<T> acc; acc.load(u[h][0]);
#pragma unroll
      for (int r = 1; r < MAXR; ++r) if (r < n) acc.template fold<Op>(u[h][r]);
      const uint4 res = acc.store();
      store_word(out, k, len, vec, res);
      if (dsts)
        for (int r = 0; r < n; ++r) if (r != me) store_word(dsts[r], k, len, true, res);
    }
  }
}

__device__ __forceinline__ u64 first_seq(const Ctl* c) {
  __shared__ u64 seq;
  if (threadIdx.x == 0) seq = ((const u64*)c->counters)[blockIdx.x];
  __syncthreads();
  return seq;
}
__device__ __forceinline__ void last_seq(const Ctl* c, u64 seq) {
  if (threadIdx.x == 0) ((u64*)c->counters)[blockIdx.x] = seq;
}

template <class T, class Op>
__global__ void __launch_bounds__(512) oneshot(const typename T::S* in, typename T::S* out, long long n,
                                               const Ctl* __restrict__ c, int vec) {
  typedef typename T::S S;
  const u64 seq = first_seq(c) + 1;
  const int me = c->rank, size = c->size, par = (int)(seq & 1);
  const long long row = (n + 16 / sizeof(S) - 1) / (16 / sizeof(S)) * (16 / sizeof(S));
  for (int r = 0; r < size; ++r)                // 1. my input into row me of every peer's slot
    if (r != me) copy_range<S>((S*)c->oneshot[r][par] + me * row, true, in, vec, false, n);
  if (barrier(c, seq, 2, 0)) return;
  const S* srcs[MAXR];                          // 2. reduce the rows of my slot, in rank order
  for (int r = 0; r < size; ++r) srcs[r] = (r == me) ? in : (const S*)c->oneshot[me][par] + r * row;
  reduce_range<T, Op>(out, vec, srcs, nullptr, me, size, n);
  last_seq(c, seq);
}

template <class T, class Op>
__global__ void __launch_bounds__(512) twoshot(const typename T::S* in, typename T::S* out, long long n,
                                               const Ctl* __restrict__ c, int vec) {
  typedef typename T::S S;
  u64 seq = first_seq(c);
  const int me = c->rank, size = c->size;
  const long long V = 16 / sizeof(S);
  const long long chunk = c->twoshot_bytes / sizeof(S) / (size * V) * (size * V);
  S* stage_in = (S*)c->twoshot_in[me];
  const S* stage_out = (const S*)c->twoshot_out[me];
  for (long long base = 0, k = 0; base < n; base += chunk, ++k) {
    const long long m = lmin(chunk, n - base);
    const long long shard = ((m + size - 1) / size + V - 1) / V * V;  // whole words; size*shard <= chunk
    for (int s = 0; s < size; ++s) {            // 1. shard s of my input into row me of rank s
      const long long lo = lmin(s * shard, m), len = lmin(shard, m - lo);
      if (s != me) copy_range<S>((S*)c->twoshot_in[s] + me * shard, true, in + base + lo, vec, false, len);
    }
    if (barrier(c, ++seq, 3, 2 * k)) return;
    {                                             // 2. reduce my shard, push it to every peer
      const long long lo = lmin(me * shard, m), len = lmin(shard, m - lo);
      const S* srcs[MAXR]; S* dsts[MAXR];
      for (int r = 0; r < size; ++r) {
        srcs[r] = (r == me) ? in + base + lo : stage_in + r * shard;
        dsts[r] = (S*)c->twoshot_out[r] + lo;
      }
      reduce_range<T, Op>(out + base + lo, vec, srcs, dsts, me, size, len);
    }
    if (barrier(c, ++seq, 3, 2 * k + 1)) return;
    for (int s = 0; s < size; ++s) {            // 3. the other shards, reduced by their owners
      const long long lo = lmin(s * shard, m), len = lmin(shard, m - lo);
      if (s != me) copy_range<S>(out + base + lo, vec, stage_out + lo, true, true, len);
    }
  }
  last_seq(c, seq);
}
"""

_CONTROL = np.dtype([
    ("flags", "<u8", (MAX_RANKS,)),
    ("oneshot", "<u8", (MAX_RANKS, 2)),
    ("twoshot_in", "<u8", (MAX_RANKS,)),
    ("twoshot_out", "<u8", (MAX_RANKS,)),
    ("aborts", "<u8", (MAX_RANKS,)),
    ("counters", "<u8"),
    ("status", "<u8"),
    ("twoshot_bytes", "<i8"),
    ("timeout_ns", "<i8"),
    ("rank", "<i4"), ("size", "<i4"), ("blocks", "<i4"), ("pad", "<i4"),
])


@functools.cache
def _module():
    import cupy

    names = [f"{k}<{t}, {o}>" for k in ("oneshot", "twoshot") for t in TYPES.values() for o in OPS.values()]
    return cupy.RawModule(code=TYPES_SOURCE + STATUS_SOURCE + _SOURCE, options=("--std=c++17",), name_expressions=names)


class DirectKernels:
    """Launchers of the one-shot and two-shot kernels over one communicator's staging."""

    def __init__(self, staging, layout: StagingLayout, status: int, timeout: float) -> None:
        """``status``: device address of the host status block; ``timeout``: seconds a barrier
        may wait for a peer before the kernel aborts the communicator."""
        import cupy

        self.layout = layout
        self.blocks = layout.blocks
        # The largest one-shot message, in bytes: every rank's row must fit one slot.
        self.oneshot_limit = layout.oneshot_bytes // staging.size // WORD * WORD
        ctl = np.zeros((), dtype=_CONTROL)
        for r in range(staging.size):
            ctl["flags"][r] = staging.addr(r, layout.direct_flags)
            ctl["oneshot"][r] = [staging.addr(r, layout.oneshot_slot(k)) for k in range(2)]
            ctl["twoshot_in"][r] = staging.addr(r, layout.twoshot_in)
            ctl["twoshot_out"][r] = staging.addr(r, layout.twoshot_out)
            ctl["aborts"][r] = staging.addr(r, layout.abort)
        ctl["counters"] = staging.addr(staging.rank, layout.direct_counters)
        ctl["status"] = status
        ctl["twoshot_bytes"] = layout.twoshot_bytes
        ctl["timeout_ns"] = min(int(timeout * 1e9), 1 << 62)
        ctl["rank"], ctl["size"], ctl["blocks"] = staging.rank, staging.size, layout.blocks
        table = np.frombuffer(ctl.tobytes(), dtype=np.uint8)
        if table.nbytes > layout.TABLE_BYTES:
            raise AssertionError("the direct kernels' table outgrew its place in the staging")
        self._ctl_ptr = staging.addr(staging.rank, layout.direct_table)
        rt = cupy.cuda.runtime
        rt.memcpy(self._ctl_ptr, table.ctypes.data, table.nbytes, rt.memcpyHostToDevice)
        rt.deviceSynchronize()  # set-up only: the table has landed before any stream reads it
        self._functions: dict[tuple[str, str, Op], object] = {}

    def _function(self, kind: str, dtype: np.dtype, op: Op):
        key = (kind, dtype.name, op)
        fn = self._functions.get(key)
        if fn is None:
            fn = _module().get_function(f"{kind}<{TYPES[dtype.name]}, {OPS[op]}>")
            self._functions[key] = fn
        return fn

    def launch(self, kind: str, src: int, out: int, count: int, dtype: np.dtype, op: Op, stream) -> None:
        """Enqueue one ``kind`` ("oneshot" or "twoshot") allreduce of ``count`` elements."""
        fn = self._function(kind, dtype, op)
        vectorized = np.int32((src | out) % 16 == 0)
        fn((self.blocks,), (THREADS,), (src, out, np.int64(count), self._ctl_ptr, vectorized),
           stream=stream)
