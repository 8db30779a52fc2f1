"""The reduction ("fold") kernel: ``out = in (op) slot``, elementwise, for every dtype and op.

Half-precision types are widened to float, combined, and rounded once to nearest-even, which
is exactly what numpy (and ml_dtypes for bfloat16) do, so GPU and host results agree bit for
bit. The source needs no CUDA headers: conversions are PTX ``cvt`` or bit arithmetic.
Loads and stores are 16 bytes wide when all three pointers allow it.

Both kernels here write user output, so both first read the communicator's abort word: once
a rank aborted the communicator, released waits let queued work run on, and it must not write
stale data into the caller's output (it reports the abort to the host instead).
"""

from __future__ import annotations

import functools

import numpy as np

from ..ops import Op
from .status import STATUS_SOURCE

# Element types (storage type S, arithmetic type A) and reduction ops, shared by every kernel.
TYPES_SOURCE = r"""
typedef unsigned short u16;

struct F32 { typedef float S; typedef float A;
  static __device__ __forceinline__ A ld(S x) { return x; }
  static __device__ __forceinline__ S st(A x) { return x; } };
struct F64 { typedef double S; typedef double A;
  static __device__ __forceinline__ A ld(S x) { return x; }
  static __device__ __forceinline__ S st(A x) { return x; } };
struct I32 { typedef int S; typedef int A;
  static __device__ __forceinline__ A ld(S x) { return x; }
  static __device__ __forceinline__ S st(A x) { return x; } };
struct I64 { typedef long long S; typedef long long A;
  static __device__ __forceinline__ A ld(S x) { return x; }
  static __device__ __forceinline__ S st(A x) { return x; } };
struct F16 { typedef u16 S; typedef float A;
  static __device__ __forceinline__ A ld(S x) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }
  static __device__ __forceinline__ S st(A x) { u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; } };
struct BF16 { typedef u16 S; typedef float A;
  static __device__ __forceinline__ A ld(S x) { return __uint_as_float(((unsigned)x) << 16); }
  static __device__ __forceinline__ S st(A x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
    return (u16)(u >> 16); } };

// max/min propagate NaN like numpy.maximum/minimum.
struct Sum  { template <class A> static __device__ __forceinline__ A f(A a, A b) { return a + b; } };
struct Prod { template <class A> static __device__ __forceinline__ A f(A a, A b) { return a * b; } };
struct Max  { template <class A> static __device__ __forceinline__ A f(A a, A b) { return (a > b || a != a) ? a : b; } };
struct Min  { template <class A> static __device__ __forceinline__ A f(A a, A b) { return (a < b || a != a) ? a : b; } };
"""

_FOLD_SOURCE = r"""
// Whether the communicator was aborted (1 + the aborting rank in *abort); block 0 reports it.
__device__ __forceinline__ bool aborted(const unsigned long long* abort, long long* status) {
  __shared__ int stop;
  if (threadIdx.x == 0) {
    const unsigned long long by = *(const volatile unsigned long long*)abort;
    stop = by != 0;
    if (by && blockIdx.x == 0) report(status, ST_ABORTED, 1, (long long)by - 1, 0, 0);
  }
  __syncthreads();
  return stop;
}

template <class T, class Op>
__global__ void fold(typename T::S* __restrict__ out, const typename T::S* __restrict__ in,
                     const typename T::S* __restrict__ slot, long long n, int vectorized,
                     const unsigned long long* abort, long long* status) {
  typedef typename T::S S;
  if (aborted(abort, status)) return;
  const int V = 16 / sizeof(S);
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long nvec = vectorized ? n / V : 0;
  for (long long i = tid; i < nvec; i += stride) {
    uint4 a = reinterpret_cast<const uint4*>(in)[i];
    uint4 b = reinterpret_cast<const uint4*>(slot)[i];
    uint4 c;
    const S* pa = reinterpret_cast<const S*>(&a);
    const S* pb = reinterpret_cast<const S*>(&b);
    S* pc = reinterpret_cast<S*>(&c);
#pragma unroll
    for (int k = 0; k < V; ++k) pc[k] = T::st(Op::f(T::ld(pa[k]), T::ld(pb[k])));
    reinterpret_cast<uint4*>(out)[i] = c;
  }
  for (long long i = nvec * V + tid; i < n; i += stride)
    out[i] = T::st(Op::f(T::ld(in[i]), T::ld(slot[i])));
}

// out[0:n] = src[0:n] in units of U (the widest the pointers and n allow).
template <class U>
__global__ void copy(U* __restrict__ out, const U* __restrict__ src, long long n,
                     const unsigned long long* abort, long long* status) {
  if (aborted(abort, status)) return;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < n; i += stride) out[i] = src[i];
}
"""

