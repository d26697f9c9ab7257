// Does the order a decode step reads its K and V in decide how much of the memory time the
// hardware prefetcher hides? A decode item's reads alone, with a fixed amount of FMA work per
// 64-byte line standing in for the arithmetic, one thread.
//
//   g++ -O2 -mavx512f -mavx512bw tools/block_order_probe.cpp -o /tmp/block_order
//   /tmp/block_order [keys=2048] [burn_k=1] [burn_v=4] [rounds=40]
//
// The cache is llama3-8b's K and V in the [S, H, D] layout (8 KV heads, D 128: 1 KiB per key), on
// 2 MiB pages, read in 64-key blocks (64 KiB of K, then 64 KiB of V), as qsdpa's grouped decode
// item reads it. Per line read: burn_k (K) or burn_v (V) steps of four independent FMA chains
// (burn_k 1, burn_v 4 is about a llama3-8b decode block's Q.K^T and P.V at 1 thread on the Zen 4
// VM: ~2.4 and ~5.2 us a block). Orders:
//   K tiles  qsdpa's keys-outer Q.K^T: per 4-key tile, per head, the tile's 4 rows (1 KiB apart)
//   K rows   memory order
//   V tiles  qsdpa's P.V: per head, per 64-byte column tile, the block's 64 keys (1 KiB apart)
//   V rows   memory order (all heads of a key together: what P.V could only do with every head's
//            accumulators in memory, or from a copy of the block in that order)
//   2 keys   K and V both two keys at a time: per pair, per head (and per column tile for V) the
//            two rows, 1 KiB apart
//   BLOCKED  qsdpa's tile orders on a blocked layout, [S/64][H][64][D] (a block's 64 rows of one
//            head contiguous: 8 KiB a head), which a cache of qsdpa's own could use
// Prefetch: none (the hardware's alone), or the next block a line per step, evenly over the block's
// K and V steps (prefetcht0), as qsdpa spreads it. Also tried with qsdpa's orders: a demand load
// (touch) of the line 64, 256 or 1024 lines ahead in memory order each step, alone or with the
// prefetch; and a copy of the next block, in memory order, a line per step, into a buffer the
// tiles then read (with or without a prefetch of the block after it). Each is timed cold (a
// rotation of caches spanning 3x a 32 MiB LLC) and from cache (the same cache every call: L3),
// call by call; the read is a plain front-to-back read of the same bytes (the floor's kind).
//
// On the Zen 4 VM (AMD EPYC family 25 model 17), 2026-12-04, 1 thread, medians over 40 rounds
// (20 at 8192 keys), cold minus from cache in us. These ranges are from runs of this tool's first
// form, which computed each order's offsets inline (tables only for the two-key order); in the
// table form here, one run on a quiet host gave the same picture (2048 keys, burn 1/4: qsdpa's
// orders with the prefetch +53, without 3.96x the read; memory order without it +25, with it +42;
// blocked +79 / +59; two keys +291 / +47). A later run with the host busy (the read at 26 GB/s)
// did not separate them: memory order +78 to +81, qsdpa's +80 to +97.
//   2048 keys, burn 1/4 (read 113-133 us):  qsdpa's orders, next block +38 to +51 (no prefetch
//     +320 to +399: 4.5x the read); memory order, no prefetch +11 to +22 (next block +28 to +46);
//     K in memory order with V tiles, no prefetch, +154 to +226, K tiles with V in memory order
//     +200; touches 2.5-3.1x the read; the copy 3.4-3.7x (2.1-2.7x with the prefetch after it).
//     The blocked layout: +61 to +66 without software prefetch, +35 to +38 with it, 205-207 us from cache
//     against 196 (the [S, H, D] layout with qsdpa's orders).
//   2048 keys, burn 1/2: qsdpa's orders, next block +69 to +86; memory order, no prefetch +14 to +21;
//     blocked +75 and +60.
//   8192 keys, burn 1/4 (read 483 us): qsdpa's orders, next block +96; memory order, no prefetch +19.
// So on this core the hardware prefetcher hides a sequential stream of demand loads almost
// completely, better than the software prefetch hides qsdpa's orders, and only when both phases
// read in memory order: K's 4-row tiles alone, or V's per-head column walks alone, keep it out,
// as do both phases two keys at a time (+235 to +265 without software prefetch, +50 with it),
// and so do demand loads that run ahead in memory order, or a copy whose reads do (its buffer's
// reads between them are misses too). Neither of the kernel's orders can be memory order at its
// present cost: P.V would need all eight heads' 4 x 128 accumulators per key (its register tiles
// are 4 x 64), and Q.K^T's lane tiles take 4 keys of one head at a time (one key at a time
// needs a 16-lane reduction per key and row).
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr size_t kRow = 1024, kBlock = 64, kBlockBytes = kRow * kBlock, kLines = kBlockBytes / 64;

