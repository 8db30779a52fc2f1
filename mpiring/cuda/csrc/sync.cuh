// Cross-GPU signalling primitives shared by the direct kernels (direct.cu, oneshot_ll.cu):
// system-scope release/acquire on 64-bit flags, the GPU clock, and what a wait that gives up
// does (see direct.cu's header comment: no wait is unbounded).
#ifndef MPIRING_SYNC_CUH
#define MPIRING_SYNC_CUH

#include "status.cuh"
#include "contract.cuh"

__device__ __forceinline__ void st_release(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
  u64 v; asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ u64 clock_ns() {
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

// Called every few hundred spins of a wait for rank `peer`, which began, or last saw its peer
// progress, at *since (0: not yet stamped; a caller that sees progress sets it back to 0, as
// agree.cuh's wait_line does). Returns true if the wait must stop: a peer aborted the
// communicator (reported as ST_ABORTED), or the wait went the timeout without progress
// (reported as ST_TIMED_OUT naming `peer`, and this rank aborts every rank's kernels by writing
// 1 + rank into their abort words).
__device__ __forceinline__ bool give_up(const Ctl* c, u64* since, int kind, long long peer, u64 seq, int step) {
  const u64 by = *(const volatile u64*)c->aborts[c->rank];
  if (by) { report((long long*)c->status, ST_ABORTED, kind, (long long)by - 1, seq, step); return true; }
  const u64 now = clock_ns();
  if (!*since) { *since = now; return false; }
  if (now - *since <= (u64)c->timeout_ns) return false;
  report((long long*)c->status, ST_TIMED_OUT, kind, peer, seq, step);
  for (int r = 0; r < c->size; ++r) st_release((u64*)c->aborts[r], (u64)c->rank + 1);
  return true;
}

#endif  // MPIRING_SYNC_CUH
