// The one-shot and two-shot allreduce kernels (launcher: mpiring/cuda/direct_kernels.py, whose
// docstring describes the two algorithms). Both push: every byte crossing NVLink is a store
// into a peer's staging, never a load from it (remote stores are posted; remote loads wait a
// full round trip).
//
// Barriers. Block b of every rank meets block b of every other rank: thread t < n of block b
// stores the barrier's value into rank t's flag [me][b] with release semantics (system scope)
// after __syncthreads (it *arrives*), then spins with acquire loads until its own flag [t][b]
// reaches it (it *waits*). Ranges are cut into 16-byte words and word w of a range always
// belongs to thread w % (grid size), on every rank, in every step, whether the caller's
// pointers allow 16-byte accesses or not (then the thread moves the word element by element):
// so a block only ever needs its namesakes. Barrier k of GPU call c has the value
// c << STEP_BITS | (k + 1) (barrier_value): the call number is the agreement check's (agree.cuh),
// equal on every rank and kept in device memory, so values only grow, on every rank alike,
// whatever ran before (a skipped call, a notice, another algorithm), and the launches replay
// in a CUDA graph.
//
// The first barrier's arrival goes out before the agreement check (step 0 of each kernel):
// the check's wait for the peers' descriptors (posted at the kernel's start) then overlaps the
// barrier's fence and flag instead of preceding them, which saves one NVLink crossing per call.
// An arrival for a call that the check then skips is harmless: the next call's barriers wait
// for larger values, and a flag never moves backwards.
//
// No wait is unbounded. A spinning thread reads the GPU clock now and then: past the
// communicator's timeout it aborts the communicator (writes 1 + rank into every rank's abort
// word), reports the rank it waited for in the host status block, and the kernel returns
// without writing output. A spinning thread that finds the abort word set (a peer gave up)
// reports that and returns too. The same holds inside a replayed CUDA graph.
//
// Push order. Every rank pushes to its peers in the order me + 1, me + 2, ... (mod size): at
// each step the ranks' pushes form a permutation (rank r to rank r + i), so every rank's NVLink
// ingress is busy. Pushing in rank order sent every rank's first range to rank 0 while the
// others idled, then to rank 1: on 4 H200s one-shot took 21.4 us at 1 MiB in graphs, 17.3 now.
//
// Reuse without extra barriers. A rank writes into a peer's region only after a barrier (or an
// agreement check) that the peer entered after its last read of that region: one-shot
// alternates two slots by the parity of the call number (rank p writes slot s of rank q at call
// c + 2 only after its call c + 1 waited for q's descriptor of c + 1, which q posts only once its
// call c, stream-ordered before, finished reading slot s); in two-shot, a chunk's second
// barrier separates the readers of the input staging from the next chunk's writers, and the
// next chunk's first barrier separates the readers of the output staging from the next writers. Kernels of one communicator never run concurrently
// (the launcher's caller orders them), so flags serve one kernel at a time. Data
// written by peers is read with L2-only loads (ld.global.cg), so no stale L1 line is ever used.
//
// Staging words keep their owner. A barrier orders block b of one rank with block b of the
// others only, never with another block. So when a later chunk of the same call writes a
// staging word, the writer must be the namesake of the block that read that word in the chunk
// before: the owner of a staging word must depend on its address alone, not on the chunk's
// geometry. Word w of a shard is moved by thread w % T (T: the grid's threads) and a shard
// starts at r * shard in the staging, so the owner of staging word r * shard / V + w is the
// same thread for every geometry exactly when every shard is a multiple of T words. Two-shot
// therefore cuts a call of several chunks into shards of whole multiples of T words, the last,
// shorter chunk too (its shards only shrink to the next multiple). Before, the last chunk's
// shards were cut to whole words only: its rows started elsewhere, another block wrote words
// a block of the previous chunk might still be reading, and at 4 ranks about one call in six
// of 35 MiB to 500 MiB that was no multiple of the chunk returned wrong sums. A call of one
// chunk reuses nothing (the next kernel starts after every block of this one has passed its
// last barrier, which every peer's blocks have entered), so its shards stay balanced to a word.
#include "types.cuh"
#include "status.cuh"
#include "contract.cuh"  // u64, MAXR, DIRECT_THREADS, struct Ctl
#include "sync.cuh"      // st_release, ld_acquire, clock_ns, give_up
#include "agree.cuh"     // gpu_call, post_descriptor, agree
#include "words.cuh"     // ldcg, load_word, store_word

#define UNROLL 4  // words in flight per thread in copies: loads are latency-bound otherwise
__device__ __forceinline__ long long lmin(long long a, long long b) { return a < b ? a : b; }

