// Does a software prefetch land? Prefetch a cold chunk line by line, with GAP empty loop steps
// between two prefetches, wait, then time a read of the chunk: a read at cache speed means the
// lines came in; at DRAM speed, the prefetches were dropped.
//
//   g++ -O2 -mavx2 tools/prefetch_drop.cpp -o /tmp/prefetch_drop
//   /tmp/prefetch_drop             # chunk 131072 B, hint t1, gaps 0 5 10 20 40, waits 100 us and 0
//   /tmp/prefetch_drop 16384 0     # chunk bytes, hint (0: t0, 1: t1, 2: t2, 3: nta, -1: no prefetch)
//
// On the Zen 5 VM of 2026-12-01 (docs/benchmarks-history.md): with no gap, 128 KiB of prefetcht1 left most
// lines uncached (the read after ran at 32-46 GB/s, no prefetch at all 26-32); with ~2-3 ns
// between prefetches they landed (60-110 GB/s; a read of cached lines: 120-136). So a kernel's
// prefetches must come at an even pace, not in a burst.
// On the Intel Xeon VM of 2026-12-02 nothing is dropped: with no gap, the loop of 2048 prefetcht1
// itself took 8.2 us (16 GB/s, the core's memory bandwidth: a prefetch waits for a free miss
// buffer) and the read after ran at 103-122 GB/s; with gaps, 109-190 GB/s. There a burst of
// prefetches stalls the code that issues it instead.
// On the Zen 4 VM of 2026-12-03, as on Zen 5: with no gap (2048 prefetcht1 in 2.75 us) the read
// after ran at 30-31 GB/s, no prefetch 17-23; gap 5 (2.4 ns apart) 48-73 GB/s, gap 10 and more
// (3.6 ns and up, under 18 GB/s of requests) 72-115, all landed. (Issuing each of the decode
// kernel's prefetches a second time, 16 or 64 steps later, made cold decode 4-8% slower there.)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The chunk's lines, one prefetch each, `gap` empty loop steps apart. A template and not a switch
// on the hint inside the loop: GCC 12 treats a call to a function that only prefetches as free of
// side effects and deletes it.
template <int kHint>
void prefetch_lines(const int8_t* p, size_t bytes, int gap) {
  for (size_t o = 0; o < bytes; o += 64) {
    for (int g = 0; g < gap; ++g) __asm__ volatile("" ::: "memory");
    _mm_prefetch(reinterpret_cast<const char*>(p + o), static_cast<_mm_hint>(kHint));
  }
}

// Median over chunks 4 chunks apart in a 256 MiB buffer (the hardware prefetchers get no help from
// the previous chunk), after a 256 MiB pass over another buffer evicts the first.
void run(size_t chunk, int hint, int gap, double wait_s, const int8_t* buf, const int8_t* evict, size_t total) {
  volatile long sink = 0;
  for (size_t i = 0; i < total; i += 64) sink += evict[i];
  std::vector<double> prefetch_us, read_us;
  for (size_t c = 0; c + chunk <= total && read_us.size() < 300; c += 4 * chunk) {
    const int8_t* p = buf + c;
    const double t_pf = now();
    switch (hint) {
      case 0: prefetch_lines<_MM_HINT_T0>(p, chunk, gap); break;
      case 1: prefetch_lines<_MM_HINT_T1>(p, chunk, gap); break;
      case 2: prefetch_lines<_MM_HINT_T2>(p, chunk, gap); break;
      case 3: prefetch_lines<_MM_HINT_NTA>(p, chunk, gap); break;
      default: break;
    }
    for (const double t = now(); now() - t < wait_s;) {
    }
    const double t0 = now();
    __m256i acc = _mm256_setzero_si256();
    for (size_t o = 0; o < chunk; o += 64)
      acc = _mm256_add_epi32(acc, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + o)));
    const double t1 = now();
    sink += _mm256_extract_epi32(acc, 0);
    prefetch_us.push_back((t0 - t_pf) * 1e6);
    read_us.push_back((t1 - t0) * 1e6);
  }
  std::sort(prefetch_us.begin(), prefetch_us.end());
  std::sort(read_us.begin(), read_us.end());
  const double r = read_us[read_us.size() / 2];
  std::printf("chunk %7zu B  hint %2d  gap %3d  wait %5.0f us: prefetch loop + wait %7.2f us, read %6.2f us = %6.1f GB/s\n",
              chunk, hint, gap, wait_s * 1e6, prefetch_us[prefetch_us.size() / 2], r, chunk / r / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t total = 256ul << 20;
  const size_t chunk = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 131072;
  const int hint = argc > 2 ? std::atoi(argv[2]) : 1;
  if (chunk < 64 || chunk > (16u << 20)) {
    std::fprintf(stderr, "chunk must be 64 B to 16 MiB\n");
    return 2;
  }
  auto* buf = static_cast<int8_t*>(std::aligned_alloc(4096, total));
  auto* evict = static_cast<int8_t*>(std::aligned_alloc(4096, total));
  std::memset(buf, 1, total);
  std::memset(evict, 2, total);
  for (double wait : {100e-6, 0.0})
    for (int gap : {0, 5, 10, 20, 40}) run(chunk, hint, gap, wait, buf, evict, total);
  run(chunk, -1, 0, 100e-6, buf, evict, total);
  std::free(buf);
  std::free(evict);
  return 0;
}
