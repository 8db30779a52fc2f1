// The notice: what a rank launches instead of its call when that call cannot run on the GPU
// this time (it rejected its own arguments, or its row checks on the host, which found the
// ranks disagree) while a peer's GPU-checked kernel waits for its descriptor. Launcher:
// mpiring/cuda/direct_kernels.py (DirectKernels.notice); descriptor: mpiring/core/descriptor.py.
//
// It takes part in the GPU call like any GPU-checked kernel (agree.cuh): it posts its
// descriptor (a notice never equals a call's, so every peer skips the call), waits for every
// peer's, and clears the oneshot-ll lines pushed to it. It reports
// nothing: its rank raised its own error on the host already. One block.
#include "status.cuh"
#include "contract.cuh"  // u64, MAXR, LL_THREADS, struct Ctl
#include "agree.cuh"

__global__ void __launch_bounds__(LL_THREADS) notice(const Ctl* __restrict__ c, u64 d0, u64 d1) {
  const GpuCall g = gpu_call(c);
  post_descriptor(c, g, d0, d1);
  agree(c, g, d0, d1, ST_KIND_NOTICE, false);
}