// Barriers per call stay below 2^STEP_BITS: two-shot has two per chunk, and a chunk holds at
// least half the two-shot staging (16 MiB), so a call would need 8 TiB to run out. The value a
// flag takes when an abort releases the waits (0x3F3F...3F, mpiring/cuda/watchdog.py) stays
// above every barrier's for 2^42 calls: 200 days of back-to-back 4 us calls.
#define STEP_BITS 20
__device__ __forceinline__ u64 barrier_value(const GpuCall& g, int step) {
  return (g.call << STEP_BITS) | (u64)(step + 1);
}

// Arrive at barrier `step` (see the module docstring): after every thread of the block is done
// with its stores, thread t < size releases this block's flag [me][b] in rank t. The release
// (system scope, after __syncthreads) is what makes the block's stores into rank t visible to
// rank t's namesake block once it has read the flag.
__device__ __forceinline__ void arrive(const Ctl* c, const GpuCall& g, int step) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < c->size) st_release((u64*)c->flags[t] + (size_t)c->rank * c->blocks + blockIdx.x, barrier_value(g, step));
}

// Wait at barrier `step`: thread t < size spins until rank t's flag [t][b] here reaches the
// barrier's value (acquire: rank t's block b stored everything before arriving). Returns true,
// in every thread of the block, if the kernel must stop because the communicator is aborted (a
// wait here timed out, or some rank aborted it).
__device__ __forceinline__ bool wait_for_peers(const Ctl* c, const GpuCall& g, int kind, int step) {
  const int t = threadIdx.x;
  int stop = 0;
  if (t < c->size) {
    const u64 value = barrier_value(g, step);
    const u64* mine = (const u64*)c->flags[c->rank] + (size_t)t * c->blocks + blockIdx.x;
    u64 since = 0;
    for (unsigned spins = 1; ld_acquire(mine) < value; ++spins) {
      if (spins % 256) continue;                  // the clock and abort word now and then only
      if (give_up(c, &since, kind, t, g.call, step)) { stop = 1; break; }
    }
  }
  return __syncthreads_or(stop);
}

__device__ __forceinline__ bool barrier(const Ctl* c, const GpuCall& g, int kind, int step) {
  arrive(c, g, step);
  return wait_for_peers(c, g, kind, step);
}

// The peer a rank pushes to at step i = 1 .. size - 1 of a push (see "Push order" above).
__device__ __forceinline__ int push_peer(int me, int i, int size) { return me + i < size ? me + i : me + i - size; }

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
      if (w + h * stride < nw) u[h] = load_word<uint4>(src, w + h * stride, len, src_vec, src_peer);
#pragma unroll
    for (int h = 0; h < UNROLL; ++h)
      if (w + h * stride < nw) store_word(dst, w + h * stride, len, dst_vec, u[h]);
  }
}

// Row `me` of every peer's one-shot slot `par` = src[0:len], in push order: each word loaded
// once and stored to every peer.
template <class S>
__device__ __forceinline__ void push_row(const Ctl* c, int par, long long row, const S* src, bool src_vec,
                                         long long len) {
  GRID_THREAD;
  const int me = c->rank, size = c->size;
  const long long nw = (len + 16 / sizeof(S) - 1) / (16 / sizeof(S));
  for (long long w = tid; w < nw; w += UNROLL * stride) {
    uint4 u[UNROLL];
#pragma unroll
    for (int h = 0; h < UNROLL; ++h)
      if (w + h * stride < nw) u[h] = load_word<uint4>(src, w + h * stride, len, src_vec, false);
    for (int i = 1; i < size; ++i) {
      S* dst = (S*)c->oneshot[push_peer(me, i, size)][par] + me * row;
#pragma unroll
      for (int h = 0; h < UNROLL; ++h)
        if (w + h * stride < nw) store_word(dst, w + h * stride, len, true, u[h]);
    }
  }
}

// out[0:len] = srcs[0] op srcs[1] op ... in rank order. srcs[me] is the caller's input (16-byte
// accessible if in_vec); the others are staging written by peers. With dsts, the result is
// also stored into dsts[0], ..., dsts[n - 2]: the peers' staging, in push order.
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
          u[h][r] = load_word<uint4>(srcs[r], w + h * stride, len, r == me ? vec : true, r != me);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long k = w + h * stride;
      if (k >= nw) break;
      Pack<T, uint4> acc; acc.load(u[h][0]);
#pragma unroll
      for (int r = 1; r < MAXR; ++r) if (r < n) acc.template fold<Op>(u[h][r]);
      const uint4 res = acc.store();
      store_word(out, k, len, vec, res);
      if (dsts)
        for (int i = 0; i < n - 1; ++i) store_word(dsts[i], k, len, true, res);
    }
  }
}

