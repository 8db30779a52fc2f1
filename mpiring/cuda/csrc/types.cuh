// Element types and reduction operators, shared by every kernel (fold.cu, direct.cu).
//
// An element struct names its storage type S and its arithmetic type A, with ld (S -> A) and
// st (A -> S). Half-precision types are widened to float, combined, and rounded once to
// nearest-even, which is exactly what numpy (and ml_dtypes for bfloat16) do, so GPU and host
// results agree bit for bit, except that CuPy compiles with -ftz=true: float32 arithmetic
// flushes subnormals to zero (docs/reproducible.md). No CUDA headers: conversions are PTX cvt
// or bit arithmetic.
//
// Every row of mpiring.core.ops.DTYPES names its struct here (DType.cuda), every row of
// mpiring.core.ops.OPS its functor (OpInfo.cuda); tests/test_cuda_sources.py instantiates them all.
#ifndef MPIRING_TYPES_CUH
#define MPIRING_TYPES_CUH

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

// The elements of one word W (a 16-byte uint4 in direct.cu, a line's 8 payload bytes in
// oneshot_ll.cu), widened to T's arithmetic type: load, fold in more words with Op, store.
template <class T, class W> struct Pack {
  typedef typename T::S S; typedef typename T::A A;
  enum { V = sizeof(W) / sizeof(S) };
  A a[V];
  __device__ __forceinline__ void load(W u) { const S* p = (const S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = T::ld(p[k]); }
  template <class Op> __device__ __forceinline__ void fold(W u) { const S* p = (const S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) a[k] = Op::f(a[k], T::ld(p[k])); }
  __device__ __forceinline__ W store() const { W u; S* p = (S*)&u;
#pragma unroll
    for (int k = 0; k < V; ++k) p[k] = T::st(a[k]);
    return u; }
};

#endif  // MPIRING_TYPES_CUH