struct State {
  __m512 f0, f1, f2, f3;
  __m512i a;
};

__attribute__((always_inline)) inline void burn(State& s, int n) {
  const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  for (int k = 0; k < n; ++k) {
    s.f0 = _mm512_fmadd_ps(s.f0, m, c), s.f1 = _mm512_fmadd_ps(s.f1, m, c);
    s.f2 = _mm512_fmadd_ps(s.f2, m, c), s.f3 = _mm512_fmadd_ps(s.f3, m, c);
  }
}

// The orders a phase reads a block's 1024 lines in. Every order is made into a table of byte
// offsets before the timing, so that all cost the same per line (one load from L1).
enum Order { kTiles, kRows, kPairs, kBlocked };

// Offset of the i-th line Q.K^T reads.
size_t k_offset(Order o, size_t i) {
  switch (o) {
    case kRows: return i * 64;
    case kPairs: {  // per key pair, per head, the 2 rows' 2 lines
      const size_t grp = i / 32, head = i % 32 / 4, row = i % 4 / 2, half = i % 2;
      return (grp * 2 + row) * kRow + head * 128 + half * 64;
    }
    case kBlocked: {  // qsdpa's tile order on [S/64][H][64][D]
      const size_t tile = i / 64, head = i / 8 % 8, row = i / 2 % 4, half = i % 2;
      return head * 8192 + (tile * 4 + row) * 128 + half * 64;
    }
    default: {  // qsdpa's: per 4-key tile, per head, the 4 rows' 2 lines
      const size_t tile = i / 64, head = i / 8 % 8, row = i / 2 % 4, half = i % 2;
      return (tile * 4 + row) * kRow + head * 128 + half * 64;
    }
  }
}

// Offset of the i-th line P.V reads.
size_t v_offset(Order o, size_t i) {
  switch (o) {
    case kRows: return i * 64;
    case kPairs: {  // per key pair, per head, per column tile, the 2 rows
      const size_t grp = i / 32, head = i % 32 / 4, col = i % 4 / 2, row = i % 2;
      return (grp * 2 + row) * kRow + head * 128 + col * 64;
    }
    case kBlocked: {
      const size_t head = i / 128, col = i / 64 % 2, key = i % 64;
      return head * 8192 + key * 128 + col * 64;
    }
    default: {  // qsdpa's: per head, per 64-byte column tile, the block's 64 keys
      const size_t head = i / 128, col = i / 64 % 2, key = i % 64;
      return key * kRow + head * 128 + col * 64;
    }
  }
}

struct Config {
  const char* name;
  Order k, v;
  bool pf;       // the next block, a line per step of the same phase, into L1
  size_t touch;  // > 0: also a demand load of the line this far ahead in memory order, each step
  bool copy;     // the tiles read a copy of the block, made during the block before in memory order
  std::vector<uint32_t> koff, voff;
};

