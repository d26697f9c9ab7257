// What would P.V cost if it read V in memory order (every head of a key, key after key), the one
// order tools/block_order_probe.cpp found the hardware prefetcher hides well? One 64-key block of
// a llama3-8b decode item (8 KV heads x 4 query rows x D 128, V int8 in the [S, H, D] layout,
// fp32 weights), from cache, 1 thread, three ways:
//   tiles            qsdpa's order: per head, per 64-column tile, keys inner, 4 x 4 zmm accumulators
//                    in registers, added to the accumulator in memory once per tile
//   memory order     per key, per head: the 4 x 128 accumulators can only live in memory (eight
//                    heads' are 256 zmm), so each FMA loads and stores its accumulator
//   2 keys           per key pair, per head, two 64-column halves: a load and store per 2 FMAs (not
//                    memory order either: block_order_probe's "2 keys at a time")
//
//   g++ -O3 -mavx512f -mavx512bw -mfma tools/pv_order_probe.cpp -o /tmp/pv_order && /tmp/pv_order
//
// On the Zen 4 VM of 2026-12-04 (two runs): tiles 5.00 us a block (9.8 ns a key and head), memory
// order 11.18-11.20 (21.8), 2 keys 6.18-6.19 (12.1). Memory order would cost ~200 us more compute
// at 2048 keys (32 blocks) on 1 thread, against the 16-75 us of exposed memory time it could save
// there (block_order_probe: qsdpa's orders with prefetch, +38 to +86 us over from cache, against
// +11 to +22 in memory order without): no gain.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
alignas(64) int8_t V[64 * 1024];
alignas(64) float W[8][4][64];
alignas(64) float ACC[8][4][128];
__attribute__((noinline)) void pv_tiles() {
  for (int h = 0; h < 8; ++h)
    for (int t = 0; t < 2; ++t) {
      __m512 a[4][4];
      for (int r = 0; r < 4; ++r) for (int i = 0; i < 4; ++i) a[r][i] = _mm512_setzero_ps();
      for (int k = 0; k < 64; ++k) {
        const int8_t* v = V + k * 1024 + h * 128 + t * 64;
        __m512 x[4];
        for (int i = 0; i < 4; ++i) x[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(v + 16 * i))));
        for (int r = 0; r < 4; ++r) { const __m512 w = _mm512_set1_ps(W[h][r][k]); for (int i = 0; i < 4; ++i) a[r][i] = _mm512_fmadd_ps(w, x[i], a[r][i]); }
      }
      for (int r = 0; r < 4; ++r) for (int i = 0; i < 4; ++i) { float* p = &ACC[h][r][t * 64 + i * 16]; _mm512_store_ps(p, _mm512_add_ps(_mm512_load_ps(p), a[r][i])); }
    }
}
__attribute__((noinline)) void pv_memorder() {
  for (int k = 0; k < 64; ++k)
    for (int h = 0; h < 8; ++h) {
      const int8_t* v = V + k * 1024 + h * 128;
      __m512 x[8];
      for (int i = 0; i < 8; ++i) x[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(v + 16 * i))));
      for (int r = 0; r < 4; ++r) {
        const __m512 w = _mm512_set1_ps(W[h][r][k]);
        float* p = ACC[h][r];
        for (int i = 0; i < 8; ++i) _mm512_store_ps(p + 16 * i, _mm512_fmadd_ps(w, x[i], _mm512_load_ps(p + 16 * i)));
      }
    }
}
__attribute__((noinline)) void pv_memorder_rows2() {
  for (int k = 0; k < 64; k += 2)
    for (int h = 0; h < 8; ++h) {
      const int8_t* v0 = V + k * 1024 + h * 128; const int8_t* v1 = v0 + 1024;
      for (int half = 0; half < 2; ++half) {
        __m512 x0[4], x1[4];
        for (int i = 0; i < 4; ++i) {
          x0[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(v0 + half * 64 + 16 * i))));
          x1[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(v1 + half * 64 + 16 * i))));
        }
        for (int r = 0; r < 4; ++r) {
          const __m512 w0 = _mm512_set1_ps(W[h][r][k]), w1 = _mm512_set1_ps(W[h][r][k + 1]);
          float* p = ACC[h][r] + half * 64;
          for (int i = 0; i < 4; ++i) _mm512_store_ps(p + 16 * i, _mm512_fmadd_ps(w1, x1[i], _mm512_fmadd_ps(w0, x0[i], _mm512_load_ps(p + 16 * i))));
        }
      }
    }
}
int main() {
  for (size_t i = 0; i < sizeof V; ++i) V[i] = (int8_t)(i * 7);
  for (int h = 0; h < 8; ++h) for (int r = 0; r < 4; ++r) for (int k = 0; k < 64; ++k) W[h][r][k] = 1e-3f * (k + 1);
  void (*fns[])() = {pv_tiles, pv_memorder, pv_memorder_rows2};
  const char* names[] = {"tiles (qsdpa)", "memory order, acc in L1", "2 keys, acc in L1"};  // median of 200 x 32 calls
  std::vector<double> t[3];
  for (int rep = 0; rep < 200; ++rep)
    for (int f = 0; f < 3; ++f) { double t0 = now(); for (int n = 0; n < 32; ++n) fns[f](); t[f].push_back((now() - t0) / 32); }
  for (int f = 0; f < 3; ++f) { std::sort(t[f].begin(), t[f].end()); printf("%-26s %.2f us per block (%.1f ns per key-head)\n", names[f], t[f][100] * 1e6, t[f][100] * 1e9 / 512); }
  printf("(checksum %g)\n", ACC[3][2][77]);  // the accumulators are live
}
