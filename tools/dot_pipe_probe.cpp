// Which of the Q.K^T and P.V instructions compete for the same execution pipe, register-only (no
// memory stream beyond an L1-resident table of K vectors). Two questions:
//  1. Do 512-bit vpdpbusd (Q.K^T's dots) and 512-bit FMA (P.V) issue side by side, or share a
//     pipe? If they share, a decode step's arithmetic floor is the sum of the two counts.
//  2. Could the u8 scheme's key sums (a vpdpbusd of K with a ones vector: 2 of every 10 dot
//     instructions of the 4-row lane tile at D 128) move off the dot pipe as vpsadbw of K ^ 0x80
//     (sum of k + 128 over 8 bytes, exact), so that 8 dots + 2 key sums cost no more than 8 dots?
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni tools/dot_pipe_probe.cpp -o /tmp/dot_pipe
//   /tmp/dot_pipe [iterations=20000000]
//
// On the Zen 4 VM (AMD EPYC family 25 model 17), 2026-12-04, ns per instruction or per step:
//   vpdpbusd zmm 0.272-0.278, FMA zmm 0.272-0.277 (one a cycle each), vpdpbusd ymm 0.144-0.162
//   (two a cycle: the same MACs a second); one of each 0.545-0.555, two of either: they share the
//   pipe. Per step: 8 dots 2.26-2.38, 8 dots + 2 key-sum dots 2.72-2.78 (one 3.95), 8 dots + 2
//   xor/vpsadbw/add key sums 2.73-2.74 (one 4.11): the sums cost the same either way. Not built.
// On the Intel Xeon VM of 2026-12-07 (KVM family 6 model 167), three runs: vpdpbusd zmm
//   0.151-0.156, FMA zmm 0.140-0.142, vpdpbusd ymm 0.139-0.144, one of each 0.285-0.286: two of
//   either a cycle, on the same two pipes. 8 dots 2.86, + 2 key-sum dots 3.24-3.27, + 2 vpsadbw
//   key sums 3.06-3.15: the vpsadbw form would save ~6% of Q.K^T's dot steps there.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Keeps a result alive without _mm512_reduce_* (whose GCC 12 header trips -Wuninitialized).
template <typename V>
void keep(V v) {
  alignas(64) int lanes[sizeof(V) / sizeof(int)];
  std::memcpy(lanes, &v, sizeof(V));
  volatile int sink = lanes[0];
  (void)sink;
}

enum Kind { kDot, kFma, kDotYmm, kDotAndFma };

// ns per chain step of N independent chains of one kind (kDotAndFma: a dot and an FMA per step).
template <int N, Kind K>
__attribute__((noinline)) double pipe_ns(long iters) {
  __m512i a[N];
  __m512 f[N];
  __m256i h[N];
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(1);
  const __m256i x2 = _mm256_set1_epi8(3), y2 = _mm256_set1_epi8(1);
  const __m512 fx = _mm512_set1_ps(1.0f), fy = _mm512_set1_ps(1e-9f);
  for (int i = 0; i < N; ++i) {
    a[i] = _mm512_set1_epi32(i);
    f[i] = _mm512_set1_ps(static_cast<float>(i));
    h[i] = _mm256_set1_epi32(i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) {
      if (K == kDot || K == kDotAndFma) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
      if (K == kFma || K == kDotAndFma) f[i] = _mm512_fmadd_ps(fx, fy, f[i]);
      if (K == kDotYmm) h[i] = _mm256_dpbusd_epi32(h[i], x2, y2);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  __m512i r = _mm512_setzero_si512();
  __m512 fr = _mm512_setzero_ps();
  __m256i r2 = _mm256_setzero_si256();
  for (int i = 0; i < N; ++i) r = _mm512_add_epi32(r, a[i]), fr = _mm512_add_ps(fr, f[i]), r2 = _mm256_add_epi32(r2, h[i]);
  keep(r), keep(fr), keep(r2);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iters) / N;
}

// ns per step of ND dot chains and NS key-sum chains on K vectors from an L1 table; key sums as
// vpdpbusd with ones (SAD false) or as vpsadbw of K ^ 0x80 added into 64-bit lanes (SAD true).
template <int ND, int NS, bool SAD>
__attribute__((noinline)) double step_ns(long iters, const __m512i* k) {
  __m512i a[ND > 0 ? ND : 1], s[NS > 0 ? NS : 1];
  const __m512i q = _mm512_set1_epi8(3), ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512(),
                sign = _mm512_set1_epi8(-128);
  for (int i = 0; i < ND; ++i) a[i] = _mm512_set1_epi32(i);
  for (int i = 0; i < NS; ++i) s[i] = _mm512_set1_epi32(i);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < ND; ++i) a[i] = _mm512_dpbusd_epi32(a[i], q, _mm512_load_si512(k + ((it + i) & 7)));
#pragma GCC unroll 32
    for (int i = 0; i < NS; ++i) {
      const __m512i kv = _mm512_load_si512(k + ((it + i) & 7));
      s[i] = SAD ? _mm512_add_epi64(s[i], _mm512_sad_epu8(_mm512_xor_si512(kv, sign), zero))
                 : _mm512_dpbusd_epi32(s[i], ones, kv);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  __m512i r = zero;
  for (int i = 0; i < ND; ++i) r = _mm512_add_epi32(r, a[i]);
  for (int i = 0; i < NS; ++i) r = _mm512_add_epi32(r, s[i]);
  keep(r);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iters);
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 20000000;
  alignas(64) static __m512i k[8];
  for (int i = 0; i < 8; ++i) k[i] = _mm512_set1_epi8(static_cast<char>(i * 37 - 100));
  for (int rep = 0; rep < 3; ++rep) {
    std::printf("ns per instruction: vpdpbusd zmm %.3f  FMA zmm %.3f  vpdpbusd ymm %.3f  one of each %.3f\n",
                pipe_ns<12, kDot>(n), pipe_ns<12, kFma>(n), pipe_ns<12, kDotYmm>(n), pipe_ns<8, kDotAndFma>(n));
    std::printf("ns per step: 8 dots %.2f  8 dots + 2 key-sum dots %.2f  8 dots + 2 vpsadbw key sums %.2f\n",
                step_ns<8, 0, false>(n, k), step_ns<8, 2, false>(n, k), step_ns<8, 2, true>(n, k));
  }
}
