// Generated from templates/simd_prelude.h.j2 for ISA 'neon_dotprod' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#if defined(QSDPA_NEON_VIA_SIMDE)
// Test builds only (tests/emulated/): this same source run on an x86_64 CPU, through SIMDe's
// portable implementations of the NEON intrinsics. Never used by the package build.
#include "simde_neon_shim.h"
#else
#include <arm_neon.h>
#endif
#include "qsdpa_types.h"

namespace qsdpa {
namespace neon_dotprod {
namespace {

using vf = float32x4_t;   // 4 x f32
using vi = int32x4_t;   // int32 dot-product accumulator
using vd = int8x16_t;   // one prepared int8 dot-product operand
constexpr int NF = 4;        // f32 lanes
constexpr int KB = 16;       // int8 elements of k per dot step
constexpr int A_BIAS = 0;  // dot(A, B) sees A + A_BIAS; the kernel subtracts A_BIAS * sum(B)

inline vf vzero() { return vdupq_n_f32(0.0f); }
inline vf vset1(float x) { return vdupq_n_f32(x); }
inline vf vload(const float* p) { return vld1q_f32(p); }
inline void vstore(float* p, vf x) { vst1q_f32(p, x); }
// No masked loads on NEON: tails go through a zeroed stack copy (never read past p + n).
inline vf vload_n(const float* p, int n) {
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::memcpy(t, p, sizeof(float) * static_cast<size_t>(n));
  return vld1q_f32(t);
}
inline void vstore_n(float* p, vf x, int n) {
  float t[4];
  vst1q_f32(t, x);
  std::memcpy(p, t, sizeof(float) * static_cast<size_t>(n));
}
inline vf vadd(vf a, vf b) { return vaddq_f32(a, b); }
inline vf vsub(vf a, vf b) { return vsubq_f32(a, b); }
inline vf vmul(vf a, vf b) { return vmulq_f32(a, b); }
inline vf vfma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
inline vf vcvt_s8_n(const int8_t* p, int n) {
  int32_t t = 0;
  std::memcpy(&t, p, static_cast<size_t>(n));
  int16x8_t w = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(t)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
}
inline vf vcvt_s8(const int8_t* p) { return vcvt_s8_n(p, 4); }
inline float vhsum(vf x) { return vaddvq_f32(x); }
inline vf vmax(vf a, vf b) { return vmaxq_f32(a, b); }
inline vf vmin(vf a, vf b) { return vminq_f32(a, b); }
inline float vhmax(vf x) { return vmaxvq_f32(x); }
// The scores of NF keys of one query row, the same operations as the scalar epilogue in
// flash_attention: float(d) * (coef * ksc) with d = dots - kzp * qs in wrapping int32 arithmetic.
inline vf vscores(const int32_t* dots, const int32_t* kzp, int32_t qs, const float* ksc, vf coef) {
  const int32x4_t d = vmlsq_s32(vld1q_s32(dots), vld1q_s32(kzp), vdupq_n_s32(qs));  // wraps, as vmul/vsub
  return vmulq_f32(vcvtq_f32_s32(d), vmulq_f32(coef, vld1q_f32(ksc)));
}
inline vf vround(vf x) { return vrndnq_f32(x); }
inline vf vpow2i(vf n) { return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23)); }
inline vf vzero_where_less(vf x, vf lo, vf y) { return vbslq_f32(vcltq_f32(x, lo), vdupq_n_f32(0.0f), y); }
inline vf vscale2n(vf p, vf n) { return vmul(p, vpow2i(n)); }  // p * 2^n, n integral in [-126, 127]
inline vi dzero() { return vdupq_n_s32(0); }
inline vd dload_a(const int8_t* p) { return vld1q_s8(p); }
inline vd dload_b(const int8_t* p) { return vld1q_s8(p); }
inline vd dload_a_n(const int8_t* p, int n) {
  int8_t t[16] = {0};
  std::memcpy(t, p, static_cast<size_t>(n));
  return vld1q_s8(t);
}
inline vd dload_b_n(const int8_t* p, int n) { return dload_a_n(p, n); }
inline int32_t dhsum(vi x) { return vaddvq_s32(x); }
inline vi ddot(vi acc, vd a, vd b) { return vdotq_s32(acc, a, b); }
// Attention Q.K^T (s16 scheme): query rows pre-shifted by their zero point into int16, K widened;
// int16 x int16 multiply-accumulate into int32 (exact: |q - zq| <= 255, |k| <= 128).
constexpr int QKB = 8;
using vk = int16x8_t;
inline vk kload16(const int8_t* p) { return vmovl_s8(vld1_s8(p)); }
inline vk kload16_n(const int8_t* p, int n) {
  int8_t t[8] = {0};
  std::memcpy(t, p, static_cast<size_t>(n));
  return vmovl_s8(vld1_s8(t));
}
inline vi qdot16(vi acc, vk k, const int16_t* q) {
  const int16x8_t qv = vld1q_s16(q);
  return vmlal_high_s16(vmlal_s16(acc, vget_low_s16(k), vget_low_s16(qv)), k, qv);
}
inline vi qdot16_first(vk k, const int16_t* q) {
  const int16x8_t qv = vld1q_s16(q);
  return vmlal_high_s16(vmull_s16(vget_low_s16(k), vget_low_s16(qv)), k, qv);
}
inline void dreduce8(const vi* a, int32_t* out) {
  vst1q_s32(out, vpaddq_s32(vpaddq_s32(a[0], a[1]), vpaddq_s32(a[2], a[3])));
  vst1q_s32(out + 4, vpaddq_s32(vpaddq_s32(a[4], a[5]), vpaddq_s32(a[6], a[7])));
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
}  // namespace neon_dotprod
}  // namespace qsdpa
