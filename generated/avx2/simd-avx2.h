// Generated from templates/simd_prelude.h.j2 for ISA 'avx2' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
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
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf vcvt_s8(const int8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(p)))); }
// The scores of NF keys of one query row, the same operations as the scalar epilogue in
// flash_attention: float(d) * (coef * ksc) with d = dots - kzp * qs in wrapping int32 arithmetic.
inline vf vscores(const int32_t* dots, const int32_t* kzp, int32_t qs, const float* ksc, vf coef) {
  const vi d = _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const vi*>(dots)),
                                 _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const vi*>(kzp)),
                                                     _mm256_set1_epi32(qs)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(coef, _mm256_loadu_ps(ksc)));
}
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
inline float vhmax(vf x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline vf vround(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vpow2i(vf n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vf vzero_where_less(vf x, vf lo, vf y) { return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y); }
inline vf vscale2n(vf p, vf n) { return vmul(p, vpow2i(n)); }  // p * 2^n, n integral in [-126, 127]
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
// Attention Q.K^T (s16 scheme): query rows pre-shifted by their zero point into int16 (|q - zq| <=
// 255), K widened to int16; every product pair fits int32 exactly.
constexpr int QKB = 16;
using vk = __m256i;
inline vk kload16(const int8_t* p) { return dload_a(p); }
inline vk kload16_n(const int8_t* p, int n) { return dload_a_n(p, n); }
inline vi qdot16(vi acc, vk k, const int16_t* q) {
#if defined(QSDPA_X86_VIA_SIMDE)
  return _mm256_add_epi32(acc, _mm256_madd_epi16(k, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))));
#else
  // Accumulate in place: with intrinsics GCC keeps the products in fresh registers and copies
  // every accumulator back each step (8 extra vmovdqa per 4x2 tile step).
  __m256i t;
  __asm__("vpmaddwd %[q], %[k], %[t]\n\tvpaddd %[t], %[acc], %[acc]"
          : [t] "=&x"(t), [acc] "+x"(acc)
          : [k] "x"(k), [q] "m"(*reinterpret_cast<const __m256i*>(q)));
  return acc;
#endif
}
// A fresh accumulator's first step: the product itself, no zeroed register to add it to. In asm
// for the same reason as qdot16: with the intrinsic GCC copies each query vector to the stack first.
inline vi qdot16_first(vk k, const int16_t* q) {
#if defined(QSDPA_X86_VIA_SIMDE)
  return _mm256_madd_epi16(k, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
#else
  __m256i t;
  __asm__("vpmaddwd %[q], %[k], %[t]" : [t] "=x"(t) : [k] "x"(k), [q] "m"(*reinterpret_cast<const __m256i*>(q)));
  return t;
#endif
}
// Eight accumulators -> their eight sums (out[i] = sum of a[i]) with one hadd tree.
inline void dreduce8(const vi* a, int32_t* out) {
  const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
  const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
}
// 8 x 8 transposes for flash_attention's per-block qparam gather: 8 keys (rows, ld_in apart) x 8
// adjacent KV heads of a [B, S, H] qparam array -> 8 head rows of 8 keys (ldo apart). The values are
// moved, not computed, so the result is the scalar gather's. AVX2 instructions: the AVX-512
// variants are built with -mavx2 as well.
inline void transpose8_store(const __m256 (&r)[8], float* out, size_t ldo) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // u0-u3: columns c (low half) and c + 4 (high half) of rows 0-3, c = 0..3; u4-u7: of rows 4-7.
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * ldo, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * ldo, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * ldo, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * ldo, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * ldo, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * ldo, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * ldo, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * ldo, _mm256_permute2f128_ps(u3, u7, 0x31));
}
inline void transpose8_f32(const float* in, size_t ld_in, float* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ld_in);
  transpose8_store(r, out, ldo);
}
// int8 -> int32 (kept as their bits through the float shuffles).
inline void transpose8_s8_i32(const int8_t* in, size_t ld_in, int32_t* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i * ld_in))));
  transpose8_store(r, reinterpret_cast<float*>(out), ldo);
}
inline void transpose8_s8_f32(const int8_t* in, size_t ld_in, float* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i * ld_in))));
  transpose8_store(r, out, ldo);
}
// Sixteen accumulators -> their sixteen sums: two eight-wide reductions (AVX-512 has a tree of its own).
inline void dreduce16(const vi* a, int32_t* out) {
  dreduce8(a, out);
  dreduce8(a + 8, out + 8);
}
// Q.K^T runs the s16 scheme here: int16 query rows (q - zq), no key sums.
constexpr bool kQkU8 = false;
using qelem = int16_t;
inline vi ksum_step(vi acc, vk) { return acc; }
inline void qk_u8_finish_4x4(const vi*, const vi*, const int32_t*, int32_t*, size_t) {}  // u8 scheme only

// exp(x) for x <= 88, in every variant with the same algorithm: x = n*ln2 + r with |r| <= ln2/2
// (ln2 split in two so n*ln2 is exact), e^r by Cephes' degree-6 polynomial, times 2^n (vscale2n).
// x < -87.3365 (including -inf) gives exactly 0. Max relative error: see
// tests/test_attention.py::test_vexp_accuracy (measured, under 2 ulp).
inline vf vexp(vf x) {
  const vf lo = vset1(-87.33654475f);
  const vf xc = vmin(vmax(x, lo), vset1(88.0f));
  const vf n = vround(vmul(xc, vset1(1.44269504088896341f)));
  vf r = vfma(n, vset1(-0.693359375f), xc);
  r = vfma(n, vset1(2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
  return vzero_where_less(x, lo, vscale2n(p, n));
}

// Software prefetch of one row into L2 (every 64-byte line of it): the K/V rows of one head are
// strided in the cache ([B, S, H, D]: H*D bytes apart), which the hardware prefetchers follow badly.
inline void prefetch_row(const int8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// Row sums of int8 rows, exact in int32 for k <= kMaxDotK.
inline int32_t row_sum_s8(const int8_t* p, size_t k) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) s += p[i];
  return s;
}

}  // namespace
}  // namespace avx2
}  // namespace qsdpa
