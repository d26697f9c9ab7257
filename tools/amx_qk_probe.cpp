// Would AMX-INT8 pay for decode's Q.K^T? A llama3-8b decode step's integer dots (8 KV heads, 4
// query rows each, D 128, K in the [S, H, D] layout), computed two ways on the same data, hot:
//   vnni  the avx512_vnni kernel's instructions alone: per key and KV head 8 vpdpbusd for the 4
//         rows and 2 for the key's sum, keys outer, heads inner, into accumulators (no
//         reductions, no per-key output: a lower bound of that kernel's Q.K^T)
//   amx   tdpbsud, complete: K rows are the A tile (16 keys x 64 bytes, H*D bytes apart), the
//         packed query (u8 q + 128, four columns, and a column of ones for the key sums) the B
//         tile; per (64-key block, head) 8 tile loads of K, 8 tdpbsud, 4 tile stores, then the
//         16 x 5 int32 results moved into dots[head][row][key] and sums[head][key]
// The amx dots are checked exactly against a scalar reference first.
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8 tools/amx_qk_probe.cpp -o /tmp/amx_qk
//   /tmp/amx_qk [keys=2048] [calls=2000]
//
// Linux lends a process the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM); a
// CPU or kernel without it makes the probe say so and exit.
//
// On the Intel Xeon VM of 2026-12-02 (docs/benchmarks-history.md), medians: 2048 keys (2 MB of K, from
// L2 and L3) vnni 48.9-55.1 us, amx 70.6-71.5 us complete and 48.0-48.9 us for the tiles alone;
// 8192 keys 281.5 against 376.6 (tiles 284.9); 512 keys (in L2) 11.6 against 13.2 (tiles 9.3).
// A tdpbsud alone takes 4.4 ns, a 16-row tile load 2.2 ns, a tile store 4.1 ns. So AMX does not
// pay for decode here: with 4 query rows per KV head it fills 5 of a tile's 16 columns, streaming
// K bounds both ways alike, and moving the results into per-key rows costs more than it saves.
// (Head by head within a 64-key block, the tile loads 1 KiB apart, the tiles alone took 65 us.)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amx_util.h"

namespace {

constexpr int kHeads = 8, kRows = 4, kDim = 128, kBlock = 64, kCols = kRows + 1;
constexpr size_t kKeyBytes = kHeads * kDim;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// B tiles for one head: rows r = d/4 of 64 bytes: column n (4 bytes) holds q_n[4r .. 4r+3] + 128
// (n < 4) or ones (n = 4, the key sums); one tile per 64 d.
void pack_query(const int8_t* q /* [kRows][kDim] */, uint8_t* b /* [2][16][64] */) {
  std::memset(b, 0, 2 * 16 * 64);
  for (int half = 0; half < 2; ++half)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < kCols; ++n)
        for (int i = 0; i < 4; ++i)
          b[(half * 16 + r) * 64 + n * 4 + i] =
              n < kRows ? static_cast<uint8_t>(q[n * kDim + half * 64 + r * 4 + i] + 128) : 1;
}

// dots[g][row][key] = sum_d (q + 128) * k, sums[g][key] = sum_d k, for keys [0, keys).
template <bool kOut>
__attribute__((noinline)) void qk_amx(const int8_t* k, size_t keys, const uint8_t* bq /* [kHeads][2][16][64] */,
                                      int32_t* dots, int32_t* sums) {
  alignas(64) int32_t c[kHeads][16][16];
  // Keys outer, heads inner, as the avx512_vnni kernel: a group of 16 keys is 16 KiB read front to
  // back (head by head within a 64-key block, the 16-row tile loads 1 KiB apart ran 4x slower).
  // Tiles do not rename: a tile reloaded while a tdpbsud still reads it waits, so two sets of K
  // and query tiles and two accumulators take turns between heads.
  for (size_t j0 = 0; j0 < keys; j0 += 16) {
    const int8_t* kb = k + j0 * kKeyBytes;
    for (int g = 0; g < kHeads; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_loadd(2, kb + g * kDim, kKeyBytes);
      _tile_loadd(3, kb + g * kDim + 64, kKeyBytes);
      _tile_loadd(6, bq + g * 2048, 64);
      _tile_loadd(7, bq + g * 2048 + 1024, 64);
      _tile_dpbsud(0, 2, 6);
      _tile_dpbsud(0, 3, 7);
      _tile_loadd(4, kb + (g + 1) * kDim, kKeyBytes);
      _tile_loadd(5, kb + (g + 1) * kDim + 64, kKeyBytes);
      _tile_stored(0, c[g], 64);
      _tile_loadd(6, bq + (g + 1) * 2048, 64);
      _tile_loadd(7, bq + (g + 1) * 2048 + 1024, 64);
      _tile_dpbsud(1, 4, 6);
      _tile_dpbsud(1, 5, 7);
      _tile_stored(1, c[g + 1], 64);
    }
    if (!kOut) continue;
    // c[g][key][n] -> dots[g][n][j0 + key], sums[g][j0 + key]: a column of each 16 x 16 tile.
    const __m512i idx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int g = 0; g < kHeads; ++g)
      for (int n = 0; n < kCols; ++n) {
        const __m512i col = _mm512_i32gather_epi32(idx, &c[g][0][n], 4);
        int32_t* out = n < kRows ? dots + (static_cast<size_t>(g) * kRows + n) * keys : sums + g * keys;
        _mm512_storeu_si512(out + j0, col);
      }
  }
}

