// Generated from templates/simd_prelude.h.j2 for ISA 'scalar' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#include "qsdpa_types.h"

namespace qsdpa {
namespace scalar {
namespace {

using vf = float;   // 1 x f32
using vi = int32_t;   // int32 dot-product accumulator
using vd = int32_t;   // one prepared int8 dot-product operand
constexpr int NF = 1;        // f32 lanes
constexpr int KB = 1;       // int8 elements of k per dot step
constexpr int A_BIAS = 0;  // dot(A, B) sees A + A_BIAS; the kernel subtracts A_BIAS * sum(B)

inline vf vzero() { return 0.0f; }
inline vf vset1(float x) { return x; }
inline vf vload(const float* p) { return *p; }
inline void vstore(float* p, vf x) { *p = x; }
inline vf vload_n(const float* p, int n) { return n > 0 ? *p : 0.0f; }
inline void vstore_n(float* p, vf x, int n) { if (n > 0) *p = x; }
inline vf vadd(vf a, vf b) { return a + b; }
inline vf vsub(vf a, vf b) { return a - b; }
inline vf vmul(vf a, vf b) { return a * b; }
inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
inline vf vcvt_s8(const int8_t* p) { return static_cast<float>(*p); }
inline vf vcvt_s8_n(const int8_t* p, int n) { return n > 0 ? static_cast<float>(*p) : 0.0f; }
inline float vhsum(vf x) { return x; }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline float vhmax(vf x) { return x; }
inline vf vround(vf x) { return std::nearbyint(x); }
inline vf vpow2i(vf n) {  // 2^n for integral n in [-126, 127]
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
inline vf vzero_where_less(vf x, vf lo, vf y) { return x < lo ? 0.0f : y; }
inline vf vscale2n(vf p, vf n) { return vmul(p, vpow2i(n)); }  // p * 2^n, n integral in [-126, 127]
// The scores of NF keys of one query row, the same operations as the scalar epilogue in
// flash_attention: float(d) * (coef * ksc) with d = dots - kzp * qs in wrapping int32 arithmetic.
inline vf vscores(const int32_t* dots, const int32_t* kzp, int32_t qs, const float* ksc, vf coef) {
  const uint32_t d = static_cast<uint32_t>(*dots) - static_cast<uint32_t>(*kzp) * static_cast<uint32_t>(qs);
  return static_cast<float>(static_cast<int32_t>(d)) * (coef * *ksc);
}

inline vi dzero() { return 0; }
inline vd dload_a(const int8_t* p) { return *p; }
inline vd dload_b(const int8_t* p) { return *p; }
inline vd dload_a_n(const int8_t* p, int n) { return n > 0 ? *p : 0; }
inline vd dload_b_n(const int8_t* p, int n) { return n > 0 ? *p : 0; }
inline vi ddot(vi acc, vd a, vd b) { return acc + a * b; }
inline int32_t dhsum(vi x) { return x; }

// Attention Q.K^T (s16 scheme): query rows pre-shifted by their zero point into int16, K widened.
constexpr int QKB = 1;  // K elements per qdot16 step
using vk = int32_t;
inline vk kload16(const int8_t* p) { return *p; }
inline vk kload16_n(const int8_t* p, int n) { return n > 0 ? *p : 0; }
inline vi qdot16(vi acc, vk k, const int16_t* q) { return acc + k * *q; }
inline vi qdot16_first(vk k, const int16_t* q) { return k * *q; }  // a fresh accumulator's first step
inline void dreduce8(const vi* a, int32_t* out) { for (int i = 0; i < 8; ++i) out[i] = a[i]; }
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
}  // namespace scalar
}  // namespace qsdpa
