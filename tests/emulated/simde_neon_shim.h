// Test-only: lets the generated NEON / NEON dotprod sources compile and run on an x86_64 CPU,
// through SIMDe's NEON implementation (SIMD Everywhere). Included by the generated prelude when
// QSDPA_NEON_VIA_SIMDE is defined (tests/emulated/build.py); never part of the package build.
//
// This is a functional test of the generated NEON source's logic (tails through stack copies, the
// smull/sadalp and sdot dot schemes, the int16 Q.K^T scheme, the reductions, vexp) on portable
// implementations of the intrinsics. It does not test the native instructions, their encoding or
// the compiler's aarch64 code generation; those run under qemu-aarch64 in .ci/run.
//
// SIMDe 0.7.4 provides every intrinsic the prelude uses (vdotq_s32 included, neon/dot.h), but a
// few of its portable versions do not compute what the A64 instruction computes: vaddvq_f32 (adds
// in another order), vmaxq_f32 / vminq_f32 / vmaxvq_f32 (signed zeros, NaNs), vfmaq_f32 (not fused
// on a host without FMA) and vaddvq_s32 (int32 overflow, undefined behaviour, on a wrap). They are
// replaced below by inline functions in namespace qsdpa_simde_neon, bound to the ARM names by
// macros (the way SIMDe aliases its own). The ARM semantics are those of Linux's default FPCR:
// round to nearest even, no flush-to-zero, DN = 0 (a NaN result is the first signalling, else the
// first quiet NaN operand, quietened). shim_neon_selftest.cpp checks every intrinsic the prelude
// uses, these and SIMDe's, against scalar definitions of the A64 instructions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/arm/neon.h>

#if defined(SIMDE_ARM_NEON_A32V7_NATIVE)
#error "simde_neon_shim.h is for emulation on non-ARM hosts; on aarch64 include <arm_neon.h>"
#endif

#include "simde_lanes.h"  // qsdpa_simde::to_lanes / from_lanes / float_bits / bits_float

