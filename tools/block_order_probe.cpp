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
// (20 at 8192 keys), cold minus from cache in us:
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

// Byte offset of the i-th line a phase reads, in the given order.
// A blocked cache layout instead, [S/64][H][64][D]: a block's rows of one head contiguous.
int g_blocked = 0;
// > 0: K and V both R keys at a time: per R-key group, per head (and per column tile for V), the
// group's R rows, 1 KiB apart (qsdpa's K tiles are R = 4 with V tiles of 64).
size_t g_group = 0;
inline size_t k_offset(bool rows, size_t i) {
  if (g_group) {
    const size_t R = g_group, grp = i / (16 * R), head = i % (16 * R) / (2 * R), row = i % (2 * R) / 2, half = i % 2;
    return (grp * R + row) * kRow + head * 128 + half * 64;
  }
  if (g_blocked) {  // qsdpa's tile order on the blocked layout
    const size_t tile = i / 64, head = (i / 8) % 8, row = (i / 2) % 4, half = i % 2;
    return head * 8192 + (tile * 4 + row) * 128 + half * 64;
  }
  if (rows) return i * 64;
  const size_t tile = i / 64, head = (i / 8) % 8, row = (i / 2) % 4, half = i % 2;  // 4 keys x 8 heads x 4 rows x 2
  return (tile * 4 + row) * kRow + head * 128 + half * 64;
}
inline size_t v_offset(bool rows, size_t i) {
  if (g_group) {
    const size_t R = g_group, grp = i / (16 * R), head = i % (16 * R) / (2 * R), col = i % (2 * R) / R, row = i % R;
    return (grp * R + row) * kRow + head * 128 + col * 64;
  }
  if (g_blocked) {
    const size_t head = i / 128, col = (i / 64) % 2, key = i % 64;
    return head * 8192 + key * 128 + col * 64;
  }
  if (rows) return i * 64;
  const size_t head = i / 128, col = (i / 64) % 2, key = i % 64;  // 8 heads x 2 column tiles x 64 keys
  return key * kRow + head * 128 + col * 64;
}

// A macro, not a function: GCC 12 deletes a call to a function that only prefetches.
#define PREFETCH_STEP()                                                                                           \
  do {                                                                                                            \
    if (pf && more) _mm_prefetch(step < kLines ? kn + step * 64 : vn + (step - kLines) * 64, _MM_HINT_T0);        \
    ++step;                                                                                                       \
  } while (0)

void item_copy(const int8_t* K, const int8_t* V, size_t keys, int bk, int bv, bool pf);

// The lines' offsets from tables made before the timing (the R-key groups: their offsets cost
// divisions by a run-time R, which would otherwise set the pace).
uint32_t g_koff[kLines], g_voff[kLines];
__attribute__((noinline)) void item_table(const int8_t* K, const int8_t* V, size_t keys, int bk, int bv, bool pf) {
  State s{_mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_setzero_si512()};
  const size_t blocks = keys / kBlock;
  for (size_t b = 0; b < blocks; ++b) {
    const int8_t* kb = K + b * kBlockBytes;
    const int8_t* vb = V + b * kBlockBytes;
    const int8_t* kn = kb + kBlockBytes;
    const int8_t* vn = vb + kBlockBytes;
    const bool more = b + 1 < blocks;
    size_t step = 0;
    for (size_t i = 0; i < kLines; ++i) {
      PREFETCH_STEP();
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(kb + g_koff[i]));
      burn(s, bk);
    }
    for (size_t i = 0; i < kLines; ++i) {
      PREFETCH_STEP();
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(vb + g_voff[i]));
      burn(s, bv);
    }
  }
  __asm__ volatile("" ::"v"(s.a), "v"(s.f0), "v"(s.f1), "v"(s.f2), "v"(s.f3));
}

__attribute__((noinline)) void item(const int8_t* K, const int8_t* V, size_t keys, int bk, int bv, bool krows,
                                    bool vrows, bool pf, size_t touch) {
  if (touch == 1) return item_copy(K, V, keys, bk, bv, pf);
  if (g_group) return item_table(K, V, keys, bk, bv, pf);
  const int8_t* kend = K + keys * kRow;
  const int8_t* vend = V + keys * kRow;
  uint32_t tsum = 0;
  State s{_mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_setzero_si512()};
  const size_t blocks = keys / kBlock;
  for (size_t b = 0; b < blocks; ++b) {
    const int8_t* kb = K + b * kBlockBytes;
    const int8_t* vb = V + b * kBlockBytes;
    const int8_t* kn = kb + kBlockBytes;
    const int8_t* vn = vb + kBlockBytes;
    const bool more = b + 1 < blocks;
    size_t step = 0;
    for (size_t i = 0; i < kLines; ++i) {
      PREFETCH_STEP();
      if (touch && kb + (i + touch) * 64 < kend) tsum += static_cast<uint8_t>(*reinterpret_cast<const volatile int8_t*>(kb + (i + touch) * 64));
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(kb + k_offset(krows, i)));
      burn(s, bk);
    }
    for (size_t i = 0; i < kLines; ++i) {
      PREFETCH_STEP();
      if (touch && vb + (i + touch) * 64 < vend) tsum += static_cast<uint8_t>(*reinterpret_cast<const volatile int8_t*>(vb + (i + touch) * 64));
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(vb + v_offset(vrows, i)));
      burn(s, bv);
    }
  }
  // The results, kept: the loads and FMAs are the point.
  __asm__ volatile("" ::"r"(tsum));
  __asm__ volatile("" ::"v"(s.a), "v"(s.f0), "v"(s.f1), "v"(s.f2), "v"(s.f3));
}

