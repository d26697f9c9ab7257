// Generated from templates/dequant_gemm.cpp.j2 for ISA 'avx2' by `python -m codegen` — do not edit.
// C[m,n] = beta*C + A[m,k] @ dequant(B[k,n]); fp32 A, per-row (per-token) int8 B
// Register tile: 4 rows x 2 vectors of 8 f32 = 4x16.
//
// dequant(B)[t, j] = s_t * (B[t, j] - z_t). With w[i, t] = A[i, t] * s_t folded into A's column:
//   C[i, j] = sum_t w[i, t] * B[t, j]  -  sum_t w[i, t] * z_t
// so B is widened int8 -> f32 straight from the cache (no dequantized copy) and the zero point
// costs one scalar per output row.
#include "avx2/simd-avx2.h"

namespace qsdpa {
namespace avx2 {
namespace {

// One MRt x NVt-vector tile at columns [j0, j0 + NVt*NF); with PARTIAL the last vector has `last`
// lanes (1..NF) and nothing past it is read or written.
template <int MRt, int NVt, bool PARTIAL>
inline void dq_tile(size_t k, const float* a, size_t lda, const QMatrix& b, size_t j0, int last,
                    const float* corr, float* c, size_t ldc, bool accumulate) {
  vf acc[MRt][NVt];
  for (int r = 0; r < MRt; ++r)
    for (int v = 0; v < NVt; ++v) acc[r][v] = vzero();
  const int8_t* brow = b.data + j0;
  const float* scale = b.scale;
  for (size_t t = 0; t < k; ++t, brow += b.ld, scale += b.scale_stride) {
    vf bv[NVt];
    for (int v = 0; v < NVt; ++v)
      bv[v] = (PARTIAL && v == NVt - 1) ? vcvt_s8_n(brow + v * NF, last) : vcvt_s8(brow + v * NF);
    const float s = *scale;
    for (int r = 0; r < MRt; ++r) {
      const vf w = vset1(a[r * lda + t] * s);
      for (int v = 0; v < NVt; ++v) acc[r][v] = vfma(w, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MRt; ++r) {
    float* crow = c + r * ldc + j0;
    const vf zr = vset1(corr[r]);
    for (int v = 0; v < NVt; ++v) {
      vf x = vsub(acc[r][v], zr);
      if (PARTIAL && v == NVt - 1) {
        if (accumulate) x = vadd(vload_n(crow + v * NF, last), x);
        vstore_n(crow + v * NF, x, last);
      } else {
        if (accumulate) x = vadd(vload(crow + v * NF), x);
        vstore(crow + v * NF, x);
      }
    }
  }
}

// All column blocks of MRt rows.
template <int MRt>
inline void dq_rows(size_t n, size_t k, const float* a, size_t lda, const QMatrix& b, const float* corr,
                    float* c, size_t ldc, bool accumulate) {
  constexpr size_t kTileCols = 2 * NF;
  size_t j0 = 0;
  for (; j0 + kTileCols <= n; j0 += kTileCols) dq_tile<MRt, 2, false>(k, a, lda, b, j0, NF, corr, c, ldc, accumulate);
  const size_t rem = n - j0;
  if (rem == 0) return;
  const int nv = static_cast<int>((rem + NF - 1) / NF);
  const int last = static_cast<int>(rem - static_cast<size_t>(nv - 1) * NF);
  switch (nv) {
    case 1:
      if (last == NF) dq_tile<MRt, 1, false>(k, a, lda, b, j0, NF, corr, c, ldc, accumulate);
      else dq_tile<MRt, 1, true>(k, a, lda, b, j0, last, corr, c, ldc, accumulate);
      break;
    case 2:
      if (last == NF) dq_tile<MRt, 2, false>(k, a, lda, b, j0, NF, corr, c, ldc, accumulate);
      else dq_tile<MRt, 2, true>(k, a, lda, b, j0, last, corr, c, ldc, accumulate);
      break;
    default: break;
  }
}

}  // namespace
}  // namespace avx2
}  // namespace qsdpa

void qsdpa_dequant_gemm_f32s8__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float* c, size_t ldc, bool accumulate) {
  using namespace qsdpa::avx2;
  constexpr size_t kMR = 4;
  for (size_t i0 = 0; i0 < m; i0 += kMR) {
    const size_t mr = m - i0 < kMR ? m - i0 : kMR;
    // Zero-point term of each row, with the same w = A * s the tile uses.
    float corr[kMR];
    for (size_t r = 0; r < mr; ++r) {
      const float* arow = a + (i0 + r) * lda;
      float sum = 0.0f;
      for (size_t t = 0; t < k; ++t)
        sum += (arow[t] * b.scale[t * b.scale_stride]) * static_cast<float>(b.zero_point[t * b.zero_point_stride]);
      corr[r] = sum;
    }
    const float* ab = a + i0 * lda;
    float* cb = c + i0 * ldc;
    switch (mr) {
      case 1: dq_rows<1>(n, k, ab, lda, b, corr, cb, ldc, accumulate); break;
      case 2: dq_rows<2>(n, k, ab, lda, b, corr, cb, ldc, accumulate); break;
      case 3: dq_rows<3>(n, k, ab, lda, b, corr, cb, ldc, accumulate); break;
      case 4: dq_rows<4>(n, k, ab, lda, b, corr, cb, ldc, accumulate); break;
      default: break;
    }
  }
}
