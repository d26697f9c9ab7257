// How fast can one core bring a cold cache in while it computes, by which kind of fetch? A decode
// call must read its K and V (4 MiB at 2048 keys for llama3-8b) while it does ~2x a plain read's
// time of arithmetic; this times stand-ins for the two with nothing else: one 512-bit load of
// every 64-byte line and F FMAs per line (the arithmetic's pace), over 4 MiB "layers" in rotation
// (16 of them on 2 MiB pages: 64 MiB, twice this VM's L3), on one thread or two.
//
//   g++ -O2 -std=c++17 -fopenmp -mavx512f tools/stream_mlp_probe.cpp -o /tmp/stream_mlp
//   /tmp/stream_mlp [calls=60] [pause_ms=5] [threads=1] [set=base]
//
// threads=2: each thread takes half of each layer's blocks (a 2-thread decode's KV split), after
// the pause on both; no sleep or wake in between (the threads wait for each other by spinning).
//
// Orders (each a 128 KiB block at a time, 32 blocks a layer, like the kernel's all-heads blocks of
// 64 keys: 64 "keys" of 1 KiB K and 1 KiB V, 8 "heads" of 128 bytes each):
//   seq        every line in address order (what the floor's read does, plus the work)
//   heads      each head's two K lines of all 64 keys, head by head, then V's the same way
//   kv64       K in address order (the kernel's keys-outer Q.K^T), then V head by head (its P.V)
//   kv16, kv4  K in address order, then V 16 or 4 keys at a time, head by head within them
// Fetch of the next block, evenly over this block's lines (the kernel's scheme), or none:
//   none, pf0 (prefetcht0: into L1), pf1 (prefetcht1: into L2)
//   q1, half, q3  pf1 of only the first 16, 32 or 48 lines of each 4 KiB page (the hardware's
//              streamer left to fetch the rest of the page)
//   touch      a demand load of the line instead of a prefetch
//   copy       the line copied, in address order, into a buffer that the next block's walk reads
//              (the first block copied before the walk)
// Sets of modes (set=): base, F 0/4/8/12 x seq/heads x none/pf0/pf1; intel, F 12/24 x seq/kv64/
// kv16/kv4 x none/pf1, and kv64 with q1/half/q3/touch/copy.
// Printed per (order, fetch, F): the median time of a call after the pause and its GB/s; "hot" is
// the same call on one 128 KiB block over and over (L2), the work's own time. A fetch that kept up
// would make cold = hot; what it cannot hide is cold - hot.
//
// On the Zen 4 VM (AMD EPYC family 25 model 17), 2026-12-07 04:20-04:45 UTC, two sets of runs (no
// pause and 5 ms, 1 and 2 threads), medians in us, cold (cold - hot). The plain read (seq, none, F
// 0): 167-202 at 1 thread (21-25 GB/s), 99-114 at 2 (37-42 GB/s). The work alone (hot) at F 8 takes
// about the read's time (152-163 at 1 thread, 77-87 at 2), at F 12 ~1.35x it (223-234, 111-122).
// The kernel's order (heads):
//   prefetch into L1   F 8   1 thread 189-359 (+36 to +204), 2 threads 109-136 (+30 to +52)
//                      F 12  1 thread 240-347 (+16 to +118), 2 threads 124-141 (+12 to +28)
//   into L2            F 8   +12 to +63 and +16 to +39;  F 12  +7 to +23 and +7 to +17
//   none               1.5-2.4x the read
// In three of the four 1-thread runs the L1 form left +16 to +42 unhidden (16-22 GB/s while
// computing); in the fourth, with the host busy (the read at 20.8 GB/s), +118 and +204 where the
// L2 form left +23 and +63: what one core's prefetches into L1 bring in moves with the memory's
// latency. Address order without any software prefetch (seq, none) hid all but 2-60 us.
//
// On the Intel Xeon VM (KVM family 6 model 167, two 512-bit FMA pipes, 2 MiB L2), 2026-12-07 ~11:50
// UTC, one run, 1 thread, 5 ms pause: the plain read 273.9 us (15.3 GB/s); the work alone 95-102
// at F 8, 128-134 at F 12 (two FMA pipes: F 12 is under half the read's time here). Cold (cold -
// hot): heads pf1 F 8 311.5 (+210), F 12 355.5 (+222); heads pf0 F 12 420.2 (+287); heads none
// F 12 469.3 (+342); seq none F 8 326.8 (+232), F 12 293.7 (+164).
// set=intel (and builds of its modes before it was one), the same VM ~12:10-12:40 UTC, five runs
// (30-60 calls, 1 thread, 5 ms pause; F 24 is about the kernel's own hot call, 233-267 us). Cold
// (cold - hot) at F 24: seq none 323.5-357.6 (+83 to +107); seq pf1 435.2-459.7 (+196 to +203);
// kv64 pf1 462.8-492.0 (+207 to +219), kv16 and kv4 pf1 the same (+203 to +227); kv64 none
// 596-656 (+344 to +388); kv64 touch 570.9-571.3 (+294, +316); kv64 copy 417.5-438.3 (+96,
// +123, but its hot call 315-321 us: the copy's stores); kv64 q1 482.8-490.8, half 406.2-429.2
// (+121 to +145), q3 392.8-399.0 (+109 to +118). At F 12 the pf1 forms left +213 to +229 and
// seq none +211 to +224. So on this core the next block's software prefetch into L2 leaves ~200
// us of a ~270 us read unhidden whatever the order, where an address-order stream with no
// software prefetch hides all but 83-107 us of it at the kernel's pace; grouping V by 4 or 16
// keys does not bring that back, only whole keys in address order (seq) do. In the kernel
// (tools/ab_decode.py, paired B/A, 2048 keys, cold after the pause), prefetching only part of
// each page was slower (the first 3/4: 1.059 at 1 thread, 1.061 at 2; half: 1.200, 1.149), as
// were no software prefetch of K at all (1.256, 1.243) and only the even line of each pair
// (1.585, 1.444): the probe's q3 gain did not carry over.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_util.h"

