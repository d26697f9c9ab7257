// Generated from templates/simd_prelude.h.j2 for ISA 'scalar' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
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

inline vi dzero() { return 0; }
inline vd dload_a(const int8_t* p) { return *p; }
inline vd dload_b(const int8_t* p) { return *p; }
inline vd dload_a_n(const int8_t* p, int n) { return n > 0 ? *p : 0; }
inline vd dload_b_n(const int8_t* p, int n) { return n > 0 ? *p : 0; }
inline vi ddot(vi acc, vd a, vd b) { return acc + a * b; }
inline int32_t dhsum(vi x) { return x; }

// Row sums of int8 rows, exact in int32 for k <= kMaxDotK.
inline int32_t row_sum_s8(const int8_t* p, size_t k) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) s += p[i];
  return s;
}

}  // namespace
}  // namespace scalar
}  // namespace qsdpa
