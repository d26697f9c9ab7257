// Would AMX-INT8 pay for decode's P.V? A llama3-8b decode step's P.V (8 KV heads, 4 query rows
// each, D 128, V in the [S, H, D] layout, 64-key blocks, fp32 accumulators rescaled per block),
// computed two ways on the same data, hot:
//   fma  the avx512 kernels' scheme: per head, per 64-column tile, 4 rows x 4 vectors of
//        accumulators down the block's keys, each V row widened int8 -> f32 in registers, each
//        weight broadcast (16 FMAs, 4 widenings a key)
//   amx  the weights as 24-bit integers in three byte planes (A: 12 rows = 3 planes x 4 rows,
//        64 keys; scale per row and block = its largest weight / (2^24 - 1)), V interleaved four
//        keys to a dword (B: 8 tiles of 16 key groups x 16 columns), 8 tdpbusd per (block, head)
//        into int32 tiles, then c0 + 256 c1 + 65536 c2 in f32 into the accumulators
// Both are checked against a float64 reference (relative to sum |w v|); the accumulators are kept
// in the column order the packing gives (a fixed permutation, undone once at the end).
//
//   g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mamx-tile -mamx-int8 tools/amx_pv_probe.cpp -o /tmp/amx_pv
//   /tmp/amx_pv [keys=2048] [calls=400]
//
// On the Intel Xeon VM (KVM family 6 model 167, 2 MiB L2 a core) on 2026-12-07 ~12:20 UTC, medians:
// 2048 keys fma 156.1-173.6 us, amx 106.9-113.0 (1.49-1.56x); 512 keys 30.5-33.4 against 20.8-23.2
// (1.43-1.44x); 8192 keys 715.5-721.6 against 541.2-551.7 (1.31-1.32x). Error / sum |w v|: fma
// 3-5e-7, amx 5e-8 to 5e-7 (the planes' integer sums are exact within a block). A build of this
// probe with parts left out (not kept; 2048 keys): without the V interleave 46.0 us, without the
// weight planes 81.7, without the readback 95.7: the interleave (per 4 keys and 64 columns 4
// loads, 8 shuffles, 4 stores) is the biggest part.
//
// In the kernel it did not pay. A build of the decode path with this P.V (not kept: the interleave
// by vpermt2b into natural column order, the next block's prefetch pieces spread over it, the
// tiles configured once per item), against the kernel's FMA tiles, tools/ab_decode.py
// --allow-diff, llama3-8b, 2048 keys, 1 thread, B/A: hot back to back 1.135 (1.266 with the tiles
// released after each item and the buffers thread_local), hot after the bench's 5 ms pause 1.361,
// cold back to back 1.227, cold after the pause 1.491. perf (hot, back to back): the most samples
// on the tdpbusd after the first tile load of the interleaved V, which reads what the interleave
// has just stored, and on the interleave's loads of V, which a hot call brings from L3 (its 4 MiB
// of K and V do not fit in L2). A second build (not kept) interleaved the whole block's V, every
// head, in memory order right after Q.K^T, with the next block's prefetch spread over that loop,
// and each head's tiles read it from there (no tile load waits on fresh stores); outputs within
// 2.6e-7 of max |out| of the kernel's: slower still, hot 1.243 back to back and 1.925 after the
// pause, cold after the pause 1.653. This probe run after the same kind of pause (5 ms of
// AVX-512 FMAs) lost as much as the FMA form did (2048 keys: amx 106.5 -> 129.3 us, fma 160.7 ->
// 188.9), so it is not the tile unit starting slow; what costs the kernel builds so much after a
// pause was not found.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amx_util.h"
#include "probe_util.h"

