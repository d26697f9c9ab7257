// Generated from templates/simd_prelude.h.j2 for ISA 'neon' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <arm_neon.h>
#include "qsdpa_types.h"

namespace qsdpa {
namespace neon {
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
// int8 x int8 products fit int16 exactly (|p| <= 2^14); pairwise-accumulate them into int32.
inline vi ddot(vi acc, vd a, vd b) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}

// Row sums of int8 rows, exact in int32 for k <= kMaxDotK.
inline int32_t row_sum_s8(const int8_t* p, size_t k) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) s += p[i];
  return s;
}

}  // namespace
}  // namespace neon
}  // namespace qsdpa
