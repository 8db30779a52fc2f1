// oneshot-ll: the one-shot allreduce for the smallest messages, with no barrier. Launcher:
// mpiring/cuda/direct.py (DirectKernels.launch_ll). The data is its own flag (NCCL's LL
// protocol, written afresh here): every 16-byte line a rank stores into a peer carries 8 bytes
// of payload, as two 64-bit halves (flag << 32 | 32 bits of data). A half is one naturally
// aligned 64-bit store, single-copy atomic, so a reader that sees the flag in both halves has
// the whole line. No flag barrier, no fence: a rank pushes its lines into row `me` of every
// peer's slot, then waits line by line for the peers' rows of its own slot and reduces each
// line as soon as it is complete, in rank order 0..n-1 (bit-identical results on every rank).
//
// Call numbers. ll_state[0] counts this rank's completed calls (equal on every rank: the
// calls are collective); call c uses slot c % 2 and flag (uint32)c, never 0 (0 is "empty").
// The block that finishes last advances the count (a finished-block counter in ll_state[1]),
// so every block of a launch reads the same c, whatever the grid. The count lives in device
// memory, so launches replay in a CUDA graph.
//
// Reuse without barriers. A reader clears every line (and header) it consumed, so a slot is
// all zeros again when its call ends. Rank p writes into slot s of rank q at call c + 2 only
// after its call c + 1 completed, which needed q's lines of call c + 1, which q pushes only
// after its call c (stream order) finished reading and clearing slot s. So a writer always
// finds the lines it writes empty, and a reader never sees a line of another call.
//
// Agreement. Block 0 also stores a header line into every peer: this call's descriptor (count,
// dtype, op, algorithm, collective; packed by the launcher). Every block checks every peer's
// header before it touches any data line: a peer that disagrees makes every rank report
// ST_MISMATCH (with both descriptors) and return without writing output.
//
// No wait is unbounded: as in direct.cu, a waiting thread reads the clock and the abort word
// every 256 spins (give_up in sync.cuh). Output lines are written per line once complete, so
// a peer that dies while pushing can leave part of the output written; a peer that never
// arrives leaves it untouched.
#include "types.cuh"
#include "status.cuh"
#include "contract.cuh"  // u64, MAXR, LL_THREADS, LL_LINES, struct Ctl
#include "sync.cuh"      // give_up

typedef unsigned int u32;

__device__ __forceinline__ void st_line(u64* p, u64 a, u64 b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" :: "l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_line(const u64* p, u64& a, u64& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// Line l of source `src`'s row in rank `at`'s slot `par` (as mapped here), and its header.
__device__ __forceinline__ u64* line_of(const Ctl* c, int at, int par, int src, long long l) {
  return (u64*)(c->ll[at][par] + (u64)src * (u64)c->ll_row_bytes) + 2 * l;
}
__device__ __forceinline__ u64* header_of(const Ctl* c, int at, int par, int src) {
  return (u64*)c->ll_headers[at] + 2 * (par * MAXR + src);
}

// Wait until the line at p carries `flag` in both halves; returns its 8 payload bytes, or
// sets *stop (the communicator was aborted, or this wait timed out: see give_up).
__device__ __forceinline__ u64 wait_line(const Ctl* c, const u64* p, u32 flag, int src, u64 call, u64* since,
                                         bool* stop) {
  u64 a, b;
  for (unsigned spins = 1;; ++spins) {
    ld_line(p, a, b);
    if ((u32)(a >> 32) == flag && (u32)(b >> 32) == flag) break;
    if (spins % 256 == 0 && give_up(c, since, ST_KIND_ONESHOT_LL, src, call, 0)) { *stop = true; return 0; }
  }
  return (a & 0xffffffffull) | (b << 32);
}

// The 8 bytes of line l (elements [l*V, l*V + V) of len): one 64-bit access where p allows
// (vec) and the line is whole, else element by element (zeros past the end).
template <class S> __device__ __forceinline__ u64 load8(const S* p, long long l, long long len, bool vec) {
  const int V = 8 / sizeof(S);
  const long long i0 = l * V;
  if (vec && i0 + V <= len) return ((const u64*)p)[l];
  u64 u = 0;
  S* e = reinterpret_cast<S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) e[k] = p[i0 + k];
  return u;
}
template <class S> __device__ __forceinline__ void store8(S* p, long long l, long long len, bool vec, u64 u) {
  const int V = 8 / sizeof(S);
  const long long i0 = l * V;
  if (vec && i0 + V <= len) { ((u64*)p)[l] = u; return; }
  const S* e = reinterpret_cast<const S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) p[i0 + k] = e[k];
}

