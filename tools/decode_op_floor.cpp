// The compute floor of the AVX2 decode kernel's two GEMMs on this machine, data in L1.
//
//   g++ -O3 -mavx2 -mfma -mf16c -Icsrc -Igenerated tools/decode_op_floor.cpp -o /tmp/decode_op_floor
//   /tmp/decode_op_floor
//
// One "key-head" is one key of one KV head in a GQA-4 decode step with head dim 128 (llama3-8b:
// 32 query heads, 8 KV heads): 4 query rows x 128 dims of exact int8 Q.K^T and 4 x 128 f32 P.V
// FMAs over the widened int8 V row. This runs only those instructions, in the kernel's register
// tiles (Q.K^T 4 rows x 2 keys, 16 dims a step: widen, vpmaddwd, vpaddd; P.V 4 rows x 24 columns:
// widen, convert, broadcast, FMA), on a 64-key block that stays in L1, with no softmax, no
// prefetch, no loop over heads or blocks. A kernel built from these tiles cannot be cheaper than
// this, so (ns per key-head) x keys x KV heads is a lower bound on its decode compute time, to set
// against the bandwidth floor the benchmark reports (docs/benchmarks.md). It is a floor for this
// design (these tiles, these instructions), not for every AVX2 kernel.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "avx2/simd-avx2.h"

namespace {

constexpr int kKeys = 64, kDim = 128, kRows = 4;
alignas(64) int8_t K[kKeys][kDim], V[kKeys][kDim];
alignas(64) int16_t Q[kRows][kDim];
alignas(64) float W[kRows][kKeys];
alignas(64) int32_t dots[kRows][kKeys];
alignas(64) float acc_out[kRows][kDim];

// The kernel's own Q.K^T step (generated/avx2/simd-avx2.h): vpmaddwd with the query vector from
// memory, accumulated in place. Written with plain intrinsics GCC copies the accumulators around
// (an earlier version of this file spilled 171 vmovdqa per 2-key step, and timed the spills).
using qsdpa::avx2::qdot16;

__attribute__((noinline)) void qk_block() {
  for (int j = 0; j < kKeys; j += 2) {
    __m256i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int d = 0; d < kDim; d += 16) {
      const __m256i k0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&K[j][d])));
      const __m256i k1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&K[j + 1][d])));
      for (int r = 0; r < kRows; ++r) {
        a[2 * r] = qdot16(a[2 * r], k0, &Q[r][d]);
        a[2 * r + 1] = qdot16(a[2 * r + 1], k1, &Q[r][d]);
      }
    }
    const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
    const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(&dots[0][j]), s);
  }
}

template <int NV>
__attribute__((always_inline)) inline void pv_tile(int d0) {
  __m256 acc[kRows][NV];
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int k = 0; k < kKeys; ++k) {
    __m256 bv[NV];
    for (int i = 0; i < NV; ++i)
      bv[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&V[k][d0 + 8 * i]))));
    for (int r = 0; r < kRows; ++r) {
      const __m256 w = _mm256_broadcast_ss(&W[r][k]);
      for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_fmadd_ps(w, bv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < NV; ++i)
      _mm256_storeu_ps(&acc_out[r][d0 + 8 * i], _mm256_add_ps(acc[r][i], _mm256_loadu_ps(&acc_out[r][d0 + 8 * i])));
}

__attribute__((noinline)) void pv_block() {  // 128 columns: five 4x3 tiles and one 4x1, as the kernel
  for (int d0 = 0; d0 + 24 <= kDim; d0 += 24) pv_tile<3>(d0);
  pv_tile<1>(120);
}

double ns_per_key_head(int mode) {
  const long reps = 20000;
  std::vector<double> runs;
  for (int pass = 0; pass < 9; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long it = 0; it < reps; ++it) {
      if (mode & 1) qk_block();
      if (mode & 2) pv_block();
      __asm__ volatile("" ::: "memory");
    }
    runs.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                   (reps * static_cast<double>(kKeys)));
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  for (int i = 0; i < kKeys; ++i)
    for (int d = 0; d < kDim; ++d) K[i][d] = static_cast<int8_t>(rand()), V[i][d] = static_cast<int8_t>(rand());
  for (int r = 0; r < kRows; ++r) {
    for (int d = 0; d < kDim; ++d) Q[r][d] = static_cast<int16_t>(rand() % 511 - 255);
    for (int k = 0; k < kKeys; ++k) W[r][k] = 1e-3f * static_cast<float>(rand() % 100);
  }
  const double qk = ns_per_key_head(1), pv = ns_per_key_head(2), both = ns_per_key_head(3);
  std::printf("AVX2 decode op floor, median of 9 passes (ns per key and KV head, GQA 4, D 128, data in L1):\n");
  std::printf("  Q.K^T %.2f   P.V %.2f   both %.2f\n", qk, pv, both);
  for (int keys : {2048, 8192})
    std::printf("  llama3-8b decode, %d keys x 8 KV heads: >= %.0f us of compute on one core\n", keys,
                both * keys * 8 / 1e3);
  std::printf("(checksums %d %g)\n", dots[1][3], static_cast<double>(acc_out[2][5]));
  return 0;
}