// The next block's K and V copied in memory order (a line of each per step of this block) into a
// buffer the block's tiles then read: the only reads of the cache are one sequential stream.
alignas(4096) int8_t g_copy[2][2][kBlockBytes];
__attribute__((noinline)) void item_copy(const int8_t* K, const int8_t* V, size_t keys, int bk, int bv, bool pf) {
  State s{_mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_set1_ps(1), _mm512_setzero_si512()};
  const size_t blocks = keys / kBlock;
  for (size_t i = 0; i < kLines; ++i) {
    _mm512_store_si512(g_copy[0][0] + i * 64, _mm512_load_si512(K + i * 64));
    _mm512_store_si512(g_copy[0][1] + i * 64, _mm512_load_si512(V + i * 64));
  }
  for (size_t b = 0; b < blocks; ++b) {
    const int8_t* kb = g_copy[b % 2][0];
    const int8_t* vb = g_copy[b % 2][1];
    int8_t* kc = g_copy[(b + 1) % 2][0];
    int8_t* vc = g_copy[(b + 1) % 2][1];
    const int8_t* kn = K + (b + 1) * kBlockBytes;
    const int8_t* vn = V + (b + 1) * kBlockBytes;
    const bool more = b + 1 < blocks;
    const int8_t* kp = kn + kBlockBytes;  // prefetch: the block after the copied one
    const int8_t* vp = vn + kBlockBytes;
    const bool more2 = b + 2 < blocks;
    for (size_t i = 0; i < kLines; ++i) {
      if (more) _mm512_store_si512(kc + i * 64, _mm512_load_si512(kn + i * 64));
      if (pf && more2) _mm_prefetch(kp + i * 64, _MM_HINT_T1);
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(kb + k_offset(false, i)));
      burn(s, bk);
    }
    for (size_t i = 0; i < kLines; ++i) {
      if (more) _mm512_store_si512(vc + i * 64, _mm512_load_si512(vn + i * 64));
      if (pf && more2) _mm_prefetch(vp + i * 64, _MM_HINT_T1);
      s.a = _mm512_add_epi64(s.a, _mm512_load_si512(vb + v_offset(false, i)));
      burn(s, bv);
    }
  }
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
  struct Config {
    const char* name;
    bool krows, vrows, pf;
    size_t touch;
  };
  const Config configs[] = {{"K tiles, V tiles, no prefetch", false, false, false, 0},
                            {"K tiles, V tiles, next block  ", false, false, true, 0},
                            {"K rows,  V tiles, no prefetch", true, false, false, 0},
                            {"K tiles, V rows,  no prefetch", false, true, false, 0},
                            {"K rows,  V rows,  no prefetch", true, true, false, 0},
                            {"K rows,  V rows,  next block  ", true, true, true, 0},
                            {"tiles, touch 64 lines ahead   ", false, false, false, 64},
                            {"tiles, touch 256 lines ahead  ", false, false, false, 256},
                            {"tiles, touch 1024 lines ahead ", false, false, false, 1024},
                            {"tiles, touch 256 + next block ", false, false, true, 256},
                            {"tiles from a copy             ", false, false, false, 1},
                            {"tiles from a copy, pf after   ", false, false, true, 1},
                            {"BLOCKED tiles, no prefetch    ", false, false, false, 0},
                            {"BLOCKED tiles, next block     ", false, false, true, 0},
                            {"K, V 2 keys at a time, no pf  ", false, false, false, 0},
                            {"K, V 2 keys at a time, next   ", false, false, true, 0}};
  constexpr int kConfigs = 16;
  std::vector<double> cold[kConfigs], hot[kConfigs], rd;
  size_t next = 1;
  for (int r = 0; r < rounds; ++r) {
    for (int c = 0; c < kConfigs; ++c) {
      const Config& f = configs[c];
      g_blocked = c >= kConfigs - 4 && c < kConfigs - 2;
      g_group = c >= kConfigs - 2 ? 2 : 0;  // the last two
      if (g_group)
        for (size_t i = 0; i < kLines; ++i)
          g_koff[i] = static_cast<uint32_t>(k_offset(false, i)), g_voff[i] = static_cast<uint32_t>(v_offset(false, i));
      size_t l = next++ % (layers - 1) + 1;  // layer 0 is the from-cache one
      double t0 = now();
      item(ks[l], vs[l], keys, bk, bv, f.krows, f.vrows, f.pf, f.touch);
      cold[c].push_back(now() - t0);
      item(ks[0], vs[0], keys, bk, bv, f.krows, f.vrows, f.pf, f.touch);  // into cache
      t0 = now();
      item(ks[0], vs[0], keys, bk, bv, f.krows, f.vrows, f.pf, f.touch);
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
  for (int c = 0; c < kConfigs; ++c) {
    const double tc = median(cold[c]), th = median(hot[c]);
    std::printf("  %-30s %9.0f %9.2f %9.0f %9.0f\n", configs[c].name, tc * 1e6, tc / r, th * 1e6, (tc - th) * 1e6);
  }
  return 0;
}