namespace {

using probe_util::hsum;

constexpr size_t kLayer = 4u << 20, kBlock = 128u << 10, kLines = kBlock / 64, kLayers = 16;

enum Order { kSeq, kHeads, kKv64, kKv16, kKv4 };
enum Fetch { kNone, kPf0, kPf1, kQ1, kHalf, kQ3, kTouch, kCopy };

// kCopy: the block being walked and the next one (each thread its own pair).
alignas(64) thread_local int8_t g_copy[2][kBlock];

// Offset of the block's i-th line in the order's walk.
inline size_t line_at(Order o, size_t i) {
  if (o == kSeq) return i * 64;
  if (o != kHeads) {
    const size_t g = o == kKv64 ? 64 : o == kKv16 ? 16 : 4, r = i % 1024;
    if (i < 1024) return (r / 16) * 2048 + ((r % 16) / 2) * 128 + (r % 2) * 64;  // K: address order
    const size_t grp = r / (16 * g), head = (r % (16 * g)) / (2 * g), key = grp * g + (r % (2 * g)) / 2;
    return key * 2048 + 1024 + head * 128 + (r % 2) * 64;
  }
  const size_t half = i / 1024, r = i % 1024;  // K lines first, then V's
  const size_t head = r / 128, key = (r % 128) / 2, piece = r % 2;
  return key * 2048 + half * 1024 + head * 128 + piece * 64;
}

template <Fetch FE, int F>
__attribute__((noinline)) float run_layer(const int8_t* layer, size_t b0, size_t b1, size_t blocks, Order o,
                                          bool same_block) {
  // The loaded lines go into 4 sums; the work is F FMAs a line over 8 chains of their own (one a
  // cycle: independent of the loads, so the core runs ahead of a late line as far as it can).
  __m512i sum[4];
  __m512 work[8];
  for (int i = 0; i < 4; ++i) sum[i] = _mm512_setzero_si512();
  for (int i = 0; i < 8; ++i) work[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 c = _mm512_set1_ps(0.5f);  // work -> 1: no overflow, no denormals
  std::vector<uint32_t> walk(kLines);
  for (size_t i = 0; i < kLines; ++i) walk[i] = static_cast<uint32_t>(line_at(o, i));
  if constexpr (FE == kCopy) std::memcpy(g_copy[b0 % 2], same_block ? layer : layer + b0 * kBlock, kBlock);
  for (size_t b = b0; b < b1; ++b) {
    const int8_t* blk = FE == kCopy ? g_copy[b % 2] : same_block ? layer : layer + b * kBlock;
    const int8_t* next = same_block ? layer : layer + ((b + 1) % blocks) * kBlock;
    int8_t* copy_to = g_copy[(b + 1) % 2];
    for (size_t i = 0; i < kLines; i += 8) {
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        const int8_t* line = next + (i + u) * 64;
        const size_t in_page = (i + u) % 64;  // the line's place in its 4 KiB page
        if constexpr (FE == kPf0) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
        if constexpr (FE == kPf1) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
        if constexpr (FE == kQ1) if (in_page < 16) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
        if constexpr (FE == kHalf) if (in_page < 32) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
        if constexpr (FE == kQ3) if (in_page < 48) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
        if constexpr (FE == kTouch) sum[(u + 1) % 4] = _mm512_xor_si512(sum[(u + 1) % 4], _mm512_load_si512(line));
        if constexpr (FE == kCopy) if (b + 1 < b1) _mm512_store_si512(copy_to + (i + u) * 64, _mm512_load_si512(line));
        sum[u % 4] = _mm512_add_epi32(sum[u % 4], _mm512_load_si512(blk + walk[i + u]));
#pragma GCC unroll 32
        for (int f = 0; f < F; ++f) work[(u * F + f) % 8] = _mm512_fmadd_ps(work[(u * F + f) % 8], c, c);
      }
    }
  }
  __m512 s = work[0];
  for (int i = 1; i < 8; ++i) s = _mm512_add_ps(s, work[i]);
  return hsum(s) + hsum(_mm512_add_epi32(_mm512_add_epi32(sum[0], sum[1]), _mm512_add_epi32(sum[2], sum[3])));
}

using Fn = float (*)(const int8_t*, size_t, size_t, size_t, Order, bool);

template <int F>
Fn pick(Fetch f) {
  switch (f) {
    case kPf0: return run_layer<kPf0, F>;
    case kPf1: return run_layer<kPf1, F>;
    case kQ1: return run_layer<kQ1, F>;
    case kHalf: return run_layer<kHalf, F>;
    case kQ3: return run_layer<kQ3, F>;
    case kTouch: return run_layer<kTouch, F>;
    case kCopy: return run_layer<kCopy, F>;
    default: return run_layer<kNone, F>;
  }
}

Fn pick(Fetch f, int F) {
  switch (F) {
    case 0: return pick<0>(f);
    case 4: return pick<4>(f);
    case 8: return pick<8>(f);
    case 24: return pick<24>(f);
    default: return pick<12>(f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 60;
  const double pause = (argc > 2 ? std::atof(argv[2]) : 5.0) * 1e-3;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const size_t total = kLayer * kLayers;
  void* mem = mmap(nullptr, total + (2u << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* base = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(mem) + (2u << 20) - 1) & ~uintptr_t((2u << 20) - 1));
  madvise(base, total, MADV_HUGEPAGE);
  for (size_t i = 0; i < total; ++i) base[i] = static_cast<int8_t>(i * 7);
  const std::string set = argc > 4 ? argv[4] : "base";
  if (set != "base" && set != "intel") {
    std::fprintf(stderr, "set: base or intel\n");
    return 2;
  }
  struct Mode { Order o; Fetch f; int F; const char* name; };
  std::vector<Mode> modes;
  const char* fname[] = {"none", "pf0", "pf1", "q1", "half", "q3", "touch", "copy"};
  if (set == "base") {
    for (int F : {0, 4, 8, 12})
      for (Order o : {kSeq, kHeads})
        for (Fetch f : {kNone, kPf0, kPf1}) modes.push_back({o, f, F, fname[f]});
  } else {
    for (int F : {12, 24}) {
      for (Order o : {kSeq, kKv64, kKv16, kKv4})
        for (Fetch f : {kNone, kPf1}) modes.push_back({o, f, F, fname[f]});
      for (Fetch f : {kQ1, kHalf, kQ3, kTouch, kCopy}) modes.push_back({kKv64, f, F, fname[f]});
    }
  }
  const char* oname[] = {"seq", "heads", "kv64", "kv16", "kv4"};
  std::vector<std::vector<double>> cold(modes.size()), hot(modes.size());
  float sink = 0;
  size_t layer = 0;
  const size_t blocks = kLayer / kBlock;
  // One timed call: each thread its share of the blocks, after the pause.
  auto timed = [&](Fn fn, const int8_t* p, Order o, bool same) {
    return probe_util::timed_parallel(threads, pause, &sink, [&](size_t t, size_t n) {
      return fn(p, blocks * t / n, blocks * (t + 1) / n, blocks, o, same);
    });
  };
  for (int c = 0; c < calls; ++c)
    for (size_t m = 0; m < modes.size(); ++m) {  // interleaved: every mode in every round
      const Fn fn = pick(modes[m].f, modes[m].F);
      cold[m].push_back(timed(fn, base + layer * kLayer, modes[m].o, false));
      layer = (layer + 1) % (kLayers - 1);  // the last layer is the hot calls'
      hot[m].push_back(timed(fn, base + (kLayers - 1) * kLayer, modes[m].o, true));  // one block, in L2
    }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  std::printf("%d calls, %d thread(s), %.1f ms busy pause; 4 MiB a call, median us (GB/s); sink %g\n", calls, threads,
              pause * 1e3, static_cast<double>(sink));
  std::printf("%-6s %-5s %3s %16s %16s %10s\n", "order", "fetch", "F", "cold", "hot (L2)", "cold-hot");
  for (size_t m = 0; m < modes.size(); ++m) {
    const double c = med(cold[m]), h = med(hot[m]);
    std::printf("%-6s %-5s %3d %8.1f (%5.1f) %8.1f (%5.1f) %10.1f\n", oname[modes[m].o],
                modes[m].name, modes[m].F, c, kLayer / c / 1e3, h, kLayer / h / 1e3, c - h);
  }
  munmap(mem, total + (2u << 20));
  return 0;
}
