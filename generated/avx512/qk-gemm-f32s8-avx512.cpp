// Generated from templates/qk_gemm_f32a.cpp.j2 for ISA 'avx512' by `python -m codegen` — do not edit.
// C[m,n] = alpha * A[m,k] @ dequant(B[n,k]).T; fp32 A
// Register tile: 4 x 4 accumulators of 16 f32.
//
// c[i, j] = alpha * sb_j * sum_k q[i, k] * (b[j, k] - zb_j)
//         = (sum_k q[i, k] * b[j, k]  -  zb_j * sum_k q[i, k]) * (sb_j * alpha)
// K rows are widened int8 -> f32 in registers; the zero point costs one term per output.
#include "avx512/simd-avx512.h"

namespace qsdpa {
namespace avx512 {
namespace {

constexpr size_t kRowChunk = 64;  // rows of A whose sums are kept on the stack

template <int MRt, int NRt>
inline void qkf_tile(size_t k, const float* a, size_t lda, const int8_t* b, size_t ldb, const float* sum_a,
                     const float* zb, const float* coef, float* c, size_t ldc) {
  vf acc[MRt][NRt];
  for (int r = 0; r < MRt; ++r)
    for (int j = 0; j < NRt; ++j) acc[r][j] = vzero();
  size_t kk = 0;
  for (; kk + NF <= k; kk += NF) {
    vf av[MRt], bv[NRt];
    for (int r = 0; r < MRt; ++r) av[r] = vload(a + r * lda + kk);
    for (int j = 0; j < NRt; ++j) bv[j] = vcvt_s8(b + j * ldb + kk);
    for (int r = 0; r < MRt; ++r)
      for (int j = 0; j < NRt; ++j) acc[r][j] = vfma(av[r], bv[j], acc[r][j]);
  }
  if (kk < k) {
    const int rest = static_cast<int>(k - kk);
    vf av[MRt], bv[NRt];
    for (int r = 0; r < MRt; ++r) av[r] = vload_n(a + r * lda + kk, rest);
    for (int j = 0; j < NRt; ++j) bv[j] = vcvt_s8_n(b + j * ldb + kk, rest);
    for (int r = 0; r < MRt; ++r)
      for (int j = 0; j < NRt; ++j) acc[r][j] = vfma(av[r], bv[j], acc[r][j]);
  }
  for (int r = 0; r < MRt; ++r)
    for (int j = 0; j < NRt; ++j) c[r * ldc + j] = (vhsum(acc[r][j]) - zb[j] * sum_a[r]) * coef[j];
}

template <int MRt>
inline void qkf_tile_n(size_t nr, size_t k, const float* a, size_t lda, const int8_t* b, size_t ldb,
                       const float* sum_a, const float* zb, const float* coef, float* c, size_t ldc) {
  switch (nr) {
    case 1: qkf_tile<MRt, 1>(k, a, lda, b, ldb, sum_a, zb, coef, c, ldc); break;
    case 2: qkf_tile<MRt, 2>(k, a, lda, b, ldb, sum_a, zb, coef, c, ldc); break;
    case 3: qkf_tile<MRt, 3>(k, a, lda, b, ldb, sum_a, zb, coef, c, ldc); break;
    case 4: qkf_tile<MRt, 4>(k, a, lda, b, ldb, sum_a, zb, coef, c, ldc); break;
    default: break;
  }
}

}  // namespace
}  // namespace avx512
}  // namespace qsdpa

void qsdpa_qk_gemm_f32s8__avx512(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc) {
  using namespace qsdpa::avx512;
  constexpr size_t kMR = 4, kNR = 4;
  for (size_t c0 = 0; c0 < m; c0 += kRowChunk) {
    const size_t rows = m - c0 < kRowChunk ? m - c0 : kRowChunk;
    float sum_a[kRowChunk];
    for (size_t r = 0; r < rows; ++r) {
      const float* arow = a + (c0 + r) * lda;
      float s = 0.0f;
      for (size_t t = 0; t < k; ++t) s += arow[t];
      sum_a[r] = s;
    }
    for (size_t j0 = 0; j0 < n; j0 += kNR) {
      const size_t nr = n - j0 < kNR ? n - j0 : kNR;
      float zb[kNR], coef[kNR];
      for (size_t j = 0; j < nr; ++j) {
        zb[j] = static_cast<float>(b.zero_point[(j0 + j) * b.zero_point_stride]);
        coef[j] = b.scale[(j0 + j) * b.scale_stride] * alpha;
      }
      const int8_t* bp = b.data + j0 * b.ld;
      for (size_t i0 = 0; i0 < rows; i0 += kMR) {
        const size_t mr = rows - i0 < kMR ? rows - i0 : kMR;
        const float* ap = a + (c0 + i0) * lda;
        float* cp = c + (c0 + i0) * ldc + j0;
        switch (mr) {
          case 1: qkf_tile_n<1>(nr, k, ap, lda, bp, b.ld, sum_a + i0, zb, coef, cp, ldc); break;
          case 2: qkf_tile_n<2>(nr, k, ap, lda, bp, b.ld, sum_a + i0, zb, coef, cp, ldc); break;
          case 3: qkf_tile_n<3>(nr, k, ap, lda, bp, b.ld, sum_a + i0, zb, coef, cp, ldc); break;
          case 4: qkf_tile_n<4>(nr, k, ap, lda, bp, b.ld, sum_a + i0, zb, coef, cp, ldc); break;
          default: break;
        }
      }
    }
  }
}
