// The host status block: sixteen 64-bit words of pinned host memory, mapped into the GPU. In
// words 0-5 a kernel that gives up says why (the communicator then fails); in words 8-15 the
// GPU-side agreement check (agree.cuh) reports calls it skipped because the ranks disagreed
// (the communicator stays usable). mpiring/cuda/status.py turns the words into the caller's
// exception. The numbers are mirrored in mpiring/cuda/contract.py; tests/test_cuda_contract.py
// checks that both sides agree.
#ifndef MPIRING_STATUS_CUH
#define MPIRING_STATUS_CUH

// Word indices.
#define ST_STATE 0
#define ST_KIND 1
#define ST_PEER 2
#define ST_SEQ 3
#define ST_BLOCK 4
#define ST_STEP 5
// Skipped calls: a count (written last), and the latest one's details.
#define ST_MM_COUNT 8    // calls skipped so far because the ranks disagreed
#define ST_MM_KIND 9     // the algorithm whose kernel found it (ST_KIND_*)
#define ST_MM_PEER 10    // the first peer whose descriptor differed
#define ST_MM_CALL 11    // the GPU call number
#define ST_MM_THEIRS 12  // the peer's descriptor: two words
#define ST_MM_MINE 14    // this rank's descriptor: two words
#define ST_WORDS 16
// ST_STATE values.
#define ST_HEALTHY 0
#define ST_TIMED_OUT 1
#define ST_ABORTED 2
// ST_KIND values: the algorithm whose kernel reported.
#define ST_KIND_RING 1
#define ST_KIND_ONESHOT 2
#define ST_KIND_TWOSHOT 3
#define ST_KIND_ONESHOT_LL 4
#define ST_KIND_NOTICE 5  // notice.cu: a rank's stand-in for a call it could not run
#define ST_KIND_CE_TWOSHOT 6  // fold_n.cu: the all-to-all copy-engine two-shot's fold

// Record a failure in the host status block (first report wins: the fields are written
// before STATE, behind a system fence, so the host never reads a half-written report).
__device__ __forceinline__ void report(long long* status, int state, int kind, long long peer,
                                       unsigned long long seq, int step) {
  volatile long long* s = (volatile long long*)status;
  if (s[ST_STATE] != 0) return;
  s[ST_KIND] = kind; s[ST_PEER] = peer; s[ST_SEQ] = (long long)seq;
  s[ST_BLOCK] = blockIdx.x; s[ST_STEP] = step;
  __threadfence_system();
  s[ST_STATE] = state;
}

// Record a call skipped because the ranks disagreed: the details, then (behind a system fence)
// the count, which the host compares with the number it already raised. One thread of one
// kernel reports per call, and a communicator's kernels never run concurrently, so there is
// never more than one writer; a later report overwrites the details (the host re-reads the
// count after the details, and retries if it moved).
__device__ __forceinline__ void report_mismatch(long long* status, int kind, int peer, unsigned long long call,
                                                unsigned long long t0, unsigned long long t1,
                                                unsigned long long m0, unsigned long long m1) {
  volatile long long* s = (volatile long long*)status;
  s[ST_MM_KIND] = kind; s[ST_MM_PEER] = peer; s[ST_MM_CALL] = (long long)call;
  s[ST_MM_THEIRS] = (long long)t0; s[ST_MM_THEIRS + 1] = (long long)t1;
  s[ST_MM_MINE] = (long long)m0; s[ST_MM_MINE + 1] = (long long)m1;
  __threadfence_system();
  s[ST_MM_COUNT] = s[ST_MM_COUNT] + 1;
}

// Whether the communicator was aborted (1 + the aborting rank in *abort), read once per block:
// a kernel that writes user output returns at once if so (released waits let queued work run
// on, and it must not write stale data); block 0 reports the abort, as `kind`.
__device__ __forceinline__ bool aborted(const unsigned long long* abort, long long* status, int kind) {
  __shared__ int stop;
  if (threadIdx.x == 0) {
    const unsigned long long by = *(const volatile unsigned long long*)abort;
    stop = by != 0;
    if (by && blockIdx.x == 0) report(status, ST_ABORTED, kind, (long long)by - 1, 0, 0);
  }
  __syncthreads();
  return stop;
}

#endif  // MPIRING_STATUS_CUH