volatile __m512i g_sink;

// The vnni kernel's dot instructions alone (see the header).
__attribute__((noinline)) void qk_vnni(const int8_t* k, size_t keys, const uint8_t* q /* [kHeads][kRows][kDim] */) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, ks = a0;
  for (size_t j = 0; j < keys; ++j)
    for (int g = 0; g < kHeads; ++g) {
      const int8_t* kr = k + j * kKeyBytes + g * kDim;
      const uint8_t* qg = q + g * kRows * kDim;
      const __m512i k0 = _mm512_loadu_si512(kr), k1 = _mm512_loadu_si512(kr + 64);
      a0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a0, _mm512_loadu_si512(qg), k0), _mm512_loadu_si512(qg + 64), k1);
      a1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a1, _mm512_loadu_si512(qg + 128), k0), _mm512_loadu_si512(qg + 192), k1);
      a2 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a2, _mm512_loadu_si512(qg + 256), k0), _mm512_loadu_si512(qg + 320), k1);
      a3 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a3, _mm512_loadu_si512(qg + 384), k0), _mm512_loadu_si512(qg + 448), k1);
      ks = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(ks, ones, k0), ones, k1);
    }
  __asm__ volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(ks));
  g_sink = _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)), ks);
}

}  // namespace

int main(int argc, char** argv) {
  size_t keys;
  int calls;
  if (!amx_util::keys_and_calls(argc, argv, kBlock, 2000, keys, calls)) return 2;
  if (!amx_util::amx_available()) return 0;
  amx_util::TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;  // C 0-1, K 2-5, query 6-7
  _tile_loadconfig(&cfg);

  std::vector<int8_t> k(keys * kKeyBytes), q(kHeads * kRows * kDim);
  uint32_t x = 12345;
  for (auto& v : k) v = static_cast<int8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (auto& v : q) v = static_cast<int8_t>((x = x * 1664525u + 1013904223u) >> 24);
  std::vector<uint8_t> bq(kHeads * 2048), qu(q.size());
  for (int g = 0; g < kHeads; ++g) pack_query(q.data() + g * kRows * kDim, bq.data() + g * 2048);
  for (size_t i = 0; i < q.size(); ++i) qu[i] = static_cast<uint8_t>(q[i] + 128);
  std::vector<int32_t> dots(kHeads * kRows * keys), sums(kHeads * keys);

  qk_amx<true>(k.data(), keys, bq.data(), dots.data(), sums.data());
  for (int g = 0; g < kHeads; ++g)
    for (size_t j = 0; j < keys; ++j) {
      int32_t s = 0;
      for (int d = 0; d < kDim; ++d) s += k[j * kKeyBytes + g * kDim + d];
      if (s != sums[g * keys + j]) { std::printf("key sum mismatch at head %d key %zu\n", g, j); return 1; }
      for (int r = 0; r < kRows; ++r) {
        int32_t dot = 0;
        for (int d = 0; d < kDim; ++d) dot += (q[(g * kRows + r) * kDim + d] + 128) * k[j * kKeyBytes + g * kDim + d];
        if (dot != dots[(g * kRows + r) * keys + j]) { std::printf("dot mismatch at head %d row %d key %zu\n", g, r, j); return 1; }
      }
    }

  std::vector<double> tv, ta, tt;
  for (int c = 0; c < calls; ++c) {
    double t0 = now();
    qk_vnni(k.data(), keys, qu.data());
    tv.push_back(now() - t0);
    t0 = now();
    qk_amx<true>(k.data(), keys, bq.data(), dots.data(), sums.data());
    ta.push_back(now() - t0);
    t0 = now();
    qk_amx<false>(k.data(), keys, bq.data(), dots.data(), sums.data());
    tt.push_back(now() - t0);
  }
  _tile_release();
  std::sort(tv.begin(), tv.end());
  std::sort(ta.begin(), ta.end());
  std::sort(tt.begin(), tt.end());
  const double v = tv[tv.size() / 2], a = ta[ta.size() / 2], t = tt[tt.size() / 2];
  std::printf("keys=%zu, hot, medians of %d: vnni dots alone %.1f us; amx complete %.1f us (%.2fx), of it the "
              "tiles alone (no output moves) %.1f us; amx dots exact\n", keys, calls, v * 1e6, a * 1e6, v / a, t * 1e6);
  return 0;
}
