// Kernel of `python -m tools.barrier_cost`: what one cross-GPU barrier of the direct kernels
// (mpiring/cuda/csrc/direct.cu) costs, and which part of it is the fence. Every GPU of one
// process runs `barriers` at once; block b of GPU `me` meets block b of every other GPU `iters`
// times, each time after pushing `data_bytes` to every peer (its share: a grid-stride of 16-byte
// stores), and block 0 stamps the GPU clock after `warm` meetings and at the end.
//
// Modes (how a block signals and waits; flags[t][src * blocks + b] on GPU t):
//   0 release   threads t < n: st.release.sys into peer t's flag, spin ld.acquire.sys on mine
//               (what direct.cu does);
//   1 relaxed   st.relaxed.sys / ld.relaxed.sys, no fence at all: the floor (not a barrier data
//               can rely on);
//   2 fence1    thread 0 alone: fence.acq_rel.sys, then bar.sync, then t < n store relaxed and
//               spin relaxed, then fence.acq_rel.sys;
//   3 spin      as 0, but spin with ld.relaxed.sys and fence.acq_rel.sys once after the spin.
typedef unsigned long long u64;

__device__ __forceinline__ void st_rel(u64* p, u64 v) { asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_rlx(u64* p, u64 v) { asm volatile("st.relaxed.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ u64 ld_acq(const u64* p) { u64 v; asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ u64 ld_rlx(const u64* p) { u64 v; asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ u64 now_ns() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

extern "C" __global__ void barriers(const u64* flag_tables, const u64* data_areas, int me, int n, int iters,
                                    int warm, int mode, long long data_bytes, u64 base, u64* stamps) {
  const int t = threadIdx.x, b = blockIdx.x, blocks = gridDim.x;
  u64* const mine = (u64*)flag_tables[me];
  const long long words = data_bytes / 16;
  const long long tid = (long long)b * blockDim.x + t, stride = (long long)blocks * blockDim.x;
  for (int i = 0; i < iters; ++i) {
    if (b == 0 && t == 0 && i == warm) stamps[0] = now_ns();
    for (int r = 0; r < n; ++r) {               // this block's share of my data into every peer
      if (r == me) continue;
      uint4* dst = (uint4*)data_areas[r] + me * words;
      for (long long w = tid; w < words; w += stride) dst[w] = make_uint4(i, w, me, r);
    }
    const u64 seq = base + i + 1;
    __syncthreads();
    if (mode == 2) {
      if (t == 0) fence_sys();
      __syncthreads();
    }
    if (t < n) {
      u64* theirs = (u64*)flag_tables[t] + (size_t)me * blocks + b;
      const u64* wait = mine + (size_t)t * blocks + b;
      if (mode == 0) { st_rel(theirs, seq); while (ld_acq(wait) < seq) {} }
      else if (mode == 1) { st_rlx(theirs, seq); while (ld_rlx(wait) < seq) {} }
      else if (mode == 2) { st_rlx(theirs, seq); while (ld_rlx(wait) < seq) {} fence_sys(); }
      else { st_rel(theirs, seq); while (ld_rlx(wait) < seq) {} fence_sys(); }
    }
    __syncthreads();
  }
  if (b == 0 && t == 0) stamps[1] = now_ns();
}