TYPES = {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64",
          "float16": "F16", "bfloat16": "BF16"}
OPS = {Op.SUM: "Sum", Op.PROD: "Prod", Op.MAX: "Max", Op.MIN: "Min"}
THREADS = 256


def _name(dtype: np.dtype, op: Op) -> str:
    return f"fold<{TYPES[np.dtype(dtype).name]}, {OPS[op]}>"


@functools.cache
def _module():
    import cupy

    names = [f"fold<{t}, {o}>" for t in TYPES.values() for o in OPS.values()]
    names += [f"copy<{unit}>" for unit in _COPY_UNITS.values()]
    return cupy.RawModule(code=TYPES_SOURCE + STATUS_SOURCE + _FOLD_SOURCE, options=("--std=c++14",),
                          name_expressions=names)


_COPY_UNITS = {16: "uint4", 8: "unsigned long long", 4: "unsigned int", 2: "unsigned short",
               1: "unsigned char"}


class FoldKernel:
    """A launcher of the fold and copy kernels for one device, sized once for that device.

    ``abort`` and ``status`` are device addresses of the communicator's abort word and of its
    host status block (see :mod:`mpiring.cuda.status`).
    """

    def __init__(self, device_id: int, abort: int, status: int, max_blocks: int | None = None) -> None:
        import cupy

        sms = cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]
        self.max_blocks = max_blocks or 4 * sms
        self._guard = (np.uint64(abort), np.uint64(status))
        self._functions: dict[tuple[str, Op], object] = {}
        self._copies: dict[int, object] = {}

    def function(self, dtype: np.dtype, op: Op):
        """The compiled kernel for ``dtype`` and ``op`` (compiled on first use, then cached)."""
        key = (np.dtype(dtype).name, op)
        fn = self._functions.get(key)
        if fn is None:
            fn = _module().get_function(_name(dtype, op))
            self._functions[key] = fn
        return fn

    def launch(self, fn, out: int, inp: int, slot: int, count: int, itemsize: int, stream) -> None:
        """Enqueue ``out[:count] = inp[:count] (op) slot[:count]`` on ``stream`` (raw pointers)."""
        if count == 0:
            return
        vectorized = (out | inp | slot) % 16 == 0
        per_thread = 16 // itemsize if vectorized else 1
        blocks = min(self.max_blocks, -(-count // (THREADS * per_thread)))
        fn((blocks,), (THREADS,), (out, inp, slot, np.int64(count), np.int32(vectorized), *self._guard),
           stream=stream)

    def copy(self, out: int, src: int, nbytes: int, stream) -> None:
        """Enqueue ``out[:nbytes] = src[:nbytes]`` on ``stream``, skipped once aborted."""
        if nbytes == 0:
            return
        unit = next(u for u in _COPY_UNITS if (out | src | nbytes) % u == 0)
        fn = self._copies.get(unit)
        if fn is None:
            fn = self._copies[unit] = _module().get_function(f"copy<{_COPY_UNITS[unit]}>")
        n = nbytes // unit
        blocks = min(self.max_blocks, -(-n // THREADS))
        fn((blocks,), (THREADS,), (out, src, np.int64(n), *self._guard), stream=stream)
