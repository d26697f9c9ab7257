// Generated from templates/qk_gemm.cpp.j2 for ISA 'neon_dotprod' by `python -m codegen` — do not edit.
// C[m,n] = alpha * dequant(A[m,k]) @ dequant(B[n,k]).T; exact int32 dot products
// Register tile: 4 x 4 int32 dot accumulators, 16 int8 of k per step (sdot).
//
// d[i, j] = sum_k (a - za_i)(b - zb_j) = sum_k a*b - zb_j*sum(a_i) - za_i*sum(b_j) + k*za_i*zb_j,
// exact in int32 for k <= kMaxDotK (the terms are combined with wrapping unsigned arithmetic, and
// the final value fits). Then c[i, j] = float(d) * (float(sa_i * alpha) * sb_j): the same float ops
// in every variant, so every variant's output is bit-identical.
#include "neon_dotprod/simd-neon-dotprod.h"

namespace qsdpa {
namespace neon_dotprod {
namespace {

constexpr size_t kRowChunk = 64;  // rows of A whose sums and scales are kept on the stack

template <int MRt, int NRt>
inline void qk_tile(size_t k, const int8_t* a, size_t lda, const int8_t* b, size_t ldb, const int32_t* sum_a,
                    const int32_t* za, const float* coef, const int32_t* sum_b, const int32_t* zb, const float* sb,
                    float* c, size_t ldc) {
  vi acc[MRt][NRt];
  for (int r = 0; r < MRt; ++r)
    for (int j = 0; j < NRt; ++j) acc[r][j] = dzero();
  size_t kk = 0;
  for (; kk + KB <= k; kk += KB) {
    vd av[MRt], bv[NRt];
    for (int r = 0; r < MRt; ++r) av[r] = dload_a(a + r * lda + kk);
    for (int j = 0; j < NRt; ++j) bv[j] = dload_b(b + j * ldb + kk);
    for (int r = 0; r < MRt; ++r)
      for (int j = 0; j < NRt; ++j) acc[r][j] = ddot(acc[r][j], av[r], bv[j]);
  }
  if (kk < k) {
    const int rest = static_cast<int>(k - kk);
    vd av[MRt], bv[NRt];
    for (int r = 0; r < MRt; ++r) av[r] = dload_a_n(a + r * lda + kk, rest);
    for (int j = 0; j < NRt; ++j) bv[j] = dload_b_n(b + j * ldb + kk, rest);
    for (int r = 0; r < MRt; ++r)
      for (int j = 0; j < NRt; ++j) acc[r][j] = ddot(acc[r][j], av[r], bv[j]);
  }
  const uint32_t kk32 = static_cast<uint32_t>(k);
  for (int r = 0; r < MRt; ++r) {
    for (int j = 0; j < NRt; ++j) {
      // Unsigned arithmetic: intermediate terms may wrap, the exact result fits in int32.
      uint32_t d = static_cast<uint32_t>(dhsum(acc[r][j]));
      d -= static_cast<uint32_t>(za[r] + A_BIAS) * static_cast<uint32_t>(sum_b[j]);
      d -= static_cast<uint32_t>(zb[j]) * static_cast<uint32_t>(sum_a[r]);
      d += kk32 * static_cast<uint32_t>(za[r]) * static_cast<uint32_t>(zb[j]);
      c[r * ldc + j] = static_cast<float>(static_cast<int32_t>(d)) * (coef[r] * sb[j]);
    }
  }
}

template <int MRt>
inline void qk_tile_n(size_t nr, size_t k, const int8_t* a, size_t lda, const int8_t* b, size_t ldb,
                      const int32_t* sum_a, const int32_t* za, const float* coef, const int32_t* sum_b,
                      const int32_t* zb, const float* sb, float* c, size_t ldc) {
  switch (nr) {
    case 1: qk_tile<MRt, 1>(k, a, lda, b, ldb, sum_a, za, coef, sum_b, zb, sb, c, ldc); break;
    case 2: qk_tile<MRt, 2>(k, a, lda, b, ldb, sum_a, za, coef, sum_b, zb, sb, c, ldc); break;
    case 3: qk_tile<MRt, 3>(k, a, lda, b, ldb, sum_a, za, coef, sum_b, zb, sb, c, ldc); break;
    case 4: qk_tile<MRt, 4>(k, a, lda, b, ldb, sum_a, za, coef, sum_b, zb, sb, c, ldc); break;
    default: break;
  }
}

}  // namespace
}  // namespace neon_dotprod
}  // namespace qsdpa

void qsdpa_qk_gemm_s8s8__neon_dotprod(size_t m, size_t n, size_t k, const qsdpa::QMatrix& a,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc) {
  using namespace qsdpa::neon_dotprod;
  constexpr size_t kMR = 4;
  for (size_t c0 = 0; c0 < m; c0 += kRowChunk) {
    const size_t rows = m - c0 < kRowChunk ? m - c0 : kRowChunk;
    int32_t sum_a[kRowChunk], za[kRowChunk];
    float coef[kRowChunk];
    for (size_t r = 0; r < rows; ++r) {
      const size_t row = c0 + r;
      sum_a[r] = a.rowsum ? a.rowsum[row] : row_sum_s8(a.data + row * a.ld, k);
      za[r] = a.zero_point[row * a.zero_point_stride];
      coef[r] = a.scale[row * a.scale_stride] * alpha;
    }
    // Column blocks outermost within the chunk: each block's B row sums are computed once.
    constexpr size_t kNR = 4;
    for (size_t j0 = 0; j0 < n; j0 += kNR) {
      const size_t nr = n - j0 < kNR ? n - j0 : kNR;
      int32_t sum_b[kNR], zb[kNR];
      float sb[kNR];
      for (size_t j = 0; j < nr; ++j) {
        const size_t row = j0 + j;
        sum_b[j] = b.rowsum ? b.rowsum[row] : row_sum_s8(b.data + row * b.ld, k);
        zb[j] = b.zero_point[row * b.zero_point_stride];
        sb[j] = b.scale[row * b.scale_stride];
      }
      const int8_t* bp = b.data + j0 * b.ld;
      for (size_t i0 = 0; i0 < rows; i0 += kMR) {
        const size_t mr = rows - i0 < kMR ? rows - i0 : kMR;
        const int8_t* ap = a.data + (c0 + i0) * a.ld;
        float* cp = c + (c0 + i0) * ldc + j0;
        switch (mr) {
          case 1: qk_tile_n<1>(nr, k, ap, a.ld, bp, b.ld, sum_a + i0, za + i0, coef + i0, sum_b, zb, sb, cp, ldc); break;
          case 2: qk_tile_n<2>(nr, k, ap, a.ld, bp, b.ld, sum_a + i0, za + i0, coef + i0, sum_b, zb, sb, cp, ldc); break;
          case 3: qk_tile_n<3>(nr, k, ap, a.ld, bp, b.ld, sum_a + i0, za + i0, coef + i0, sum_b, zb, sb, cp, ldc); break;
          case 4: qk_tile_n<4>(nr, k, ap, a.ld, bp, b.ld, sum_a + i0, za + i0, coef + i0, sum_b, zb, sb, cp, ldc); break;
          default: break;
        }
      }
    }
  }
}
