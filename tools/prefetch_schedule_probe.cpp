// The decode kernel's memory schedule with stand-in arithmetic: which part of it keeps the next
// block's lines from arriving in time? A thread (or two) streams a cold K and V (separate 2 MiB regions a
// layer, 64 KiB of each a block: llama3-8b's 64 keys x 8 KV heads x 128 bytes) in the kernel's
// order, doing FMAs in place of its arithmetic at its pace per phase, and fetching the next block
// by one of several schedules. Cold (a new layer each call, 16 layers: 64 MiB) against hot (one
// block's lines over and over, in L2): what the schedule leaves unhidden is cold - hot.
//
//   g++ -O2 -std=c++17 -fopenmp -mavx512f tools/prefetch_schedule_probe.cpp -o /tmp/pf_sched
//   /tmp/pf_sched [calls=40] [pause_ms=5] [qk_fma=8] [softmax_fma=5376] [pv_fma=16] [threads=1]
//
// threads=2: each thread takes half of each layer's blocks (a 2-thread decode's KV split), after
// the pause on both; the threads wait for each other by spinning, no sleep or wake.
//
// A block, as templates/flash_attention.cpp.j2's all-heads decode item runs it:
//   Q.K^T   1024 steps: the block's K lines in memory order (keys outer, heads inner), qk_fma FMAs each
//   softmax softmax_fma FMAs, no memory
//   P.V     1024 steps: V head by head, each head's two 64-byte column tiles down the 64 keys, pv_fma
//           FMAs each
// The default FMA counts put the phases at the kernel's shares of a hot call on the Zen 4 VM (Q.K^T
// 25%, scores and softmax 16%, P.V 54%; ~33k cycles a block). Fetch schedules of the next block's
// 2048 lines (all into L1 with prefetcht0, or into L2 with prefetcht1):
//   kernel   the first half of its K during Q.K^T (a line every other step), the rest of K and all of
//            V during P.V (three lines every two steps): prefetch_tuning's AMD setting
//   even     a line every step: its K during Q.K^T, its V during P.V
//   none     no software prefetch
//
// On the Zen 4 VM (AMD EPYC family 25 model 17), 2026-12-07 ~04:40 UTC, defaults, medians in us, cold
// (cold - hot); hot 260-284 in every 1-thread run (~8.5 us a block, the kernel's own hot block 9.3-9.7):
//   1 thread, 5 ms, busy:    kernel L1 322 (+48), even L1 +58, kernel L2 +52, even L2 +53, none +305
//   1 thread, 5 ms pause:    kernel L1 300 (+30), even L1 +37, kernel L2 +11, even L2 +36, none +203
//   1 thread, no pause:      kernel L1 278 (+18), even L1 +29, kernel L2 +22, even L2 +16, none +172
//   2 threads, 5 ms pause:   kernel L1 181 / 138 (+43), even L1 +37, kernel L2 +34, even L2 +34, none +115
//   2 threads, no pause:     kernel L1 163 / 136 (+27), even L1 +35, kernel L2 +25, even L2 +29, none +90
// The kernel's schedule leaves 0.5-1.5 us a block unhidden at 1 thread and 1.7-2.7 at 2 (16 blocks
// a thread), no worse than a line every step. Fetching two or three blocks ahead instead of one (a
// build of this probe, not kept) was no better: 2 threads +40 and +45 against +33 (L1).
// The kernel's own steady blocks (a traced build, 2048 keys, 1 thread, back to back, the same
// session) took 11.3-11.4 us cold against 9.3-9.7 hot: 1.6-2.1 us a block, of which the qparam
// gather 0.4, the keys-outer Q.K^T 0.7-1.0 and the eight heads' softmax and P.V 0.5-0.7; at 8192
// keys and 2 threads 13.6 against 11.1 (from L3): 2.5 us, the probe's 2-thread figure.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_util.h"

namespace {

using probe_util::hsum;

constexpr size_t kRegion = 2u << 20, kBlockBytes = 64u << 10, kBlocks = kRegion / kBlockBytes, kLayers = 16;
constexpr size_t kSteps = 1024;  // lines of K (and of V) a block

struct Layer {
  const int8_t* k;
  const int8_t* v;
};

// The offsets the two phases read, in their order.
struct Walk {
  uint32_t qk[kSteps], pv[kSteps];
  Walk() {
    for (size_t i = 0; i < kSteps; ++i) qk[i] = static_cast<uint32_t>(i * 64);  // memory order
    size_t i = 0;
    for (size_t h = 0; h < 8; ++h)
      for (size_t c = 0; c < 2; ++c)
        for (size_t t = 0; t < 64; ++t) pv[i++] = static_cast<uint32_t>(t * 1024 + h * 128 + c * 64);
  }
};
const Walk kWalk;

enum Sched { kKernel, kEven, kNone };

template <int HINT>
inline void pf(const int8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), static_cast<_mm_hint>(HINT));
}

// 8 * groups FMAs over the 8 chains.
inline void fmas(__m512 (&w)[8], const __m512 c, int groups) {
  for (int g = 0; g < groups; ++g)
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) w[i] = _mm512_fmadd_ps(w[i], c, c);
}

