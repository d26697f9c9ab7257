// Test-only: lets the generated AVX-512 / AVX-512 VNNI sources compile and run on a CPU without
// AVX-512, through SIMDe (SIMD Everywhere). Included by the generated prelude when
// QSDPA_X86_VIA_SIMDE is defined (tests/emulated/build.py); never part of the package build.
//
// This is a functional test of the generated source's logic (tails, masks, the VNNI +128 bias,
// the int16 madd scheme) on portable implementations of the intrinsics. It does not test the
// native instructions, their encoding or the compiler's AVX-512 code generation.
//
// SIMDe 0.7.4 (Debian libsimde-dev 0.7.4~rc2) lacks a few intrinsics the prelude uses and has a
// broken alias for one; they are supplied below, as inline functions in namespace qsdpa_simde plus
// a macro with the Intel name (the way SIMDe aliases its own). A missing intrinsic shows up at build
// time as GCC's "inlining failed in call to 'always_inline' '_mm512_...': target specific option
// mismatch" (GCC declares every AVX-512 intrinsic; SIMDe's macro is what redirects a name).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#if defined(SIMDE_X86_AVX512F_NATIVE)
#error "simde_x86_shim.h is for emulation on CPUs without AVX-512: build without -mavx512*"
#endif

#include "simde_lanes.h"  // qsdpa_simde::to_lanes / from_lanes

namespace qsdpa_simde {

// ---- Masked loads / stores -------------------------------------------------------------------
// Intel semantics: only lanes whose mask bit is set are accessed; the others are zeroed (maskz
// loads) or left untouched in memory (mask stores), and faults on them are suppressed. So these
// are written element by element and NEVER touch a disabled lane: with -fsanitize=address an
// out-of-bounds access in an enabled lane is reported, and a disabled lane costs nothing.
// An emulation may instead do a full-width load + blend, or a read-modify-write store, which
// touches memory past a tail; so the Intel names are always pointed at these (#undef first), even
// if a newer SIMDe provides them.

template <typename V, typename T, int N, typename M>
inline V maskz_load(M k, const void* p) {
  T lanes[N];
  const T* src = static_cast<const T*>(p);
  for (int i = 0; i < N; ++i) lanes[i] = ((k >> i) & 1) ? src[i] : T(0);
  return from_lanes<V>(lanes);
}

inline simde__m128i mm_maskz_loadu_epi8(simde__mmask16 k, const void* p) {
  return maskz_load<simde__m128i, int8_t, 16>(k, p);
}
inline simde__m256i mm256_maskz_loadu_epi8(simde__mmask32 k, const void* p) {
  return maskz_load<simde__m256i, int8_t, 32>(k, p);
}
inline simde__m512i mm512_maskz_loadu_epi8(simde__mmask64 k, const void* p) {
  return maskz_load<simde__m512i, int8_t, 64>(k, p);
}
inline simde__m512 mm512_maskz_loadu_ps(simde__mmask16 k, const void* p) {
  return maskz_load<simde__m512, float, 16>(k, p);
}

inline void mm512_mask_storeu_ps(void* p, simde__mmask16 k, simde__m512 a) {
  float lanes[16];
  to_lanes(lanes, a);
  float* dst = static_cast<float*>(p);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) dst[i] = lanes[i];
}

// ---- Missing conversions -----------------------------------------------------------------------
inline simde__m512i mm512_cvtepi8_epi32(simde__m128i a) {  // vpmovsxbd zmm, xmm
  int8_t in[16];
  int32_t out[16];
  to_lanes(in, a);
  for (int i = 0; i < 16; ++i) out[i] = in[i];
  return from_lanes<simde__m512i>(out);
}
inline simde__m512 mm512_cvtepi32_ps(simde__m512i a) {  // vcvtdq2ps: round to nearest even (MXCSR default)
  int32_t in[16];
  float out[16];
  to_lanes(in, a);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(in[i]);
  return from_lanes<simde__m512>(out);
}

inline simde__m512i mm512_cvtps_epi32(simde__m512 a) {  // vcvtps2dq: nearest even (MXCSR default)
  float in[16];
  int32_t out[16];
  to_lanes(in, a);
  for (int i = 0; i < 16; ++i)  // NaN and out-of-range lanes give the "integer indefinite" INT32_MIN
    out[i] = (in[i] >= -2147483648.0f && in[i] < 2147483648.0f) ? static_cast<int32_t>(std::nearbyint(in[i]))
                                                                 : INT32_MIN;
  return from_lanes<simde__m512i>(out);
}

