// The agreement check on the GPU, shared by every kernel of a GPU-checked row (oneshot,
// twoshot: direct.cu; oneshot-ll: oneshot_ll.cu) and by the notice kernel (notice.cu), which a
// rank launches instead of its call when that call cannot run on the GPU this time (see
// mpiring/core/descriptor.py for the descriptor and the notice kinds).
//
// Call numbers. ll_state packs (b << START_BITS) | s: b counts this rank's GPU-checked calls
// begun (notices included), equal on every rank, since every rank takes part in every such
// call; s counts the blocks of the current launch that have taken their number. Call c uses
// header slot c % 2 and flag (uint32)c (never 0: 0 is "empty"). Each block takes c = b + 1 and
// counts itself in one atomic add at its start; the block that finds s = gridDim.x - 1 started
// last, when every block of the launch holds its number, so it stores c << START_BITS for the
// next launch. Every block of a launch therefore reads the same c whatever the grid, nothing is
// left to do at the kernel's end, and the count lives in device memory, so launches replay in a
// CUDA graph.
//
// One call, on every rank:
//  1. every block stores this call's descriptor, as two 16-byte lines (flag twice and 8 bytes
//     of payload each: the LL format, see oneshot_ll.cu), into header slot c % 2, row `me`, of
//     every peer (see post_descriptor);
//  2. every block waits for every peer's two lines and compares them with its own descriptor,
//     before it writes any output or waits at any barrier. Equal everywhere: the call proceeds.
//     Otherwise every rank finds a difference (if rank r saw only equals, all are equal), so
//     every rank's kernel skips the call: block 0 reports the first differing peer in the host
//     status block (ST_MM_*: the host raises it), every block clears the oneshot-ll lines that
//     oneshot-ll peers pushed into this rank's slot (it knows how many from their headers), and
//     the kernel finishes. Nothing else changed: a one-shot or two-shot kernel's first barrier
//     flag (stored before the check) names this call, which no later barrier waits for (their
//     values name later calls: direct.cu), and data pushed into the one-shot and two-shot
//     staging is simply overwritten by the next call (it is never read without a barrier). So
//     the next call starts from the same state on every rank: the communicator stays usable.
// Header lines are never cleared: every rank posts into every peer's slot c % 2 at every call c
// (a notice too), so a line there holds the flag of call c - 2 until its writer's call c
// overwrites it, and flags of calls two apart differ, 2^32 calls on included.
//
// Reuse without barriers. Rank p stores into header slot s of rank q at call c + 2 only after
// its call c + 1 finished, which waited for q's header of call c + 1; q stores that only after
// its call c (stream order) finished reading slot s. So a reader never sees a header of a later
// call, and one of an earlier call carries another flag (a late duplicate of call c's: see
// post_descriptor). The same argument keeps oneshot-ll's data lines empty between calls,
// skipped calls included (step 2 clears them).
//
// No wait is unbounded: every wait polls the clock and the abort word (give_up, sync.cuh), and
// gives up once it has gone the timeout without progress (a line that arrives restarts it).
#ifndef MPIRING_AGREE_CUH
#define MPIRING_AGREE_CUH

#include "status.cuh"
#include "contract.cuh"  // u64, MAXR, struct Ctl
#include "sync.cuh"      // give_up

typedef unsigned int u32;

// A call's descriptor (mpiring/core/descriptor.py): word 0 is its count; word 1 packs, by (first
// bit:bits), the fields below (tests/test_cuda_contract.py checks this line against the Python):
// word 1: dtype 0:8, op 8:8, algorithm 16:8, collective 24:8, kind 32:4, memory 36:2, in_place 38:2, batches 40:16, itemsize 56:8
// agree() compares both words whole, so every field takes part in the check, also those no
// kernel reads (the block of Reduce_scatter_block and Allgather follows from count, collective
// and in_place). The fields the kernels read:
#define DESC_ALGORITHM(d1) ((int)(((d1) >> 16) & 0xff))
#define DESC_KIND(d1) ((int)(((d1) >> 32) & 0xf))
#define DESC_ITEMSIZE(d1) ((long long)(((d1) >> 56) & 0xff))
#define DESC_CALL 0       // a kernel's own call
#define DESC_REJECTED 1   // a notice: the sender rejected its own arguments
#define DESC_DISAGREED 2  // a notice: the sender's host check found the ranks disagree
#define CODE_ONESHOT_LL 10  // the oneshot-ll row's code (mpiring/algorithms/direct.py)

