// oneshot-ll: the one-shot allreduce for the smallest messages, with no barrier. Launcher:
// mpiring/cuda/direct_kernels.py (DirectKernels.launch_ll). The data is its own flag (NCCL's LL
// protocol, written afresh here): every 16-byte line a rank stores into a peer carries 8 bytes
// of payload, as two 64-bit halves (flag << 32 | 32 bits of data). A half is one naturally
// aligned 64-bit store, single-copy atomic, so a reader that sees the flag in both halves has
// the whole line. No flag barrier, no fence: a rank pushes its lines into row `me` of every
// peer's slot, then waits line by line for the peers' rows of its own slot and reduces each
// line as soon as it is complete, in rank order 0..n-1 (bit-identical results on every rank).
//
// Call numbers and slots are the agreement check's (agree.cuh): call c uses slot c % 2 and
// flag (uint32)c; the count lives on the GPU, so launches replay in a CUDA graph.
//
// Reuse without barriers. A reader clears every line it consumed, so a slot is all zeros again
// when its call ends. Rank p writes into slot s of rank q at call c + 2 only after its call
// c + 1 completed, which needed q's header of call c + 1, which q posts only after its call c
// (stream order) finished reading and clearing slot s. So a writer always finds the lines it
// writes empty, and a reader never sees a line of another call. A call skipped because the
// ranks disagree clears the lines its peers pushed too (agree.cuh, step 2).
//
// Agreement. The call's descriptor travels in the header lines (agree.cuh); every block checks
// every peer's before it writes any output: on a difference no rank writes output, and the
// communicator stays usable.
//
// Shape (chosen per call by the launcher: ll_shape in mpiring/cuda/direct_kernels.py). Block b
// takes the `span` = blockDim.x * per_thread consecutive lines from b * span, thread t of it
// lines t, t + blockDim.x, ... (per_thread of them, at most LL_LINES: they stay in registers).
// Lines of one row may come from any block of the writer: a rank's shape is its own business,
// so ranks need not agree on it. No grid can deadlock, even on GPUs full of other work: blocks
// start in index order (what current GPUs do; CUDA does not promise it) and push their lines
// before they wait, so each rank's pushed lines are a prefix of its row, and the rank whose
// started blocks pushed the shorter prefix finds every line its started blocks wait for: they
// finish, and free room for the next ones.
//
// No wait is unbounded: as in direct.cu, a waiting thread reads the clock and the abort word
// every 256 spins (give_up in sync.cuh). Output lines are written per line once complete, so
// a peer that dies while pushing can leave part of the output written; a peer that never
// arrives leaves it untouched.
#include "types.cuh"
#include "status.cuh"
#include "contract.cuh"  // u64, MAXR, LL_THREADS, LL_LINES, struct Ctl
#include "agree.cuh"     // gpu_call, post_descriptor, agree, line primitives
#include "words.cuh"     // load_word, store_word: a line's 8 payload bytes

template <class T, class Op>
__global__ void __launch_bounds__(LL_THREADS) oneshot_ll(const typename T::S* in, typename T::S* out, long long n,
                                                  const Ctl* __restrict__ c, int vec, u64 d0, u64 d1,
                                                  int per_thread) {
  typedef typename T::S S;
  const GpuCall g = gpu_call(c);
  const int me = c->rank, size = c->size, t = threadIdx.x;
  const u64 tag = (u64)g.flag << 32;
  const long long lines = (n + 8 / sizeof(S) - 1) / (8 / sizeof(S));

  // 1. This call's descriptor, then my lines, into row `me` of every peer's slot. The lines go
  // out before the check, unconditionally: a peer that disagrees waits for them to clear them.
  post_descriptor(c, g, d0, d1);
  const long long first = (long long)blockIdx.x * blockDim.x * per_thread + t;
  u64 mine[LL_LINES];
#pragma unroll
  for (int k = 0; k < LL_LINES; ++k) {
    const long long l = first + (long long)k * blockDim.x;
    if (k >= per_thread || l >= lines) break;
    mine[k] = load_word<u64>(in, l, n, vec);
    for (int r = 0; r < size; ++r)
      if (r != me) st_payload(line_of(c, r, g.par, me, l), tag, mine[k]);
  }

  // 2. Every peer's descriptor: the same call? (agree.cuh)
  const int verdict = agree(c, g, d0, d1, ST_KIND_ONESHOT_LL, true);
  if (verdict == VERDICT_STOPPED) return;
  if (verdict == VERDICT_AGREED) {
    // 3. My lines: every rank's row in rank order, reduced, stored; the rows' lines cleared.
    u64 since = 0;
    bool stop = false;
#pragma unroll
    for (int k = 0; k < LL_LINES; ++k) {
      const long long l = first + (long long)k * blockDim.x;
      if (k >= per_thread || l >= lines) break;
      Pack<T, u64> acc;  // a line's 8 payload bytes, widened
      for (int r = 0; r < size; ++r) {
        const u64 v = (r == me) ? mine[k]
                                : wait_line(c, line_of(c, me, g.par, r, l), g.flag, ST_KIND_ONESHOT_LL, r, g.call,
                                            &since, &stop);
        if (stop) return;
        if (r == 0) acc.load(v); else acc.template fold<Op>(v);
      }
      store_word<u64>(out, l, n, vec, acc.store());
      for (int r = 0; r < size; ++r)
        if (r != me) st_line(line_of(c, me, g.par, r, l), 0ull, 0ull);
    }
  }
}
