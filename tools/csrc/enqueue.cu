// Kernels of `python -m tools.enqueue` (the host's cost of an eager call), compiled by
// CuPy at run time and in CI by tests/test_cuda_sources.py.

// Holds a stream until the host opens it: one thread spins on a word of pinned host memory,
// bounded by limit_ns (a round whose launches fill the queue before the gate opens waits that
// long, and its time is void).
extern "C" __global__ void gate(volatile const int* open, unsigned long long limit_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (*open == 0 && now - start < limit_ns);
}

// Does nothing: one launch of it is the driver's floor under every eager call.
extern "C" __global__ void empty(long long unused) {}
