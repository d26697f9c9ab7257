// Generated from templates/simd_prelude.h.j2 for ISA 'avx2' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#if defined(QSDPA_X86_VIA_SIMDE)
// Test builds only (tests/emulated/): this same source run on a CPU without the ISA, through
// SIMDe's portable implementations of the intrinsics. Never used by the package build.
#include "simde_x86_shim.h"
#else
#include <immintrin.h>
#endif
#include "qsdpa_types.h"

namespace qsdpa {
namespace avx2 {
namespace {

using vf = __m256;   // 8 x f32
using vi = __m256i;   // int32 dot-product accumulator
using vd = __m256i;   // one prepared int8 dot-product operand
constexpr int NF = 8;        // f32 lanes
constexpr int KB = 16;       // int8 elements of k per dot step
constexpr int A_BIAS = 0;  // dot(A, B) sees A + A_BIAS; the kernel subtracts A_BIAS * sum(B)

inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm256_storeu_ps(p, x); }
inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vcvt_s8(const int8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(p)))); }
// AVX2 has no byte-masked loads: tails go through a zeroed stack copy (never read past p + n).
inline vf vload_n(const float* p, int n) {
  alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(t, p, sizeof(float) * static_cast<size_t>(n));
  return _mm256_load_ps(t);
}
inline void vstore_n(float* p, vf x, int n) {
  alignas(32) float t[8];
  _mm256_store_ps(t, x);
  std::memcpy(p, t, sizeof(float) * static_cast<size_t>(n));
}
inline vf vcvt_s8_n(const int8_t* p, int n) {
  int64_t t = 0;
  std::memcpy(&t, p, static_cast<size_t>(n));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(t)));
}
inline float vhsum(vf x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vi dzero() { return _mm256_setzero_si256(); }
inline int32_t dhsum(vi x) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
// Widen 16 int8 to int16 and vpmaddwd: exact for the whole int8 range, where vpmaddubsw saturates.
inline vd dload_a(const int8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p))); }
inline vd dload_b(const int8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p))); }
inline vd dload_a_n(const int8_t* p, int n) {
  alignas(16) int8_t t[16] = {0};
  std::memcpy(t, p, static_cast<size_t>(n));
  return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}
inline vd dload_b_n(const int8_t* p, int n) { return dload_a_n(p, n); }
inline vi ddot(vi acc, vd a, vd b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

// Row sums of int8 rows, exact in int32 for k <= kMaxDotK.
inline int32_t row_sum_s8(const int8_t* p, size_t k) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) s += p[i];
  return s;
}

}  // namespace
}  // namespace avx2
}  // namespace qsdpa