template <class T, class Op>
__global__ void __launch_bounds__(DIRECT_THREADS) oneshot(const typename T::S* in, typename T::S* out, long long n,
                                               const Ctl* __restrict__ c, int vec, u64 d0, u64 d1) {
  typedef typename T::S S;
  const GpuCall g = gpu_call(c);
  post_descriptor(c, g, d0, d1);                // 0. this call's descriptor to every peer
  const int me = c->rank, size = c->size;
  const long long row = (n + 16 / sizeof(S) - 1) / (16 / sizeof(S)) * (16 / sizeof(S));
  push_row<S>(c, g.par, row, in, vec, n);       // 1. my input into row me of every peer's slot
  arrive(c, g, 0);                              // before the check: see the module docstring
  const int verdict = agree(c, g, d0, d1, ST_KIND_ONESHOT, true);
  if (verdict == VERDICT_STOPPED) return;
  if (verdict == VERDICT_AGREED) {
    if (wait_for_peers(c, g, ST_KIND_ONESHOT, 0)) return;
    const S* srcs[MAXR];                        // 2. reduce the rows of my slot, in rank order
    for (int r = 0; r < size; ++r) srcs[r] = (r == me) ? in : (const S*)c->oneshot[me][g.par] + r * row;
    reduce_range<T, Op>(out, vec, srcs, nullptr, me, size, n);
  }
}

template <class T, class Op>
__global__ void __launch_bounds__(DIRECT_THREADS) twoshot(const typename T::S* in, typename T::S* out, long long n,
                                               const Ctl* __restrict__ c, int vec, u64 d0, u64 d1) {
  typedef typename T::S S;
  const GpuCall g = gpu_call(c);
  post_descriptor(c, g, d0, d1);                // this call's descriptor to every peer
  if (n == 0) {                                 // no chunk: check the (empty) call all the same
    agree(c, g, d0, d1, ST_KIND_TWOSHOT, true);
    return;
  }
  const int me = c->rank, size = c->size;
  const long long V = 16 / sizeof(S);
  // Shards of a call of several chunks are whole multiples of G elements: G is one 16-byte word
  // for every thread of the grid. See "Staging words keep their owner" above: this is what lets
  // a chunk reuse the staging after barriers of namesake blocks only. The host guarantees
  // size * G * sizeof(S) <= twoshot_bytes (mpiring/cuda/layout.py), so chunk > 0.
  const long long G = V * gridDim.x * blockDim.x;
  const long long chunk = c->twoshot_bytes / sizeof(S) / (size * G) * (size * G);
  const long long grain = n > chunk ? G : V;    // one chunk: no reuse inside the call
  S* stage_in = (S*)c->twoshot_in[me];
  const S* stage_out = (const S*)c->twoshot_out[me];
  for (long long base = 0, k = 0; base < n; base += chunk, ++k) {
    const long long m = lmin(chunk, n - base);
    const long long shard = ((m + size - 1) / size + grain - 1) / grain * grain;  // size*shard <= chunk
    for (int i = 1; i < size; ++i) {            // 1. shard s of my input into row me of rank s,
      const int s = push_peer(me, i, size);     // in push order
      const long long lo = lmin(s * shard, m), len = lmin(shard, m - lo);
      copy_range<S>((S*)c->twoshot_in[s] + me * shard, true, in + base + lo, vec, false, len);
    }
    arrive(c, g, 2 * k);
    if (k == 0) {                               // the whole call is checked before its first wait
      const int verdict = agree(c, g, d0, d1, ST_KIND_TWOSHOT, true);
      if (verdict != VERDICT_AGREED) return;
    }
    if (wait_for_peers(c, g, ST_KIND_TWOSHOT, 2 * k)) return;
    {                                             // 2. reduce my shard, push it to every peer
      const long long lo = lmin(me * shard, m), len = lmin(shard, m - lo);
      const S* srcs[MAXR]; S* dsts[MAXR - 1];
      for (int r = 0; r < size; ++r) srcs[r] = (r == me) ? in + base + lo : stage_in + r * shard;
      for (int i = 0; i < size - 1; ++i)        // the peers' output staging, in push order
        dsts[i] = (S*)c->twoshot_out[push_peer(me, i + 1, size)] + lo;
      reduce_range<T, Op>(out + base + lo, vec, srcs, dsts, me, size, len);
    }
    if (barrier(c, g, ST_KIND_TWOSHOT, 2 * k + 1)) return;
    for (int s = 0; s < size; ++s) {            // 3. the other shards, reduced by their owners
      const long long lo = lmin(s * shard, m), len = lmin(shard, m - lo);
      if (s != me) copy_range<S>(out + base + lo, vec, stage_out + lo, true, true, len);
    }
  }
}
