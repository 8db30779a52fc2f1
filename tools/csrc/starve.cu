// Kernels of `python -m tools.starve` (a fold beside a GEMM, on one GPU). Compiled at
// run time with NVRTC and loaded with cuLibraryLoadData (context-independent: the same kernel
// runs on a stream of the primary context or of a green context); compiled in CI by
// tests/test_cuda_sources.py, so a typo fails there and not on the GPU machine.

// One ring step's fold, out = a + b over float4s, launched once per chunk as mpiring's ring
// does: grid-stride, so any grid covers any size.
extern "C" __global__ void fold(float4* out, const float4* a, const float4* b, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
       i += (long long)gridDim.x * blockDim.x) {
    float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

// The persistent alternative: ONE launch per call folds `chunks` chunks of `n4` float4s each,
// chunk k once flags[k] >= generation. A copy stream writes flags[k] (cuStreamWriteValue64, with
// the driver's default memory barrier) after the copy of b's chunk k, as a peer's copy engine
// would. Beside a GEMM, a fold launched per chunk may wait for SMs at every launch; this one
// waits once, then holds its blocks for the whole call.
//
// No deadlock whether or not every block is resident: blocks never wait for each other, only
// for the copy stream, which needs no SM. Bounded: a flag that does not come within limit_ns
// sets *failed and every block returns (the host checks *failed and the output).
extern "C" __global__ void fold_chunks(float4* out, const float4* a, const float4* b, long long n4,
                                       int chunks, const volatile unsigned long long* flags,
                                       unsigned long long generation,
                                       unsigned long long limit_ns, volatile int* failed) {
  for (int k = 0; k < chunks; ++k) {
    if (threadIdx.x == 0) {
      unsigned long long start, now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
      while (flags[k] < generation && *failed == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > limit_ns) *failed = 1;
      }
      // Acquire: the chunk's data (written before the flag) is read only after the flag was
      // seen; __syncthreads below extends this thread's order to the block.
      __threadfence();
    }
    __syncthreads();
    if (*failed != 0) return;
    const float4* ak = a + k * n4;
    const float4* bk = b + k * n4;
    float4* outk = out + k * n4;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
      // __ldcg: through L2 only, never a line this SM's L1 held from before the copy.
      float4 x = __ldcg(ak + i), y = __ldcg(bk + i);
      outk[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
  }
}
