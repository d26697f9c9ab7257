// Would decode's Q.K^T hide inside its P.V if the two ran interleaved? From L1, one KV head's
// 64-key block at D 128 (4 query rows): Q.K^T as the kernel's rotated lane tiles
// (generated/avx512_vnni/simd-avx512-vnni.h: qk_lane_tile_4x4, 10 vpdpbusd a key and ~13 other
// instructions for the lane turns and sums), P.V as the kernel's 4-row x 4-vector tiles (32 FMAs a
// key over two column tiles, V widened and converted in registers). On Zen 4 the dots share the
// FMAs' pipe, but the lane tile's other instructions do not, and P.V leaves the other pipes
// half idle: run one Q.K^T tile every eight P.V key steps (the next block's Q.K^T, in a kernel)
// and the tile's non-dot work could cost nothing.
//
//   g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma
//       -Icsrc -Igenerated tools/qk_pv_interleave_probe.cpp -o /tmp/qk_pv_interleave
//   /tmp/qk_pv_interleave [reps=200000]
//
// Printed: ns per key (of one KV head, all 4 rows), median of 7 runs: Q.K^T alone, P.V alone, the
// two one after the other (the kernel's order), and interleaved. The interleaved form's dots and
// P.V sums are checked against the sequential form's (the same operations in the same order per
// accumulator, so the same bits).
//
// On the Zen 4 VM (AMD EPYC family 25 model 17), 2026-12-07, seven runs: Q.K^T 4.01-4.53, P.V
// 9.49-9.79, one after the other 13.57-14.12, interleaved 13.71-14.55 (1.006-1.039 of sequential;
// GCC kept every accumulator in registers, no spills). The two add up whichever way they run: the
// lane tile's turns and sums compete for the dots' and FMAs' pipes, so the decode step's Q.K^T and
// P.V take ~13.6 ns a key and KV head from L1 on this core (49 cycles at 3.6 GHz), and only the
// softmax, the gather and the item's bookkeeping lie beyond them.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "avx512_vnni/simd-avx512-vnni.h"
#include "probe_util.h"

namespace {

using qsdpa::avx512_vnni::lane_bias4;
using qsdpa::avx512_vnni::qk_lane_tile_4x4;
using qsdpa::avx512_vnni::qk_lane_tiles;
using qsdpa::avx512_vnni::vi;

constexpr int kKeys = 64, kDim = 128, kRows = 4;
alignas(64) int8_t K[kKeys][kDim], V[kKeys][kDim];
alignas(64) uint8_t Q[kRows][kDim];
alignas(64) float W[kRows][kKeys];
alignas(64) int32_t dots[2][kRows][kKeys];
alignas(64) float acc[2][kRows][kDim];

inline __m512 widen(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// One P.V key step of a 4-row x 4-vector column tile.
__attribute__((always_inline)) inline void pv_step(__m512 (&t)[kRows][4], int k, int c) {
  __m512 bv[4];
  for (int i = 0; i < 4; ++i) bv[i] = widen(&V[k][64 * c + 16 * i]);
  for (int r = 0; r < kRows; ++r) {
    const __m512 w = _mm512_set1_ps(W[r][k]);
    for (int i = 0; i < 4; ++i) t[r][i] = _mm512_fmadd_ps(w, bv[i], t[r][i]);
  }
}

__attribute__((always_inline)) inline void pv_store(const __m512 (&t)[kRows][4], int c, float (*out)[kDim]) {
  for (int r = 0; r < kRows; ++r)
    for (int i = 0; i < 4; ++i) _mm512_store_ps(&out[r][64 * c + 16 * i], t[r][i]);
}

__attribute__((noinline)) void qk_only(const vi* qt, vi bias, int32_t (*out)[kKeys]) {
  for (int j = 0; j < kKeys; j += 4) qk_lane_tile_4x4<kDim, true>(qt, bias, &K[j][0], kDim, &out[0][j], kKeys);
}

__attribute__((noinline)) void pv_only(float (*out)[kDim]) {
  for (int c = 0; c < 2; ++c) {
    __m512 t[kRows][4];
    for (auto& row : t)
      for (auto& x : row) x = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < kKeys; ++k) pv_step(t, k, c);
    pv_store(t, c, out);
  }
}

__attribute__((noinline)) void sequential(const vi* qt, vi bias) {
  qk_only(qt, bias, dots[0]);
  pv_only(acc[0]);
}

// A Q.K^T tile after every eighth P.V key step: 8 tiles in each of the two column tiles' loops.
__attribute__((noinline)) void interleaved(const vi* qt, vi bias) {
  for (int c = 0; c < 2; ++c) {
    __m512 t[kRows][4];
    for (auto& row : t)
      for (auto& x : row) x = _mm512_setzero_ps();
    for (int k = 0; k < kKeys; k += 8) {
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) pv_step(t, k + u, c);
      const int j = 32 * c + k / 2;  // this column tile's share of the block's keys, 4 at a time
      qk_lane_tile_4x4<kDim, true>(qt, bias, &K[j][0], kDim, &dots[1][0][j], kKeys);
    }
    pv_store(t, c, acc[1]);
  }
}

template <typename F>
double ns_per_key(F f, int reps) {
  return probe_util::ns_per(f, reps, kKeys);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200000;
  uint32_t x = 12345;
  auto next = [&] { return x = x * 1664525u + 1013904223u, x >> 8; };
  for (auto& row : K)
    for (auto& b : row) b = static_cast<int8_t>(next());
  for (auto& row : V)
    for (auto& b : row) b = static_cast<int8_t>(next());
  for (auto& row : Q)
    for (auto& b : row) b = static_cast<uint8_t>(next());
  for (auto& row : W)
    for (auto& w : row) w = static_cast<float>(next() % 1000) / 1000.0f;
  const int32_t bias_rows[4] = {131, 97, 128, 200};  // 128 + zq of each row
  const vi bias = lane_bias4(bias_rows);
  vi qt[kDim / 16];
  qk_lane_tiles<kDim, true>(&Q[0][0], kDim, qt);
  sequential(qt, bias);
  interleaved(qt, bias);
  if (std::memcmp(dots[0], dots[1], sizeof dots[0]) != 0 || std::memcmp(acc[0], acc[1], sizeof acc[0]) != 0) {
    std::printf("the interleaved form's results differ\n");
    return 1;
  }
  const double q = ns_per_key([&] { qk_only(qt, bias, dots[0]); }, reps);
  const double p = ns_per_key([&] { pv_only(acc[0]); }, reps);
  const double s = ns_per_key([&] { sequential(qt, bias); }, reps);
  const double i = ns_per_key([&] { interleaved(qt, bias); }, reps);
  std::printf("ns per key and KV head: Q.K^T %.3f  P.V %.3f  one after the other %.3f  interleaved %.3f "
              "(%.3f of sequential)\n", q, p, s, i, i / s);
  return 0;
}
