// Decode's Q.K^T lane tile (4 query rows of one KV head x 4 keys, the u8 scheme) from L1, in its
// two forms (generated/avx512_vnni/simd-avx512-vnni.h: qk_lane_tile_4x4<HD, ROT>), against the
// dot instructions alone. Both forms must give the same dots; the program stops if they do not.
//
//   g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma
//       -Icsrc -Igenerated tools/qk_lane_tile_probe.cpp -o /tmp/qk_lane_tile_probe
//   /tmp/qk_lane_tile_probe [reps=200000]
//
// Printed: ns per key and KV head over a 64-key block (K 64 x HD bytes, stays in L1), median of 7.
//   broadcast  each key's 16-byte pieces broadcast to the four row lanes (32 vbroadcasti32x4 a tile)
//   rotated    each key's 64-byte pieces as loaded, against four lane rotations of the rows
//   dots only  HD / 16 + HD / 64 vpdpbusd a key (the tile's dots and key sums), register-fed, no
//              reduction: what the dot pipe alone allows
// On the Zen 4 VM (AMD EPYC family 25 model 17; one 512-bit vpdpbusd a cycle), 2026-12-04, three
// runs: HD 128 broadcast 4.62-5.09, rotated 4.05-4.76, dots only 2.75-2.89; HD 64 broadcast
// 2.83-2.90, rotated 2.90-2.94, dots only 1.43-1.45. Variants timed while writing this (HD 128, not
// kept here): the broadcast form with the lane reduction and the key sums' finish left out 3.55-3.65,
// and with plain 64-byte loads in place of the broadcasts (wrong dots) and no key sums 2.18-2.22,
// the 8 dots' own pace. So the broadcasts cost about 0.8 ns a key and the finish about 1 ns; the
// rotated form trades the broadcasts for three lane turns and three adds, which pays at HD 128 (two
// 64-byte pieces a key) and not at HD 64 (one).
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

constexpr int kKeys = 64, kMaxDim = 128;
alignas(64) int8_t K[kKeys][kMaxDim];
alignas(64) uint8_t Q[4][kMaxDim];
alignas(64) int32_t dots[2][4][kKeys];

template <size_t HD, bool ROT>
__attribute__((noinline)) void tile_block(const vi* qt, vi bias, int32_t (*out)[kKeys]) {
  for (int j = 0; j < kKeys; j += 4) qk_lane_tile_4x4<HD, ROT>(qt, bias, &K[j][0], kMaxDim, &out[0][j], kKeys);
}

// HD / 16 + HD / 64 dots a key on the key's own 64-byte pieces, in independent chains. Named
// accumulators: in an array GCC 12 copies them around every vpdpbusd (timing the copies).
#define QLTP_DOT(a, c, kv) a = _mm512_dpbusd_epi32(a, qt[c], kv)
#define QLTP_SUM(a, kv) a = _mm512_dpbusd_epi32(a, ones, kv)
template <size_t HD>
__attribute__((noinline)) void dots_block(const vi* qt) {
  static_assert(HD == 64 || HD == 128, "the probe's head dims");
  const vi ones = _mm512_set1_epi8(1);
  vi a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
  for (int j = 0; j < kKeys; ++j) {
    const vi k0 = _mm512_loadu_si512(&K[j][0]);
    QLTP_DOT(a0, 0, k0); QLTP_DOT(a1, 1, k0); QLTP_DOT(a2, 2, k0); QLTP_DOT(a3, 3, k0); QLTP_SUM(a4, k0);
    if constexpr (HD == 128) {
      const vi k1 = _mm512_loadu_si512(&K[j][64]);
      QLTP_DOT(a5, 4, k1); QLTP_DOT(a6, 5, k1); QLTP_DOT(a7, 6, k1); QLTP_DOT(a8, 7, k1); QLTP_SUM(a9, k1);
    }
  }
  a0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                        _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  _mm512_storeu_si512(&dots[0][0][0], _mm512_add_epi32(a0, _mm512_add_epi32(a8, a9)));
}
#undef QLTP_DOT
#undef QLTP_SUM

template <typename F>
double ns_per_key(F f, int reps) {
  return probe_util::ns_per(f, reps, kKeys);
}

template <size_t HD>
void probe(int reps) {
  const int32_t bias[4] = {131, 97, 128, 200};  // 128 + zq of each row
  const vi vb = lane_bias4(bias);
  vi qb[HD / 16], qr[HD / 16];
  qk_lane_tiles<HD, false>(&Q[0][0], kMaxDim, qb);
  qk_lane_tiles<HD, true>(&Q[0][0], kMaxDim, qr);
  tile_block<HD, false>(qb, vb, dots[0]);
  tile_block<HD, true>(qr, vb, dots[1]);
  if (std::memcmp(dots[0], dots[1], sizeof dots[0]) != 0) {
    std::printf("HD %zu: the two forms' dots differ\n", HD);
    std::exit(1);
  }
  const double b = ns_per_key([&] { tile_block<HD, false>(qb, vb, dots[0]); }, reps);
  const double r = ns_per_key([&] { tile_block<HD, true>(qr, vb, dots[1]); }, reps);
  const double d = ns_per_key([&] { dots_block<HD>(qb); }, reps);
  std::printf("HD %3zu: broadcast %.3f  rotated %.3f  dots only %.3f ns per key and KV head (same dots)\n", HD, b, r, d);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200000;
  uint32_t x = 12345;
  auto next = [&] { return x = x * 1664525u + 1013904223u, static_cast<uint8_t>(x >> 24); };
  for (auto& row : K)
    for (auto& b : row) b = static_cast<int8_t>(next());
  for (auto& row : Q)
    for (auto& b : row) b = next();
  probe<128>(reps);
  probe<64>(reps);
  return 0;
}
