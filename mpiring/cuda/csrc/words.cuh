// Moving a range of elements as whole words, shared by direct.cu (16-byte words: uint4) and
// oneshot_ll.cu (8-byte line payloads: u64). Word w of a range of len elements at p holds
// elements [w*V, w*V + V), V = sizeof(W) / sizeof(S). "vec": p allows W-sized accesses (then a
// whole word is one access); a partial word, or an unaligned p, moves element by element (zeros
// past the end). "peer": the data was written by another GPU, so it is read with L2-only loads
// (ld.global.cg): no stale L1 line is ever used.
#ifndef MPIRING_WORDS_CUH
#define MPIRING_WORDS_CUH

#include "contract.cuh"  // u64

__device__ __forceinline__ uint4 ldcg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <class S> __device__ __forceinline__ S ldcg(const S* p) {
  if constexpr (sizeof(S) == 2) { unsigned short v; asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
  else if constexpr (sizeof(S) == 4) { unsigned v; asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
  else { u64 v; asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p)); return *reinterpret_cast<S*>(&v); }
}

template <class W, class S>
__device__ __forceinline__ W load_word(const S* p, long long w, long long len, bool vec, bool peer = false) {
  const int V = sizeof(W) / sizeof(S);
  const long long i0 = w * V;
  if (vec && i0 + V <= len) return peer ? ldcg((const W*)p + w) : ((const W*)p)[w];
  W u{};
  S* e = reinterpret_cast<S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) e[k] = peer ? ldcg(p + i0 + k) : p[i0 + k];
  return u;
}
template <class W, class S>
__device__ __forceinline__ void store_word(S* p, long long w, long long len, bool vec, W u) {
  const int V = sizeof(W) / sizeof(S);
  const long long i0 = w * V;
  if (vec && i0 + V <= len) { ((W*)p)[w] = u; return; }
  const S* e = reinterpret_cast<const S*>(&u);
  for (int k = 0; k < V && i0 + k < len; ++k) p[i0 + k] = e[k];
}

#endif  // MPIRING_WORDS_CUH
