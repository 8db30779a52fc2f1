// The n-input fold of the all-to-all copy-engine two-shot (mpiring/ring/alltoall_engine.py): one round's
// piece of this rank's block, reduced over every rank in rank order,
//
//   out[i] = src_0[i] (op) src_1[i] (op) ... (op) src_{n-1}[i]
//
// where src_r is `mine` (this rank's own input piece) for r == me and inbound[r] (rank r's
// piece, pushed into this rank's staging by rank r's copy engine) for every other r. `inbound`
// is a table in device memory, one per staging slot, written once when the staging is made
// (the areas never move), so a call passes only pointers. Elements
// are widened to the arithmetic type (float for half types) and rounded once, in the order of
// the ranks: the same bits as oneshot and twoshot (csrc/direct.cu) and as
// mpiring.core.reproducible.reference. It reads the n copies once and writes one result.
//
// Loads and stores are 16 bytes wide when every pointer allows it (`vectorized`: the launcher
// decides; the staging areas are 16-byte aligned, so it depends on `mine` and `out`). On up to
// 8 ranks a thread asks for every copy of several words before it folds the first (as
// direct.cu's reduce_range): a loop over the ranks that loads one copy after the other keeps
// one load in flight per thread and leaves the memory idle, most of all on the few SMs of a
// budget.
//
// It writes user output, so it first reads the communicator's abort word, as the ring's fold
// does (fold.cu): once a rank aborted the communicator, released waits let queued work run on,
// and it must not write stale data into the caller's output.
#include "types.cuh"
#include "status.cuh"

// src[r] is rank r's copy (16-byte words); the R, H of the caller: at most R ranks, H words per
// thread in flight, all R * H loads issued before the first fold, folds in rank order.
template <class T, class Op, int R, int H>
__device__ __forceinline__ void fold_words(uint4* out, const uint4* const* src, int n,
                                           long long words) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < words; i += H * stride) {
    uint4 u[H][R];
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < n && i + h * stride < words) u[h][r] = src[r][i + h * stride];
#pragma unroll
    for (int h = 0; h < H; ++h) {
      if (i + h * stride >= words) break;
      Pack<T, uint4> acc;
      acc.load(u[h][0]);
#pragma unroll
      for (int r = 1; r < R; ++r)
        if (r < n) acc.template fold<Op>(u[h][r]);
      out[i + h * stride] = acc.store();
    }
  }
}

template <class T, class Op>
__global__ void fold_n(typename T::S* __restrict__ out, const typename T::S* __restrict__ mine,
                       const void* const* __restrict__ inbound, int me, int n, long long count, int vectorized,
                       const unsigned long long* abort, long long* status) {
  typedef typename T::S S;
  if (aborted(abort, status, ST_KIND_CE_TWOSHOT)) return;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const int V = 16 / sizeof(S);
  const long long words = vectorized ? count / V : 0;
  uint4* out4 = reinterpret_cast<uint4*>(out);
  if (n <= 8) {
    const uint4* src[8];
#pragma unroll
    for (int r = 0; r < 8; ++r)
      src[r] = r >= n ? nullptr : r == me ? reinterpret_cast<const uint4*>(mine)
                                          : reinterpret_cast<const uint4*>(inbound[r]);
    if (n <= 4)
      fold_words<T, Op, 4, 4>(out4, src, n, words);
    else
      fold_words<T, Op, 8, 2>(out4, src, n, words);
  } else {
    for (long long i = tid; i < words; i += stride) {
      Pack<T, uint4> acc;
      acc.load(me == 0 ? reinterpret_cast<const uint4*>(mine)[i] : reinterpret_cast<const uint4*>(inbound[0])[i]);
      for (int r = 1; r < n; ++r)
        acc.template fold<Op>(r == me ? reinterpret_cast<const uint4*>(mine)[i]
                                      : reinterpret_cast<const uint4*>(inbound[r])[i]);
      out4[i] = acc.store();
    }
  }
  for (long long i = words * V + tid; i < count; i += stride) {
    typename T::A a = T::ld(me == 0 ? mine[i] : reinterpret_cast<const S*>(inbound[0])[i]);
    for (int r = 1; r < n; ++r)
      a = Op::f(a, T::ld(r == me ? mine[i] : reinterpret_cast<const S*>(inbound[r])[i]));
    out[i] = T::st(a);
  }
}
