// Generated from templates/quantize.cpp.j2 for ISA 'avx512' by `python -m codegen` — do not edit.
// per-token asymmetric int8 quantization of fp32 rows, bit-identical to PyTorch's choose_qparams_per_token_asymmetric + quantize_per_token
//
// Per row of d values, PyTorch's steps in PyTorch's precisions (qsdpa/_quantize.py is the numpy
// reference, and tests hold every variant to it and to PyTorch bit for bit):
//   lo = min(min(x), 0), hi = max(max(x), 0)                                  exact in any order
//   scale = max((hi - lo) / 255, eps32)                                       float32
//   zp = round_half_even(clamp(-128 - lo/scale  or  127 - hi/scale, -128, 127)), the end whose
//        error is smaller                                                     float32
//   q = clamp(round_half_even(double(x) * (1.0 / double(scale)) + zp), -128, 127)  float64, the
//        product and the sum rounded apart (the build has -ffp-contract=off)
// A row's min and max take one vector pass, which also finds NaN and infinities (x - x is 0 for
// every finite x and NaN otherwise); its values a second, in float64 vectors where the ISA has them.
// A row of finite values whose range hi - lo exceeds FLT_MAX ([3e38, -3e38]) would get an infinite
// scale (PyTorch's too) and q8 that dequantize to NaN: it is refused like a NaN, before any write.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "avx512/simd-avx512.h"

namespace qsdpa {
namespace avx512 {
namespace {

constexpr size_t kParallelFloats = size_t(1) << 16;  // below this much input a parallel region costs more than it saves

struct RowStats {
  float lo, hi;
  bool finite;
  bool range_ok() const { return hi - lo <= FLT_MAX; }  // float32, as row_params computes it: inf if not
};

// min(min(x), 0), max(max(x), 0) and whether every value is finite. Padding lanes read as 0, which
// changes neither bound (both include 0).
inline RowStats row_stats(const float* x, size_t d) {
  vf mn[2], mx[2], bad[2];
  for (int c = 0; c < 2; ++c) mn[c] = mx[c] = bad[c] = vzero();
  size_t j = 0;
  for (; j + 2 * NF <= d; j += 2 * NF)
    for (int c = 0; c < 2; ++c) {
      const vf v = vload(x + j + c * NF);
      mn[c] = vmin(mn[c], v);
      mx[c] = vmax(mx[c], v);
      bad[c] = vadd(bad[c], vsub(v, v));
    }
  for (; j < d; j += NF) {
    const int n = d - j < static_cast<size_t>(NF) ? static_cast<int>(d - j) : NF;
    const vf v = vload_n(x + j, n);
    mn[0] = vmin(mn[0], v);
    mx[0] = vmax(mx[0], v);
    bad[0] = vadd(bad[0], vsub(v, v));
  }
  for (int c = 1; c < 2; ++c) {
    mn[0] = vmin(mn[0], mn[c]);
    mx[0] = vmax(mx[0], mx[c]);
    bad[0] = vadd(bad[0], bad[c]);
  }
  // vhmax of -x: the prelude has no horizontal min. Negation is exact.
  const float lo = -vhmax(vsub(vzero(), mn[0]));
  const float hi = vhmax(mx[0]);
  return {lo < 0.0f ? lo : 0.0f, hi > 0.0f ? hi : 0.0f, vhsum(bad[0]) == 0.0f};
}

struct RowParams {
  float scale, zp;
};

// choose_qparams_per_token_asymmetric, float32 step by step.
inline RowParams row_params(float lo, float hi) {
  float scale = (hi - lo) / 255.0f;
  scale = scale > FLT_EPSILON ? scale : FLT_EPSILON;
  const float dmin = lo / scale, dmax = hi / scale;
  const float from_min = -128.0f + dmin, from_max = 127.0f + dmax;
  float zp = from_min + from_max > 0.0f ? -128.0f - dmin : 127.0f - dmax;
  zp = zp < -128.0f ? -128.0f : (zp > 127.0f ? 127.0f : zp);
  return {scale, std::nearbyint(zp)};
}

inline int8_t quantize_one(float x, double inv, double zp) {
  double q = std::nearbyint(static_cast<double>(x) * inv + zp);
  q = q < -128.0 ? -128.0 : (q > 127.0 ? 127.0 : q);
  return static_cast<int8_t>(q);
}

// The row's d values, quantized with 1/scale and zp in float64.
inline void quantize_row(const float* x, size_t d, double inv, double zp, int8_t* q) {
  size_t j = 0;
  // 8 floats as two vectors of 4 doubles (AVX; the AVX-512 variants are built with AVX2 too).
  const __m256d vinv = _mm256_set1_pd(inv), vzp = _mm256_set1_pd(zp);
  const __m256d qmin = _mm256_set1_pd(-128.0), qmax = _mm256_set1_pd(127.0);
  for (; j + 8 <= d; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a = _mm256_round_pd(_mm256_add_pd(_mm256_mul_pd(a, vinv), vzp), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    b = _mm256_round_pd(_mm256_add_pd(_mm256_mul_pd(b, vinv), vzp), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    a = _mm256_min_pd(_mm256_max_pd(a, qmin), qmax);
    b = _mm256_min_pd(_mm256_max_pd(b, qmin), qmax);
    // Integral values in [-128, 127]: the conversions and the saturating packs are exact.
    const __m128i w = _mm_packs_epi32(_mm256_cvtpd_epi32(a), _mm256_cvtpd_epi32(b));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + j), _mm_packs_epi16(w, w));
  }
  for (; j < d; ++j) q[j] = quantize_one(x[j], inv, zp);
}

inline const float* row_in(const QuantizeRows& a, size_t r) { return a.x + (r / a.inner) * a.xo + (r % a.inner) * a.xi; }

// A row's fault code: 2 * row for a NaN or an infinity, 2 * row + 1 for a range beyond float32,
// SIZE_MAX for none. The smallest code of a set of rows is its first bad row, and what is wrong.
inline size_t row_fault(const QuantizeRows& a, size_t r) {
  const RowStats st = row_stats(row_in(a, r), a.d);
  return !st.finite ? 2 * r : !st.range_ok() ? 2 * r + 1 : SIZE_MAX;
}

// The first fault code of rows [r0, r1), or SIZE_MAX.
inline size_t first_fault(const QuantizeRows& a, size_t r0, size_t r1) {
  for (size_t r = r0; r < r1; ++r) {
    const size_t f = row_fault(a, r);
    if (f != SIZE_MAX) return f;
  }
  return SIZE_MAX;
}

inline void quantize_rows(const QuantizeRows& a, size_t r0, size_t r1) {
  for (size_t r = r0; r < r1; ++r) {
    const size_t o = r / a.inner, i = r % a.inner;
    const float* x = a.x + o * a.xo + i * a.xi;
    const RowStats st = row_stats(x, a.d);
    const RowParams p = row_params(st.lo, st.hi);
    quantize_row(x, a.d, 1.0 / static_cast<double>(p.scale), static_cast<double>(p.zp), a.q + o * a.qo + i * a.qi);
    a.scale[o * a.so + i * a.si] = p.scale;
    a.zp[o * a.zo + i * a.zi] = static_cast<int8_t>(p.zp);
  }
}

}  // namespace
}  // namespace avx512
}  // namespace qsdpa