namespace qsdpa_simde_neon {

using qsdpa_simde::bits_float;
using qsdpa_simde::float_bits;
using qsdpa_simde::from_lanes;
using qsdpa_simde::to_lanes;

// FMAX / FMIN, one lane (A64 FPMax/FPMin with FPCR.DN = 0): a NaN operand gives a NaN (SNaN first,
// then QNaN, op1 before op2, quietened), and +0 is larger than -0. SIMDe's portable vmaxq_f32 /
// vminq_f32 return the second operand on a +-0 tie (x86 maxps/minps order), vminq_f32 returns a
// canonical NaN instead of the NaN operand, and vmaxvq_f32 skips NaN lanes.
inline bool nan_operand(uint32_t ua, uint32_t ub, float* r) {  // FPProcessNaNs
  auto is_nan = [](uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; };
  auto is_snan = [&](uint32_t u) { return is_nan(u) && !(u & 0x00400000u); };
  const uint32_t* pick = is_snan(ua) ? &ua : is_snan(ub) ? &ub : is_nan(ua) ? &ua : is_nan(ub) ? &ub : nullptr;
  if (pick) *r = bits_float(*pick | 0x00400000u);
  return pick != nullptr;
}
inline float fmax_lane(float a, float b) {
  const uint32_t ua = float_bits(a), ub = float_bits(b);
  float r;
  if (nan_operand(ua, ub, &r)) return r;
  if (a == b) return bits_float(ua & ub);  // equal: only +-0 differ in bits; +0 wins (sign bits and-ed)
  return a > b ? a : b;
}
inline float fmin_lane(float a, float b) {
  const uint32_t ua = float_bits(a), ub = float_bits(b);
  float r;
  if (nan_operand(ua, ub, &r)) return r;
  if (a == b) return bits_float(ua | ub);  // -0 wins
  return a < b ? a : b;
}

template <float (*Op)(float, float)>
inline simde_float32x4_t lanewise(simde_float32x4_t a, simde_float32x4_t b) {
  float x[4], y[4], r[4];
  to_lanes(x, a);
  to_lanes(y, b);
  for (int i = 0; i < 4; ++i) r[i] = Op(x[i], y[i]);
  return from_lanes<simde_float32x4_t>(r);
}
inline simde_float32x4_t vmaxq_f32_a64(simde_float32x4_t a, simde_float32x4_t b) { return lanewise<fmax_lane>(a, b); }
inline simde_float32x4_t vminq_f32_a64(simde_float32x4_t a, simde_float32x4_t b) { return lanewise<fmin_lane>(a, b); }

// FMAXV Sd, Vn.4S: the A64 pseudocode's Reduce() halves the vector recursively, so it is
// max(max(x0, x1), max(x2, x3)) with FMAX's NaN and signed-zero rules.
inline simde_float32_t vmaxvq_f32_a64(simde_float32x4_t a) {
  float x[4];
  to_lanes(x, a);
  return fmax_lane(fmax_lane(x[0], x[1]), fmax_lane(x[2], x[3]));
}

// vaddvq_f32 is pairwise adds (GCC for aarch64 emits FADDP V.4S twice): (x0 + x1) + (x2 + x3).
// SIMDe 0.7.4 adds the lanes in sequence from 0, ((0 + x0) + x1 + x2) + x3, which rounds
// differently (and turns an all -0 vector into +0).
inline simde_float32_t vaddvq_f32_a64(simde_float32x4_t a) {
  float x[4];
  to_lanes(x, a);
  return (x[0] + x[1]) + (x[2] + x[3]);
}

// FMLA is fused (one rounding). SIMDe fuses only when the host has FMA (SIMDE_X86_FMA_NATIVE,
// build.py passes -mfma when /proc/cpuinfo shows it); otherwise it multiplies and adds, so the
// shim then fuses with std::fma.
#if !defined(SIMDE_X86_FMA_NATIVE)
inline simde_float32x4_t vfmaq_f32_a64(simde_float32x4_t acc, simde_float32x4_t a, simde_float32x4_t b) {
  float c[4], x[4], y[4], r[4];
  to_lanes(c, acc);
  to_lanes(x, a);
  to_lanes(y, b);
  for (int i = 0; i < 4; ++i) r[i] = std::fma(x[i], y[i], c[i]);
  return from_lanes<simde_float32x4_t>(r);
}
#endif

// ADDV Sd, Vn.4S: integer sum, wrapping modulo 2^32 (SIMDe sums in int32, where a wrap would be
// undefined behaviour; computed in uint32 so that -fsanitize=undefined builds stay quiet).
inline int32_t vaddvq_s32_a64(simde_int32x4_t a) {
  uint32_t x[4];
  to_lanes(x, a);
  return static_cast<int32_t>(x[0] + x[1] + x[2] + x[3]);
}

}  // namespace qsdpa_simde_neon

// ARM names. #undef first: SIMDe's native aliases are macros too.
#undef vmaxq_f32
#define vmaxq_f32(a, b) qsdpa_simde_neon::vmaxq_f32_a64((a), (b))
#undef vminq_f32
#define vminq_f32(a, b) qsdpa_simde_neon::vminq_f32_a64((a), (b))
#undef vmaxvq_f32
#define vmaxvq_f32(a) qsdpa_simde_neon::vmaxvq_f32_a64(a)
#undef vaddvq_f32
#define vaddvq_f32(a) qsdpa_simde_neon::vaddvq_f32_a64(a)
#undef vaddvq_s32
#define vaddvq_s32(a) qsdpa_simde_neon::vaddvq_s32_a64(a)
#if !defined(SIMDE_X86_FMA_NATIVE)
#undef vfmaq_f32
#define vfmaq_f32(acc, a, b) qsdpa_simde_neon::vfmaq_f32_a64((acc), (a), (b))
#endif