// ---- Horizontal reductions ---------------------------------------------------------------------
// _mm512_reduce_add_ps is a compiler-provided sequence, not one instruction, so its rounding
// depends on the order of the adds. This is GCC's order (avx512fintrin.h __MM512_REDUCE_OP):
// halves 256+256, then 128+128, then lanes {0,1}+{2,3}, then 0+1 -- so results are bit-identical
// to a GCC native build. Clang's sequence may round differently; the kernels' tests allow for that
// (qk_gemm_f32a is checked against an error bound, not bit for bit).
inline float mm512_reduce_add_ps(simde__m512 a) {
  float x[16];
  to_lanes(x, a);
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = x[i + 8] + x[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  const float t8_0 = t6[0] + t6[2], t8_1 = t6[1] + t6[3];
  return t8_0 + t8_1;
}
// _mm512_reduce_max_ps, also GCC's sequence. vmaxps(a, b) is `a > b ? a : b`: the second operand
// wins on a tie (+0 vs -0) or a NaN, so the operand order below is GCC's, not just its tree.
inline float maxps(float a, float b) { return a > b ? a : b; }
inline float mm512_reduce_max_ps(simde__m512 a) {
  float x[16];
  to_lanes(x, a);
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = maxps(x[i + 8], x[i]);
  for (int i = 0; i < 4; ++i) t6[i] = maxps(t3[i + 4], t3[i]);
  const float t8_0 = maxps(t6[0], t6[2]), t8_1 = maxps(t6[1], t6[3]);
  return maxps(t8_0, t8_1);
}
// Integer sum of the 16 int32 lanes, wrapping modulo 2^32 like the native add sequence (computed
// in uint32 so that a wrap is not undefined behaviour under -fsanitize=undefined).
inline int32_t mm512_reduce_add_epi32(simde__m512i a) {
  uint32_t x[16];
  to_lanes(x, a);
  uint32_t s = 0;
  for (int i = 0; i < 16; ++i) s += x[i];
  return static_cast<int32_t>(s);
}

}  // namespace qsdpa_simde

// Intel names. Unconditional (#undef first) for the masked memory operations: see above.
#undef _mm_maskz_loadu_epi8
#define _mm_maskz_loadu_epi8(k, p) qsdpa_simde::mm_maskz_loadu_epi8((k), (p))
#undef _mm256_maskz_loadu_epi8
#define _mm256_maskz_loadu_epi8(k, p) qsdpa_simde::mm256_maskz_loadu_epi8((k), (p))
#undef _mm512_maskz_loadu_epi8
#define _mm512_maskz_loadu_epi8(k, p) qsdpa_simde::mm512_maskz_loadu_epi8((k), (p))
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) qsdpa_simde::mm512_maskz_loadu_ps((k), (p))
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, a) qsdpa_simde::mm512_mask_storeu_ps((p), (k), (a))

// Only where SIMDe does not already provide them.
#if !defined(_mm512_cvtepi8_epi32)
#define _mm512_cvtepi8_epi32(a) qsdpa_simde::mm512_cvtepi8_epi32(a)
#endif
#if !defined(_mm512_cvtepi32_ps)
#define _mm512_cvtepi32_ps(a) qsdpa_simde::mm512_cvtepi32_ps(a)
#endif
#if !defined(_mm512_cvtps_epi32)
#define _mm512_cvtps_epi32(a) qsdpa_simde::mm512_cvtps_epi32(a)
#endif
#if !defined(_mm512_reduce_add_ps)
#define _mm512_reduce_add_ps(a) qsdpa_simde::mm512_reduce_add_ps(a)
#endif
#if !defined(_mm512_reduce_max_ps)
#define _mm512_reduce_max_ps(a) qsdpa_simde::mm512_reduce_max_ps(a)
#endif
#if !defined(_mm512_reduce_add_epi32)
#define _mm512_reduce_add_epi32(a) qsdpa_simde::mm512_reduce_add_epi32(a)
#endif

// SIMDe 0.7.4 bug: avx512/madd.h aliases the two-operand _mm512_madd_epi16(a, b) with four
// parameters (src, k, a, b), so the Intel name does not compile. SIMDe's function itself is right.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16((a), (b))
