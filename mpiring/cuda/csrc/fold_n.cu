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
// decides; the staging areas are 16-byte aligned, so it depends on `mine` and `out`).
//
// It writes user output, so it first reads the communicator's abort word, as the ring's fold
// does (fold.cu): once a rank aborted the communicator, released waits let queued work run on,
// and it must not write stale data into the caller's output.
#include "types.cuh"
#include "status.cuh"
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
  for (long long i = tid; i < words; i += stride) {
    Pack<T, uint4> acc;
    acc.load(me == 0 ? reinterpret_cast<const uint4*>(mine)[i] : reinterpret_cast<const uint4*>(inbound[0])[i]);
    for (int r = 1; r < n; ++r)
      acc.template fold<Op>(r == me ? reinterpret_cast<const uint4*>(mine)[i]
                                    : reinterpret_cast<const uint4*>(inbound[r])[i]);
    reinterpret_cast<uint4*>(out)[i] = acc.store();
  }
  for (long long i = words * V + tid; i < count; i += stride) {
    typename T::A a = T::ld(me == 0 ? mine[i] : reinterpret_cast<const S*>(inbound[0])[i]);
    for (int r = 1; r < n; ++r)
      a = Op::f(a, T::ld(r == me ? mine[i] : reinterpret_cast<const S*>(inbound[r])[i]));
    out[i] = T::st(a);
  }
}