template <class T, class Op>
__global__ void __launch_bounds__(LL_THREADS) oneshot_ll(const typename T::S* in, typename T::S* out, long long n,
                                                  const Ctl* __restrict__ c, int vec, u64 desc) {
  typedef typename T::S S;
  u64* state = (u64*)c->ll_state;
  __shared__ u64 shared_call;
  if (threadIdx.x == 0) shared_call = *(volatile u64*)state + 1;
  __syncthreads();
  const u64 call = shared_call;
  const int me = c->rank, size = c->size, par = (int)(call & 1);
  const u32 flag = (u32)call ? (u32)call : 1u;
  const u64 tag = (u64)flag << 32;
  const long long lines = (n + 8 / sizeof(S) - 1) / (8 / sizeof(S));
  const int t = threadIdx.x;

  // 1. This call's header, then my lines, into row `me` of every peer's slot `par`.
  if (blockIdx.x == 0 && t < size && t != me)
    st_line(header_of(c, t, par, me), tag | (desc & 0xffffffffull), tag | (desc >> 32));
  const long long first = (long long)blockIdx.x * LL_THREADS * LL_LINES + t;
  u64 mine[LL_LINES];
#pragma unroll
  for (int k = 0; k < LL_LINES; ++k) {
    const long long l = first + (long long)k * LL_THREADS;
    if (l >= lines) break;
    mine[k] = load8(in, l, n, vec);
    for (int r = 0; r < size; ++r)
      if (r != me) st_line(line_of(c, r, par, me, l), tag | (mine[k] & 0xffffffffull), tag | (mine[k] >> 32));
  }

  // 2. Every peer's header: the same call? (thread t waits for rank t)
  u64 since = 0;
  bool stop = false;
  int bad = 0;
  if (t < size && t != me) {
    const u64 theirs = wait_line(c, header_of(c, me, par, t), flag, t, call, &since, &stop);
    if (!stop && theirs != desc) {
      report((long long*)c->status, ST_MISMATCH, ST_KIND_ONESHOT_LL, t, call, 0, (long long)theirs, (long long)desc);
      bad = 1;
    }
  }
  if (__syncthreads_or(bad || stop)) return;

  // 3. My lines: every rank's row in rank order, reduced, stored; the rows' lines cleared.
#pragma unroll
  for (int k = 0; k < LL_LINES; ++k) {
    const long long l = first + (long long)k * LL_THREADS;
    if (l >= lines) break;
    Pack<T, u64> acc;  // a line's 8 payload bytes, widened
    for (int r = 0; r < size; ++r) {
      const u64 v = (r == me) ? mine[k] : wait_line(c, line_of(c, me, par, r, l), flag, r, call, &since, &stop);
      if (stop) return;
      if (r == 0) acc.load(v); else acc.template fold<Op>(v);
    }
    store8(out, l, n, vec, acc.store());
    for (int r = 0; r < size; ++r)
      if (r != me) st_line(line_of(c, me, par, r, l), 0ull, 0ull);
  }

  // 4. The last block to finish clears the headers it read and advances the call count.
  __syncthreads();
  if (t == 0) {
    __threadfence();
    if (atomicAdd((unsigned long long*)&state[1], 1ull) == gridDim.x - 1) {
      for (int r = 0; r < size; ++r)
        if (r != me) st_line(header_of(c, me, par, r), 0ull, 0ull);
      state[1] = 0;
      *(volatile u64*)state = call;
    }
  }
}
