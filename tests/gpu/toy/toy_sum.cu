// The toy GPU algorithm's kernel (tests/gpu/toy/toy_gpu_algorithm.py): out = the rows summed
// in rank order (row 0, then row 1 added, ...), float32. ``rows`` holds one device pointer per
// rank: each rank's copy of its input in its own staging, mapped here through CUDA IPC.
extern "C" __global__ void toy_sum(const float* const* rows, int nrows, long long n, float* out) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    float acc = rows[0][i];
    for (int r = 1; r < nrows; ++r) acc += rows[r][i];
    out[i] = acc;
  }
}