// Every row is checked before any is written. The first bad row (index r = o * inner + i) stops the
// call with nothing written: returns r if it holds a NaN or an infinity, -2 - r if its range
// (max - min) exceeds float32. Otherwise -1 once every row is quantized (with check_only, -1 and
// nothing written). Rows are independent, so the thread count changes no bits.
long long qsdpa_quantize_f32s8__avx512(const qsdpa::QuantizeRows& a, int threads, bool check_only) {
  using namespace qsdpa::avx512;
  const size_t rows = a.outer * a.inner;
  if (rows == 0 || a.d == 0) return -1;
  const bool parallel = threads > 1 && rows > 1 && rows * a.d >= kParallelFloats;
  size_t bad = SIZE_MAX;  // a fault code (row_fault)
  if (!parallel) {
    bad = first_fault(a, 0, rows);
  } else {
    // Each thread's copy of `bad` starts at SIZE_MAX and its rows come in order: once it has found
    // one, the rest of its rows cannot hold the first.
#pragma omp parallel for num_threads(threads) schedule(static) reduction(min : bad)
    for (long long r = 0; r < static_cast<long long>(rows); ++r)
      if (bad == SIZE_MAX) bad = row_fault(a, static_cast<size_t>(r));
  }
  if (bad != SIZE_MAX) {
    const long long row = static_cast<long long>(bad / 2);
    return bad % 2 == 0 ? row : -2 - row;
  }
  if (check_only) return -1;
  if (!parallel) {
    quantize_rows(a, 0, rows);
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long r = 0; r < static_cast<long long>(rows); ++r)
      quantize_rows(a, static_cast<size_t>(r), static_cast<size_t>(r) + 1);
  }
  return -1;
}