// One 16-byte line: two naturally aligned 64-bit halves, each (flag << 32 | 32 bits of payload).
__device__ __forceinline__ void st_line(u64* p, u64 a, u64 b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" :: "l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_line(const u64* p, u64& a, u64& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
// The line holding 8 payload bytes v under flag `tag` (flag << 32).
__device__ __forceinline__ void st_payload(u64* p, u64 tag, u64 v) {
  st_line(p, tag | (v & 0xffffffffull), tag | (v >> 32));
}

// Line l of source `src`'s row in rank `at`'s oneshot-ll slot `par` (as mapped here).
__device__ __forceinline__ u64* line_of(const Ctl* c, int at, int par, int src, long long l) {
  return (u64*)(c->ll[at][par] + (u64)src * (u64)c->ll_row_bytes) + 2 * l;
}
// Header line `half` (0, 1) of source `src` in rank `at`'s header slot `par`.
__device__ __forceinline__ u64* header_of(const Ctl* c, int at, int par, int src, int half) {
  return (u64*)c->ll_headers[at] + 2 * (2 * (par * MAXR + src) + half);
}

// Wait until the line at p carries `flag` in both halves; returns its 8 payload bytes, or
// sets *stop (the communicator was aborted, or this wait timed out: see give_up). The timeout
// bounds the time without progress: a thread's waits share *since, and a line that arrives is
// progress, so the next wait's clock starts afresh (0: stamped at its first check).
__device__ __forceinline__ u64 wait_line(const Ctl* c, const u64* p, u32 flag, int kind, int src, u64 call,
                                         u64* since, bool* stop, int step = 0) {
  u64 a, b;
  for (unsigned spins = 1;; ++spins) {
    ld_line(p, a, b);
    if ((u32)(a >> 32) == flag && (u32)(b >> 32) == flag) break;
    if (spins % 256 == 0 && give_up(c, since, kind, src, call, step)) { *stop = true; return 0; }
  }
  *since = 0;  // progress: the clock restarts with the next wait
  return (a & 0xffffffffull) | (b << 32);
}

struct GpuCall {
  u64 call;  // this rank's GPU-checked call number (1, 2, ...)
  u32 flag;  // (u32)call, never 0
  int par;   // header and oneshot-ll slot: call % 2
};

// ll_state's low START_BITS bits count a launch's started blocks; the rest, calls begun: 2^44
// calls, as direct.cu's barrier values (call << STEP_BITS) allow. Grids stay far below 2^20
// blocks: one-shot and two-shot run at most 4096 (MPIRING_DIRECT_BLOCKS), oneshot-ll at most one
// per line of its largest message (tests/test_cuda_contract.py checks both bounds).
#define START_BITS 20

// This launch's call number: thread 0 of each block takes it and counts the block as started
// in one atomic add (one read of the word, as a plain load would be). The block that started
// last stores the count of calls begun for the next launch: every other block's add came
// before its own in the word's order, so every block has its number, and no block of this
// launch touches the word again (the next launch's adds come after this launch ends).
__device__ __forceinline__ GpuCall gpu_call(const Ctl* c) {
  __shared__ u64 shared_call;
  if (threadIdx.x == 0) {
    unsigned long long* state = (unsigned long long*)c->ll_state;
    const u64 seen = atomicAdd(state, 1ull);
    const u64 call = (seen >> START_BITS) + 1;
    if ((seen & ((1ull << START_BITS) - 1)) == gridDim.x - 1) atomicExch(state, call << START_BITS);
    shared_call = call;
  }
  __syncthreads();
  GpuCall g;
  g.call = shared_call;
  g.flag = (u32)g.call ? (u32)g.call : 1u;
  g.par = (int)(g.call & 1);
  return g;
}

// Step 1: thread t of every block stores this call's descriptor into rank t's header slot.
// Every block, not only block 0: a peer's blocks then never wait for one block of this
// kernel that may not be resident yet (a GPU shared with other work). The copies are equal,
// and a late copy landing after the reader's call ended is harmless: it carries this call's
// flag, which no later reader of the slot waits for, and the writer overwrites it at call
// c + 2 (its own stream orders the two).
__device__ __forceinline__ void post_descriptor(const Ctl* c, GpuCall g, u64 d0, u64 d1) {
  const int t = threadIdx.x;
  if (t >= c->size || t == c->rank) return;
  const u64 tag = (u64)g.flag << 32;
  st_payload(header_of(c, t, g.par, c->rank, 0), tag, d0);
  st_payload(header_of(c, t, g.par, c->rank, 1), tag, d1);
}

#define STEP_AGREE -1  // the step a timed-out wait for a peer's descriptor reports
#define VERDICT_AGREED 0
#define VERDICT_SKIP 1  // skip the call: the kernel returns
#define VERDICT_STOPPED 2  // aborted or timed out: return at once (the communicator has failed)

// Clear the oneshot-ll lines that peer `src` (header words t0, t1) pushed into this rank's
// slot for this call, if it runs oneshot-ll: wait for each (bounded), then zero it.
__device__ __forceinline__ bool scrub_lines(const Ctl* c, GpuCall g, int src, u64 t0, u64 t1, int kind,
                                            u64* since) {
  if (DESC_KIND(t1) != DESC_CALL || DESC_ALGORITHM(t1) != CODE_ONESHOT_LL) return false;
  const long long room = c->ll_row_bytes / 16;  // lines of a row: a peer never pushes more
  long long lines = ((long long)t0 * DESC_ITEMSIZE(t1) + 7) / 8;
  if (lines > room || lines < 0) lines = room;
  bool stop = false;
  // Each block scrubs one contiguous share of the row, as a oneshot-ll block reads one
  // contiguous span: blocks start in index order, and a writer's blocks push before they wait,
  // so the lines pushed so far are a prefix of the row, and the rank whose started blocks
  // pushed the shorter prefix finds every line its started blocks wait for. (A grid-stride
  // loop would have block 0 wait for lines of the writer's last blocks: with both GPUs full,
  // a wait for blocks that cannot start.)
  const long long share = (lines + gridDim.x - 1) / gridDim.x;
  const long long end = min(lines, ((long long)blockIdx.x + 1) * share);
  for (long long l = (long long)blockIdx.x * share + threadIdx.x; l < end; l += blockDim.x) {
    u64* p = line_of(c, c->rank, g.par, src, l);
    wait_line(c, p, g.flag, kind, src, g.call, since, &stop);
    if (stop) return true;
    st_line(p, 0ull, 0ull);
  }
  return false;
}

// Step 2: compare every peer's descriptor with this call's (d0, d1). `report`: whether a
// difference goes to the host status block (a notice's rank raised its error on the host).
__device__ __forceinline__ int agree(const Ctl* c, GpuCall g, u64 d0, u64 d1, int kind, bool report) {
  __shared__ u64 theirs[MAXR][2];
  __shared__ int first_bad;
  const int t = threadIdx.x, me = c->rank, size = c->size;
  if (t == 0) first_bad = MAXR;
  __syncthreads();
  u64 since = 0;
  bool stop = false;
  if (t < size && t != me) {
    const u64* h = header_of(c, me, g.par, t, 0);
    const u64 a = wait_line(c, h, g.flag, kind, t, g.call, &since, &stop, STEP_AGREE);
    const u64 b = stop ? 0 : wait_line(c, h + 2, g.flag, kind, t, g.call, &since, &stop, STEP_AGREE);
    theirs[t][0] = a;
    theirs[t][1] = b;
    if (!stop && (a != d0 || b != d1)) atomicMin(&first_bad, t);
  }
  if (__syncthreads_or(stop)) return VERDICT_STOPPED;
  if (first_bad == MAXR) return VERDICT_AGREED;
  if (report && blockIdx.x == 0 && t == first_bad)
    report_mismatch((long long*)c->status, kind, t, g.call, theirs[t][0], theirs[t][1], d0, d1);
  bool lost = false;
  for (int r = 0; r < size; ++r)
    if (r != me && scrub_lines(c, g, r, theirs[r][0], theirs[r][1], kind, &since)) { lost = true; break; }
  return __syncthreads_or(lost) ? VERDICT_STOPPED : VERDICT_SKIP;
}

#endif  // MPIRING_AGREE_CUH