// One phase of a block: its 1024 lines read at `base + off[i]`, with the work per line. Step i also
// prefetches line i of `pf_next` and copies line i of `copy_from` to `copy_to` (when given).
// Written out here, not in a function of their own: GCC 12 deletes a call to a function that only
// prefetches.
__attribute__((always_inline)) inline void phase(State& s, uint32_t& tsum, const int8_t* base, const uint32_t* off,
                                                 int burn_steps, const int8_t* pf_next, const int8_t* copy_from,
                                                 int8_t* copy_to, size_t touch, const int8_t* end) {
  for (size_t i = 0; i < kLines; ++i) {
    if (pf_next) _mm_prefetch(pf_next + i * 64, _MM_HINT_T0);
    if (copy_from) _mm512_store_si512(copy_to + i * 64, _mm512_load_si512(copy_from + i * 64));
    if (touch && base + (i + touch) * 64 < end)
      tsum += static_cast<uint8_t>(*reinterpret_cast<const volatile int8_t*>(base + (i + touch) * 64));
    s.a = _mm512_add_epi64(s.a, _mm512_load_si512(base + off[i]));
    burn(s, burn_steps);
  }
}

// A decode item's reads of K and V over `keys` keys: block after block, K's lines then V's, in the
// config's orders, with the work per line.
alignas(4096) int8_t g_copy[2][2][kBlockBytes];
__attribute__((noinline)) void item(const Config& f, const int8_t* K, const int8_t* V, size_t keys, int bk, int bv) {
  State s{_mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_setzero_si512()};
  uint32_t tsum = 0;
  const size_t blocks = keys / kBlock;
  if (f.copy) std::memcpy(g_copy[0][0], K, kBlockBytes), std::memcpy(g_copy[0][1], V, kBlockBytes);
  for (size_t b = 0; b < blocks; ++b) {
    const int8_t* kb = f.copy ? g_copy[b % 2][0] : K + b * kBlockBytes;
    const int8_t* vb = f.copy ? g_copy[b % 2][1] : V + b * kBlockBytes;
    const int8_t* kn = K + (b + 1) * kBlockBytes;  // the next block (with a copy: the one being copied)
    const int8_t* vn = V + (b + 1) * kBlockBytes;
    const size_t fetched = b + (f.copy ? 2 : 1);  // the block the prefetch fetches (with a copy: the one after)
    const bool pf = f.pf && fetched < blocks, copy = f.copy && b + 1 < blocks;
    const int8_t* kp = pf ? K + fetched * kBlockBytes : nullptr;
    const int8_t* vp = pf ? V + fetched * kBlockBytes : nullptr;
    phase(s, tsum, kb, f.koff.data(), bk, kp, copy ? kn : nullptr, g_copy[(b + 1) % 2][0], f.touch, K + keys * kRow);
    phase(s, tsum, vb, f.voff.data(), bv, vp, copy ? vn : nullptr, g_copy[(b + 1) % 2][1], f.touch, V + keys * kRow);
  }
  // The results, kept: the loads and FMAs are the point.
  __asm__ volatile("" ::"r"(tsum));
  __asm__ volatile("" ::"v"(s.a), "v"(s.f0), "v"(s.f1), "v"(s.f2), "v"(s.f3));
}

__attribute__((noinline)) void read(const int8_t* K, const int8_t* V, size_t bytes) {
  __m512i a = _mm512_setzero_si512(), b = a;
  for (const int8_t* p : {K, V})
    for (size_t i = 0; i < bytes; i += 128) {
      a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
      b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
    }
  __asm__ volatile("" ::"v"(a), "v"(b));
}

}  // namespace