namespace {

constexpr int kHeads = 8, kRows = 4, kDim = 128, kBlock = 64;
constexpr size_t kKeyBytes = kHeads * kDim;

// Where packed column n of tile (half, j) comes from: d = 64 half + 16 (n / 4) + 4 j + n % 4.
int packed_d(int half, int j, int n) { return 64 * half + 16 * (n / 4) + 4 * j + n % 4; }

// w: [kHeads][kRows][keys] weights (the scale already folded in); acc [kHeads][kRows][kDim].
__attribute__((noinline)) void pv_fma(const int8_t* v, const float* w, size_t keys, float* acc, float rescale) {
  const __m512 rs = _mm512_set1_ps(rescale);
  for (size_t j0 = 0; j0 < keys; j0 += kBlock)
    for (int g = 0; g < kHeads; ++g)
      for (int ct = 0; ct < 2; ++ct) {
        float* a = acc + g * kRows * kDim + 64 * ct;
        __m512 c[kRows][4];
        for (int r = 0; r < kRows; ++r)
          for (int x = 0; x < 4; ++x) c[r][x] = _mm512_mul_ps(_mm512_loadu_ps(a + r * kDim + 16 * x), rs);
        const int8_t* vb = v + j0 * kKeyBytes + g * kDim + 64 * ct;
        const float* wg = w + g * kRows * keys + j0;
        for (int t = 0; t < kBlock; ++t) {
          __m512 vv[4];
          for (int x = 0; x < 4; ++x)
            vv[x] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vb + t * kKeyBytes + 16 * x))));
          for (int r = 0; r < kRows; ++r) {
            const __m512 wr = _mm512_set1_ps(wg[r * keys + t]);
            for (int x = 0; x < 4; ++x) c[r][x] = _mm512_fmadd_ps(wr, vv[x], c[r][x]);
          }
        }
        for (int r = 0; r < kRows; ++r)
          for (int x = 0; x < 4; ++x) _mm512_storeu_ps(a + r * kDim + 16 * x, c[r][x]);
      }
}

// One head's 64 keys of V (rows kKeyBytes apart) as 8 B tiles [half][j][16 key groups][64 bytes].
__attribute__((always_inline)) inline void pack_v(const int8_t* vb, int8_t* b) {
  for (int grp = 0; grp < 16; ++grp)
    for (int half = 0; half < 2; ++half) {
      const int8_t* p = vb + 4 * grp * kKeyBytes + 64 * half;
      const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_loadu_si512(p + kKeyBytes),
                    r2 = _mm512_loadu_si512(p + 2 * kKeyBytes), r3 = _mm512_loadu_si512(p + 3 * kKeyBytes);
      const __m512i t0 = _mm512_unpacklo_epi8(r0, r1), t1 = _mm512_unpackhi_epi8(r0, r1);
      const __m512i t2 = _mm512_unpacklo_epi8(r2, r3), t3 = _mm512_unpackhi_epi8(r2, r3);
      int8_t* o = b + half * 4096 + grp * 64;
      _mm512_store_si512(o, _mm512_unpacklo_epi16(t0, t2));
      _mm512_store_si512(o + 1024, _mm512_unpackhi_epi16(t0, t2));
      _mm512_store_si512(o + 2048, _mm512_unpacklo_epi16(t1, t3));
      _mm512_store_si512(o + 3072, _mm512_unpackhi_epi16(t1, t3));
    }
}