template <int HINT>
__attribute__((noinline)) float run(Layer L, size_t b0, size_t b1, bool hot, Sched s, int qk8, int sm8, int pv8) {
  __m512i sum[4];
  __m512 w[8];
  for (int i = 0; i < 4; ++i) sum[i] = _mm512_setzero_si512();
  for (int i = 0; i < 8; ++i) w[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 c = _mm512_set1_ps(0.5f);
  for (size_t b = b0; b < b1; ++b) {
    const size_t cur = hot ? 0 : b * kBlockBytes, nxt = hot ? 0 : ((b + 1) % kBlocks) * kBlockBytes;
    const int8_t *kc = L.k + cur, *vc = L.v + cur, *kn = L.k + nxt, *vn = L.v + nxt;
    size_t kp = 0, vp = 0;  // the next block's K and V lines fetched so far
    for (size_t i = 0; i < kSteps; ++i) {
      if (s == kKernel && (i & 1)) pf<HINT>(kn + 64 * kp++);
      if (s == kEven) pf<HINT>(kn + 64 * kp++);
      sum[i & 3] = _mm512_add_epi32(sum[i & 3], _mm512_load_si512(kc + kWalk.qk[i]));
      fmas(w, c, qk8);
    }
    fmas(w, c, sm8);
    for (size_t i = 0; i < kSteps; ++i) {
      if (s == kKernel) {  // V and the rest of K, three lines every two steps
        pf<HINT>(vn + 64 * vp++);
        if (i & 1) pf<HINT>(kn + 64 * kp++);
      }
      if (s == kEven) pf<HINT>(vn + 64 * vp++);
      sum[i & 3] = _mm512_add_epi32(sum[i & 3], _mm512_load_si512(vc + kWalk.pv[i]));
      fmas(w, c, pv8);
    }
  }
  __m512 r = w[0];
  for (int i = 1; i < 8; ++i) r = _mm512_add_ps(r, w[i]);
  return hsum(r) + hsum(_mm512_add_epi32(_mm512_add_epi32(sum[0], sum[1]), _mm512_add_epi32(sum[2], sum[3])));
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 40;
  const double pause = (argc > 2 ? std::atof(argv[2]) : 5.0) * 1e-3;
  const int qk8 = (argc > 3 ? std::atoi(argv[3]) : 8) / 8, sm8 = (argc > 4 ? std::atoi(argv[4]) : 5376) / 8,
            pv8 = (argc > 5 ? std::atoi(argv[5]) : 16) / 8;
  const int threads = argc > 6 ? std::atoi(argv[6]) : 1;
  const size_t total = 2 * kRegion * kLayers;
  void* mem = mmap(nullptr, total + kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* base = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(mem) + kRegion - 1) & ~uintptr_t(kRegion - 1));
  madvise(base, total, MADV_HUGEPAGE);
  for (size_t i = 0; i < total; ++i) base[i] = static_cast<int8_t>(i * 7);
  auto layer = [&](size_t l) { return Layer{base + 2 * l * kRegion, base + (2 * l + 1) * kRegion}; };
  struct Mode { Sched s; int hint; const char* name; };
  const Mode modes[] = {{kKernel, 0, "kernel L1"}, {kEven, 0, "even L1"}, {kKernel, 1, "kernel L2"},
                        {kEven, 1, "even L2"}, {kNone, 0, "none"}};
  constexpr size_t kModes = sizeof(modes) / sizeof(modes[0]);
  std::vector<double> cold[kModes], hot[kModes];
  float sink = 0;
  size_t next = 0;
  // One timed call: each thread its share of the blocks, after the pause.
  auto timed = [&](const Mode& m, Layer L, bool is_hot) {
    auto fn = m.hint == 0 ? run<_MM_HINT_T0> : run<_MM_HINT_T1>;
    return probe_util::timed_parallel(threads, pause, &sink, [&](size_t t, size_t n) {
      return fn(L, kBlocks * t / n, kBlocks * (t + 1) / n, is_hot, m.s, qk8, sm8, pv8);
    });
  };
  for (int r = 0; r < calls; ++r)
    for (size_t m = 0; m < kModes; ++m) {  // interleaved: every mode in every round
      cold[m].push_back(timed(modes[m], layer(next), false));
      next = (next + 1) % (kLayers - 1);  // the last layer is the hot calls'
      hot[m].push_back(timed(modes[m], layer(kLayers - 1), true));
    }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  std::printf("%d calls, %d thread(s), %.1f ms busy pause, FMAs a step Q.K^T %d / P.V %d, softmax %d a block; 4 MiB "
              "a call; median us (sink %g)\n", calls, threads, pause * 1e3, qk8 * 8, pv8 * 8, sm8 * 8,
              static_cast<double>(sink));
  std::printf("%-10s %8s %8s %9s %8s\n", "schedule", "cold", "hot", "cold-hot", "GB/s");
  for (size_t m = 0; m < kModes; ++m) {
    const double c = med(cold[m]), h = med(hot[m]);
    std::printf("%-10s %8.1f %8.1f %9.1f %8.1f\n", modes[m].name, c, h, c - h, 2 * kRegion / c / 1e3);
  }
  munmap(mem, total + kRegion);
  return 0;
}
