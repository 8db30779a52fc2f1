// The reduction ("fold") kernel of the ring, out = in (op) slot elementwise, and a copy kernel.
// Loads and stores are 16 bytes wide when all three pointers allow it (the launcher decides:
// mpiring/cuda/fold_kernel.py).
//
// Both kernels write user output, so both first read the communicator's abort word: once a
// rank aborted the communicator, released waits let queued work run on, and it must not write
// stale data into the caller's output (it reports the abort to the host instead).
#include "types.cuh"
#include "status.cuh"

#define FOLD_WORDS 4  // 16-byte words in flight per thread and input: a fold waits on its loads,
                      // most of all on the few SMs of a budget, where each thread must ask for more

template <class T, class Op>
__global__ void fold(typename T::S* __restrict__ out, const typename T::S* __restrict__ in,
                     const typename T::S* __restrict__ slot, long long n, int vectorized,
                     const unsigned long long* abort, long long* status) {
  typedef typename T::S S;
  if (aborted(abort, status, ST_KIND_RING)) return;
  const int V = 16 / sizeof(S);
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long nvec = vectorized ? n / V : 0;
  const uint4* in4 = reinterpret_cast<const uint4*>(in);
  const uint4* slot4 = reinterpret_cast<const uint4*>(slot);
  for (long long i = tid; i < nvec; i += FOLD_WORDS * stride) {
    uint4 a[FOLD_WORDS], b[FOLD_WORDS];
#pragma unroll
    for (int h = 0; h < FOLD_WORDS; ++h)  // every load of the thread's words before the first use
      if (i + h * stride < nvec) { a[h] = in4[i + h * stride]; b[h] = slot4[i + h * stride]; }
#pragma unroll
    for (int h = 0; h < FOLD_WORDS; ++h) {
      if (i + h * stride >= nvec) break;
      Pack<T, uint4> acc;
      acc.load(a[h]);
      acc.template fold<Op>(b[h]);
      reinterpret_cast<uint4*>(out)[i + h * stride] = acc.store();
    }
  }
  for (long long i = nvec * V + tid; i < n; i += stride)
    out[i] = T::st(Op::f(T::ld(in[i]), T::ld(slot[i])));
}

template <class U>
__global__ void copy(U* __restrict__ out, const U* __restrict__ src, long long n,
                     const unsigned long long* abort, long long* status) {
  if (aborted(abort, status, ST_KIND_RING)) return;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < n; i += stride) out[i] = src[i];
}

// out[0:n] /= ranks: op avg, the sum divided by the number of ranks in the arithmetic type and
// rounded once (what numpy does with x / np.float32(ranks) for half types). Floating types only.
template <class T>
__global__ void average(typename T::S* __restrict__ out, long long n, int ranks,
                        const unsigned long long* abort, long long* status) {
  typedef typename T::A A;
  if (aborted(abort, status, ST_KIND_RING)) return;
  const A divisor = (A)ranks;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < n; i += stride) out[i] = T::st(T::ld(out[i]) / divisor);
}