// acc is in packed column order: acc[g][r][half][j][n] for d = packed_d(half, j, n).
__attribute__((noinline)) void pv_amx(const int8_t* v, const float* w, size_t keys, float* acc, float rescale) {
  alignas(64) uint8_t a[12 * 64];
  alignas(64) int8_t b[8 * 1024];
  alignas(64) int32_t c[4][12 * 16];
  const __m512 rs = _mm512_set1_ps(rescale);
  for (size_t j0 = 0; j0 < keys; j0 += kBlock)
    for (int g = 0; g < kHeads; ++g) {
      float delta[kRows];
      const float* wg = w + g * kRows * keys + j0;
      for (int r = 0; r < kRows; ++r) {
        __m512 x[4];
        for (int i = 0; i < 4; ++i) x[i] = _mm512_loadu_ps(wg + r * keys + 16 * i);
        const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3])));
        const float s = m > 0 ? 16777215.0f / m : 0.0f;
        delta[r] = m / 16777215.0f;
        for (int i = 0; i < 4; ++i) {
          // x * s can round up to 2^24, which the three planes would drop.
          const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x[i], _mm512_set1_ps(s))), _mm512_set1_epi32(0xFFFFFF));
          _mm_store_si128(reinterpret_cast<__m128i*>(a + r * 64 + 16 * i), _mm512_cvtepi32_epi8(q));
          _mm_store_si128(reinterpret_cast<__m128i*>(a + (4 + r) * 64 + 16 * i), _mm512_cvtepi32_epi8(_mm512_srli_epi32(q, 8)));
          _mm_store_si128(reinterpret_cast<__m128i*>(a + (8 + r) * 64 + 16 * i), _mm512_cvtepi32_epi8(_mm512_srli_epi32(q, 16)));
        }
      }
      pack_v(v + j0 * kKeyBytes + g * kDim, b);
      _tile_loadd(4, a, 64);
      for (int half = 0; half < 2; ++half) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(5, b + half * 4096, 64);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(6, b + half * 4096 + 1024, 64);
        _tile_dpbusd(1, 4, 6);
        _tile_loadd(5, b + half * 4096 + 2048, 64);
        _tile_dpbusd(2, 4, 5);
        _tile_loadd(6, b + half * 4096 + 3072, 64);
        _tile_dpbusd(3, 4, 6);
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
        for (int r = 0; r < kRows; ++r) {
          const __m512 dl = _mm512_set1_ps(delta[r]);
          float* ar = acc + (g * kRows + r) * kDim + 64 * half;
          for (int j = 0; j < 4; ++j) {
            const __m512 c0 = _mm512_cvtepi32_ps(_mm512_load_si512(c[j] + r * 16));
            const __m512 c1 = _mm512_cvtepi32_ps(_mm512_load_si512(c[j] + (4 + r) * 16));
            const __m512 c2 = _mm512_cvtepi32_ps(_mm512_load_si512(c[j] + (8 + r) * 16));
            const __m512 t = _mm512_fmadd_ps(c2, _mm512_set1_ps(65536.0f), _mm512_fmadd_ps(c1, _mm512_set1_ps(256.0f), c0));
            _mm512_storeu_ps(ar + 16 * j, _mm512_fmadd_ps(t, dl, _mm512_mul_ps(_mm512_loadu_ps(ar + 16 * j), rs)));
          }
        }
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  size_t keys;
  int calls;
  if (!amx_util::keys_and_calls(argc, argv, kBlock, 400, keys, calls)) return 2;
  if (!amx_util::amx_available()) return 0;
  amx_util::TileConfig cfg;
  for (int t = 0; t < 4; ++t) cfg.rows[t] = 12, cfg.colsb[t] = 64;  // C
  cfg.rows[4] = 12, cfg.colsb[4] = 64;                               // A: the weights' planes
  cfg.rows[5] = cfg.rows[6] = 16, cfg.colsb[5] = cfg.colsb[6] = 64;  // B: packed V
  _tile_loadconfig(&cfg);

  std::vector<int8_t> v(keys * kKeyBytes);
  std::vector<float> w(kHeads * kRows * keys);
  uint32_t x = 12345;
  for (auto& e : v) e = static_cast<int8_t>((x = x * 1664525u + 1013904223u) >> 24);
  // Softmax-like weights over 6 decades, times a V scale.
  for (auto& e : w) e = 0.02f * std::exp(-14.0f * static_cast<float>((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f);

  // One pass each from zero (rescale 1) against float64.
  std::vector<float> af(kHeads * kRows * kDim, 0.0f), aa(af.size(), 0.0f);
  pv_fma(v.data(), w.data(), keys, af.data(), 1.0f);
  pv_amx(v.data(), w.data(), keys, aa.data(), 1.0f);
  double ef = 0, ea = 0;
  for (int g = 0; g < kHeads; ++g)
    for (int r = 0; r < kRows; ++r)
      for (int d = 0; d < kDim; ++d) {
        double s = 0, sa = 0;
        for (size_t t = 0; t < keys; ++t) {
          const double p = static_cast<double>(w[(g * kRows + r) * keys + t]) * v[t * kKeyBytes + g * kDim + d];
          s += p, sa += std::fabs(p);
        }
        const int half = d / 64, n = 4 * ((d % 64) / 16) + d % 4, j = (d % 16) / 4;
        const size_t pa = (g * kRows + r) * kDim + 64 * half + 16 * j + n;
        if (packed_d(half, j, n) != d) { std::printf("permutation bug\n"); return 1; }
        ef = std::max(ef, std::fabs(af[(g * kRows + r) * kDim + d] - s) / sa);
        ea = std::max(ea, std::fabs(aa[pa] - s) / sa);
      }
  std::printf("max |err| / sum|w v|: fma %.2e, amx %.2e (f32 eps 1.19e-07)\n", ef, ea);

  std::vector<double> tf, ta;
  for (int c = 0; c < calls; ++c) {
    double t0 = probe_util::now();
    pv_fma(v.data(), w.data(), keys, af.data(), 0.5f);
    tf.push_back(probe_util::now() - t0);
    t0 = probe_util::now();
    pv_amx(v.data(), w.data(), keys, aa.data(), 0.5f);
    ta.push_back(probe_util::now() - t0);
  }
  _tile_release();
  std::sort(tf.begin(), tf.end());
  std::sort(ta.begin(), ta.end());
  const double f = tf[tf.size() / 2], a = ta[ta.size() / 2];
  std::printf("keys=%zu, hot, medians of %d: fma %.1f us, amx %.1f us (fma / amx %.2fx)\n", keys, calls, f * 1e6,
              a * 1e6, f / a);
  return 0;
}