int main(int argc, char** argv) {
  const size_t keys = argc > 1 ? std::strtoul(argv[1], nullptr, 10) / kBlock * kBlock : 2048;
  const int bk = argc > 2 ? std::atoi(argv[2]) : 1, bv = argc > 3 ? std::atoi(argv[3]) : 4;
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 40;
  if (keys < 2 * kBlock || bk < 0 || bv < 0 || rounds < 1) {
    std::fprintf(stderr, "usage: %s [keys>=128] [burn_k>=0] [burn_v>=0] [rounds>=1]\n", argv[0]);
    return 2;
  }
  const size_t bytes = keys * kRow, page = size_t{2} << 20, alloc = (bytes + page - 1) / page * page;
  const size_t layers = std::max<size_t>(4, 3 * (size_t{32} << 20) / (2 * bytes) + 1);
  std::vector<int8_t*> ks, vs;
  for (size_t i = 0; i < 2 * layers; ++i) {
    auto* p = static_cast<int8_t*>(std::aligned_alloc(page, alloc));
    madvise(p, alloc, MADV_HUGEPAGE);
    std::memset(p, static_cast<int>(i), alloc);
    (i % 2 ? vs : ks).push_back(p);
  }
  std::vector<Config> configs = {{"K tiles, V tiles, no prefetch", kTiles, kTiles, false, 0, false},
                                 {"K tiles, V tiles, next block  ", kTiles, kTiles, true, 0, false},
                                 {"K rows,  V tiles, no prefetch", kRows, kTiles, false, 0, false},
                                 {"K tiles, V rows,  no prefetch", kTiles, kRows, false, 0, false},
                                 {"K rows,  V rows,  no prefetch", kRows, kRows, false, 0, false},
                                 {"K rows,  V rows,  next block  ", kRows, kRows, true, 0, false},
                                 {"tiles, touch 64 lines ahead   ", kTiles, kTiles, false, 64, false},
                                 {"tiles, touch 256 lines ahead  ", kTiles, kTiles, false, 256, false},
                                 {"tiles, touch 1024 lines ahead ", kTiles, kTiles, false, 1024, false},
                                 {"tiles, touch 256 + next block ", kTiles, kTiles, true, 256, false},
                                 {"tiles from a copy             ", kTiles, kTiles, false, 0, true},
                                 {"tiles from a copy, pf after   ", kTiles, kTiles, true, 0, true},
                                 {"BLOCKED tiles, no prefetch    ", kBlocked, kBlocked, false, 0, false},
                                 {"BLOCKED tiles, next block     ", kBlocked, kBlocked, true, 0, false},
                                 {"K, V 2 keys at a time, no pf  ", kPairs, kPairs, false, 0, false},
                                 {"K, V 2 keys at a time, next   ", kPairs, kPairs, true, 0, false}};
  for (Config& f : configs)
    for (size_t i = 0; i < kLines; ++i) {
      f.koff.push_back(static_cast<uint32_t>(k_offset(f.k, i)));
      f.voff.push_back(static_cast<uint32_t>(v_offset(f.v, i)));
    }
  const size_t n = configs.size();
  std::vector<std::vector<double>> cold(n), hot(n);
  std::vector<double> rd;
  size_t next = 1;
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < n; ++c) {
      const size_t l = next++ % (layers - 1) + 1;  // layer 0 is the from-cache one
      double t0 = now();
      item(configs[c], ks[l], vs[l], keys, bk, bv);
      cold[c].push_back(now() - t0);
      item(configs[c], ks[0], vs[0], keys, bk, bv);  // into cache
      t0 = now();
      item(configs[c], ks[0], vs[0], keys, bk, bv);
      hot[c].push_back(now() - t0);
    }
    const size_t l = next++ % (layers - 1) + 1;
    const double t0 = now();
    read(ks[l], vs[l], bytes);
    rd.push_back(now() - t0);
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double r = median(rd);
  std::printf("keys %zu, burn K %d V %d, %d rounds, %zu caches in rotation: read %.0f us (%.1f GB/s)\n", keys, bk, bv,
              rounds, layers - 1, r * 1e6, 2.0 * static_cast<double>(bytes) / r / 1e9);
  std::printf("  %-30s %9s %9s %9s %9s\n", "order, prefetch", "cold us", "x read", "cache us", "cold-cache");
  for (size_t c = 0; c < n; ++c) {
    const double tc = median(cold[c]), th = median(hot[c]);
    std::printf("  %-30s %9.0f %9.2f %9.0f %9.0f\n", configs[c].name, tc * 1e6, tc / r, th * 1e6, (tc - th) * 1e6);
  }
  return 0;
}
