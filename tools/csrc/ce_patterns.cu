// Kernel of `python -m tools.ce_patterns` (the floors of a copy-engine two-shot), compiled by
// CuPy at run time and in CI by tests/tools/test_tools_kernels.py.

// The two-shot's fold: out = s[0] + s[1] + ... + s[n-1], in this order (rank order), over
// float4s, grid-stride. `sources` is a device array of n pointers (the inbound areas and the
// rank's own input): each element is read once from every source and written once.
extern "C" __global__ void fold_ranked(float4* out, const float4* const* sources, int n, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
       i += (long long)gridDim.x * blockDim.x) {
    float4 acc = sources[0][i];
    for (int r = 1; r < n; ++r) {
      const float4 x = sources[r][i];
      acc = make_float4(acc.x + x.x, acc.y + x.y, acc.z + x.z, acc.w + x.w);
    }
    out[i] = acc;
  }
}
