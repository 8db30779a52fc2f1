// The host/device contract of the direct kernels: the table of addresses that
// mpiring/cuda/direct_kernels.py (DirectKernels.__init__) writes once into the staging and that every
// oneshot/twoshot launch reads. Its numpy mirror is mpiring.cuda.contract.CONTROL; the
// static_asserts below pin every offset, and tests/test_cuda_contract.py checks each of them
// against the mirror, so a field added, moved or resized on one side only fails to compile
// or fails CI rather than reading garbage addresses on the GPU.
#ifndef MPIRING_CONTRACT_CUH
#define MPIRING_CONTRACT_CUH

typedef unsigned long long u64;

#define MAXR 8  // ranks of one node; mpiring.cuda.layout.MAX_RANKS
// Threads per block of oneshot/twoshot: their __launch_bounds__, and what the launcher uses.
#define DIRECT_THREADS 512
// Threads per block of oneshot-ll, and the 16-byte lines each thread moves.
#define LL_THREADS 512
#define LL_LINES 2

struct Ctl {                      // written once at set-up; see DirectKernels.__init__
  u64 flags[MAXR];                // rank r's flag table [src][block], as mapped here
  u64 oneshot[MAXR][2];           // rank r's two one-shot slots
  u64 twoshot_in[MAXR];           // rank r's two-shot input staging
  u64 twoshot_out[MAXR];          // rank r's two-shot output staging
  u64 aborts[MAXR];               // rank r's abort word
  u64 status;                     // this rank's host status block (see status.cuh)
  long long twoshot_bytes;        // bytes per two-shot staging half
  long long timeout_ns;           // how long a barrier may wait for a peer
  int rank, size, blocks, pad;
  u64 ll[MAXR][2];                // rank r's two oneshot-ll slots (a row per source rank each)
  u64 ll_headers[MAXR];           // rank r's header lines [slot][source rank][2] (agree.cuh)
  u64 ll_state;                   // this rank's GPU-checked calls begun and started blocks (agree.cuh)
  long long ll_row_bytes;         // bytes of one source rank's row in a oneshot-ll slot
};

static_assert(sizeof(Ctl) == 632, "Ctl size: update mpiring/cuda/contract.py CONTROL too");

// Every field's offset. NVRTC has no <cstddef>, and offsetof needs __builtin_offsetof, which
// NVRTC 13.5 has but 13.0 lacks: an NVRTC without it (at run time, under CuPy) skips these.
// CI's NVRTC has it (tests/test_cuda_sources.py plants a moved field and sees them fire), and
// tests/test_cuda_contract.py checks every number against the numpy mirror without a compiler.
#if defined(__has_builtin)
#if __has_builtin(__builtin_offsetof)
#define MPIRING_CHECK_OFFSETS 1
#endif
#endif
#ifdef MPIRING_CHECK_OFFSETS
#ifndef offsetof
#define offsetof(type, field) __builtin_offsetof(type, field)
#endif
static_assert(offsetof(Ctl, flags) == 0, "Ctl layout");
static_assert(offsetof(Ctl, oneshot) == 64, "Ctl layout");
static_assert(offsetof(Ctl, twoshot_in) == 192, "Ctl layout");
static_assert(offsetof(Ctl, twoshot_out) == 256, "Ctl layout");
static_assert(offsetof(Ctl, aborts) == 320, "Ctl layout");
static_assert(offsetof(Ctl, status) == 384, "Ctl layout");
static_assert(offsetof(Ctl, twoshot_bytes) == 392, "Ctl layout");
static_assert(offsetof(Ctl, timeout_ns) == 400, "Ctl layout");
static_assert(offsetof(Ctl, rank) == 408, "Ctl layout");
static_assert(offsetof(Ctl, size) == 412, "Ctl layout");
static_assert(offsetof(Ctl, blocks) == 416, "Ctl layout");
static_assert(offsetof(Ctl, pad) == 420, "Ctl layout");
static_assert(offsetof(Ctl, ll) == 424, "Ctl layout");
static_assert(offsetof(Ctl, ll_headers) == 552, "Ctl layout");
static_assert(offsetof(Ctl, ll_state) == 616, "Ctl layout");
static_assert(offsetof(Ctl, ll_row_bytes) == 624, "Ctl layout");
#endif  // MPIRING_CHECK_OFFSETS

#endif  // MPIRING_CONTRACT_CUH
