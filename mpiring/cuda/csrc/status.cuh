// The host status block: eight 64-bit words of pinned host memory, mapped into the GPU, in
// which a kernel that gives up says why (see mpiring/cuda/status.py, which turns the words
// into the caller's exception). The numbers are mirrored in mpiring/cuda/contract.py;
// tests/test_cuda_contract.py checks that both sides agree.
#ifndef MPIRING_STATUS_CUH
#define MPIRING_STATUS_CUH

// Word indices.
#define ST_STATE 0
#define ST_KIND 1
#define ST_PEER 2
#define ST_SEQ 3
#define ST_BLOCK 4
#define ST_STEP 5
#define ST_THEIRS 6  // ST_MISMATCH: the peer's call descriptor
#define ST_MINE 7    // ST_MISMATCH: this rank's call descriptor
#define ST_WORDS 8
// ST_STATE values.
#define ST_HEALTHY 0
#define ST_TIMED_OUT 1
#define ST_ABORTED 2
#define ST_MISMATCH 3  // a peer's call descriptor differs from this rank's (oneshot-ll)
// ST_KIND values: the algorithm whose kernel reported.
#define ST_KIND_RING 1
#define ST_KIND_ONESHOT 2
#define ST_KIND_TWOSHOT 3
#define ST_KIND_ONESHOT_LL 4

// Record a failure in the host status block (first report wins: the fields are written
// before STATE, behind a system fence, so the host never reads a half-written report).
__device__ __forceinline__ void report(long long* status, int state, int kind, long long peer,
                                       unsigned long long seq, int step, long long theirs = 0,
                                       long long mine = 0) {
  volatile long long* s = (volatile long long*)status;
  if (s[ST_STATE] != 0) return;
  s[ST_KIND] = kind; s[ST_PEER] = peer; s[ST_SEQ] = (long long)seq;
  s[ST_BLOCK] = blockIdx.x; s[ST_STEP] = step; s[ST_THEIRS] = theirs; s[ST_MINE] = mine;
  __threadfence_system();
  s[ST_STATE] = state;
}

#endif  // MPIRING_STATUS_CUH
