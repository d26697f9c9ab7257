// Generated from templates/flash_attention.cpp.j2 for ISA 'avx512_vnni' by `python -m codegen` — do not edit.
// softmax(scale * Q.K^T + mask) . V over an int8 K/V cache, int8 or fp32 Q
// kv_block = 256 keys, up to 64 query rows per work item; Q.K^T tile 4 rows x
// 4 keys, P.V tile 4 rows x 4x16 f32.
//
// Work item = (batch, KV head, block of query positions, KV split). Its rows are every query head
// of the KV head's group at every position of the block, so each int8 K/V byte is loaded and
// widened once per row tile, not once per query head. Per KV block:
//   S = scale * Q.K^T: int8 query rows are shifted by their zero point once per call into int16
//     (q - zq), so d = sum (q - zq)(k - zk) = dot(q - zq, k) - zk * sum(q - zq) needs no K row sums;
//     d is exact in int32, and S = float(d) * ((sq * scale) * sk) is the qk_gemm kernel's epilogue,
//     so scores are bit-identical across variants (fp32 queries use qk_gemm_f32a);
//   mask, online softmax (running max and sum per row, vectorised exp);
//   acc = acc * rescale + W.V - z_row with W = P * s_v (each token's V scale folded into its
//     weight) and z_row = sum_t W[t] * z_v[t]: int8 V rows are widened in registers (decode), or,
//     with 16+ rows per KV head (prefill), converted to fp32 once per block in the thread's slice,
//     never dequantized (the scale and zero point stay out of V).
// Decode with too few items for the threads splits the KV range (flash-decoding) and merges (max,
// sum, acc) afterwards. Scratch: one slice per thread of the process-wide arena, laid out by
// qsdpa::scratch_layout; nothing in it is zero-filled that the kernel overwrites.
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num() { return 0; }  // built without OpenMP: one thread
static inline int omp_get_num_threads() { return 1; }
#endif

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "attention.h"
#include "call_trace.h"
#include "avx512_vnni/simd-avx512-vnni.h"

void qsdpa_qk_gemm_f32s8__avx512_vnni(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);

namespace qsdpa {
namespace avx512_vnni {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One step of a spin-wait: tells the core this is a wait loop (power, and the other hardware
// thread of an SMT core).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}
// Spins before a spin-wait also yields the CPU (a pause is 10-140 cycles by core: ~0.1-1.5 ms):
// by then the thread it waits for is most likely off the CPU.
constexpr unsigned kSpinsBeforeYield = 1u << 15;

// Waits until `count` reaches n; what the threads that counted wrote before is then visible.
inline void spin_until(const std::atomic<int>& count, int n) {
  for (unsigned spins = 0; count.load(std::memory_order_acquire) < n; ++spins) {
    spin_pause();
    if (spins >= kSpinsBeforeYield) std::this_thread::yield();
  }
}

// A vector of p[0..n) padded with `fill`, for row tails (exp and max must not see stray lanes).
inline vf vload_fill(const float* p, int n, float fill) {
  alignas(64) float t[NF];
  for (int i = 0; i < NF; ++i) t[i] = i < n ? p[i] : fill;
  return vload(t);
}

inline void scale_row(float* x, size_t n, float c) {
  const vf vc = vset1(c);
  size_t j = 0;
  for (; j + NF <= n; j += NF) vstore(x + j, vmul(vload(x + j), vc));
  for (; j < n; ++j) x[j] *= c;
}

// The largest of the row's nb scores.
inline float row_max_of(const float* s, size_t nb) {
  vf vm = vset1(kNegInf);
  size_t j = 0;
  for (; j + NF <= nb; j += NF) vm = vmax(vm, vload(s + j));
  if (j < nb) vm = vmax(vm, vload_fill(s + j, static_cast<int>(nb - j), kNegInf));
  return vhmax(vm);
}

// One row of scores -> this block's weights W = P * s_v (each token's V scale folded in), given the
// block's largest score; updates the row's running max and sum and sets its V zero-point term
// z = sum W * z_v. One pass: exp, sum, weight and z per vector. Returns the factor the row's
// accumulator must be rescaled by (1 on the first block: unused).
inline float softmax_weights_row(float* s, size_t nb, float block_max, const float* vsc, const float* vzp,
                                 float& row_max, float& row_sum, float& zterm, bool first) {
  const float old_max = first ? kNegInf : row_max;
  const float new_max = block_max > old_max ? block_max : old_max;
  if (new_max == kNegInf) {  // every key so far is masked out: W = 0, the accumulator stays 0
    std::memset(s, 0, nb * sizeof(float));
    if (first) row_sum = 0.0f;
    row_max = kNegInf;
    zterm = 0.0f;
    return 1.0f;
  }
  const vf vmx = vset1(new_max);
  vf vs = vzero(), zt = vzero();
  size_t j = 0;
  for (; j + NF <= nb; j += NF) {
    const vf p = vexp(vsub(vload(s + j), vmx));
    vs = vadd(vs, p);
    const vf w = vmul(p, vload(vsc + j));
    vstore(s + j, w);
    zt = vfma(w, vload(vzp + j), zt);
  }
  float z = vhsum(zt);
  if (j < nb) {
    const int rest = static_cast<int>(nb - j);
    const vf p = vexp(vsub(vload_fill(s + j, rest, kNegInf), vmx));  // padded lanes: exp(-inf) = 0
    vs = vadd(vs, p);
    alignas(64) float pt[NF];
    vstore(pt, p);
    for (int i = 0; i < rest; ++i, ++j) {
      s[j] = pt[i] * vsc[j];
      z += s[j] * vzp[j];
    }
  }
  zterm = z;
  const float block_sum = vhsum(vs);
  row_max = new_max;
  if (first) {
    row_sum = block_sum;
    return 1.0f;
  }
  // After the first few blocks a row's max seldom moves: exp(0) = 1 exactly, without the libm call
  // (one per row and block: 3% of a llama3-8b decode call on Zen 5).
  const float c = old_max == kNegInf ? 0.0f : old_max == new_max ? 1.0f : std::exp(old_max - new_max);
  row_sum = row_sum * c + block_sum;
  return c;
}

// How a decode block fetches the next one, per CPU: where its lines go (L1 or L2), whether its
// pages are walked first (touch_pages), and how much of the next block's K rides on this block's
// Q.K^T (the rest goes with V, a piece per P.V step).
// Each core's best was measured on one model of it (paired A/B, llama3-8b decode):
// - AMD (Zen 4 and Zen 5 EPYCs, 1 MiB of L2 a core): into L1, no page walks, half of K during
//   Q.K^T. Zen 5 (family 0x1A), 2026-12-06 (tools/ab_decode.py --b-prefetch, the same build, 5 ms
//   pause; B/A against its setting until then, pages walked and all of K during Q.K^T): cold 0.867
//   (2048 keys) and 0.858 (8192) at 1 thread, 0.921 and 0.919 at 2, hot 0.964 and 0.986 (2048);
//   on 4 KiB pages too (tools/prefetch_after_work.py --pages 4k: the walks cost 2-10% there as
//   well; they had measured 6-11% faster on 2026-12-02, on the kernel of then). Three to five
//   eighths of K during Q.K^T are level; prefetcht1 was 2-27% slower.
//   Zen 4 (family 0x19, 2026-12-03/04): measured back to back with nothing else running, Intel's
//   setting was best, but after other work, as in a model, prefetches into L2 lost up to a third
//   and those into L1 nothing (tools/prefetch_after_work.py; cold, 8192 keys, L2 / L1 in us):
//   after a model layer's fp32 MLP on torch's threads 986 / 817 at 2 threads and 1771 / 1538 at
//   1, after PyTorch's fp32 SDPA 1118 / 824 and 1793 / 1512; with nothing before, 746 / 798 and
//   1453 / 1503. Earlier AMD families are taken with these (Zen 3's only variant, avx2, was never
//   measured with these prefetches).
// - Intel (a Xeon with AVX-512 VNNI and a 2 MiB L2): prefetcht0 was 2-7% slower cold than
//   prefetcht1, and Q.K^T, a quarter of a call, is too short a window for a whole block's K at
//   this core's single-thread bandwidth: half of K there and half with V made cold decode 12-15%
//   faster at 1 thread (2048 and 8192 keys) and 11% at 2, hot 4-6% (2026-12-02, against all of K
//   during Q.K^T). On the kernel of 2026-12-07 a quarter did better still (tools/ab_decode.py
//   --b-prefetch L2/2, the same build, 231 cold layers, 5 ms pause, 80 pairs, B/A against half):
//   cold 0.954 and 0.949 (2048 keys) and 0.969 (8192) at 1 thread, 0.982 and 0.972 at 2, hot
//   1.011, 1.004, 1.000 and 0.980; an eighth 0.949, 0.960, 0.998, 0.977; none 0.971, 0.979,
//   0.987, 0.993; three eighths 0.968 (2048 keys, 1 thread). After the peers' calls too
//   (tools/prefetch_after_work.py, us, half / a quarter): 2048 keys 1 thread after PyTorch's SDPA
//   445 / 437, after ExecuTorch's 452 / 437; 8192 keys 2 threads after PyTorch's 918 / 884.
//   No page walks: on that core they cost 4% hot (their loads wait on L3) and gained nothing cold
//   (2026-12-02; 2026-12-07: 0.995 and 0.989 cold at 1 thread, 2048 and 8192 keys). The share of
//   K is the registry's K_QK_EIGHTHS, per variant: the quarter above is avx512_vnni's; avx2 on the
//   same core kept half (a quarter: cold 1.014 and 1.022 at 1 and 2 threads, hot 1.045 and 1.029),
//   avx512 was level (cold 0.994, hot 0.991) and keeps half.
// Other x86 and ARM cores get Intel's setting (L2 is also NEON's; neither measured on an ARM core).
// Results do not depend on it. Atomics: tests and A/B tools change it between calls.
struct PrefetchTuning {
  bool to_l1;
  bool walk_pages;
  unsigned k_during_qk;  // eighths of the next block's K fetched during Q.K^T, 0..8
};
inline PrefetchTuning default_prefetch_tuning() {
#if defined(__x86_64__) || defined(__i386__)  // the CPU's, whatever the variant (scalar included)
  __builtin_cpu_init();  // may run before libgcc's own constructor has filled in the CPU model
  if (__builtin_cpu_is("amd")) return {true, false, 4};
#endif
  return {false, false, 2};  // the registry's, per variant
}
inline const PrefetchTuning kDefaultPrefetchTuning = default_prefetch_tuning();  // the CPU asked once
inline std::atomic<bool> g_prefetch_to_l1{kDefaultPrefetchTuning.to_l1};
inline std::atomic<bool> g_prefetch_walk_pages{kDefaultPrefetchTuning.walk_pages};
inline std::atomic<unsigned> g_prefetch_k_during_qk{kDefaultPrefetchTuning.k_during_qk};
inline PrefetchTuning prefetch_tuning() {
  return {g_prefetch_to_l1.load(std::memory_order_relaxed), g_prefetch_walk_pages.load(std::memory_order_relaxed),
          g_prefetch_k_during_qk.load(std::memory_order_relaxed)};
}
inline void set_prefetch_tuning(PrefetchTuning t) {
  g_prefetch_to_l1.store(t.to_l1, std::memory_order_relaxed);
  g_prefetch_walk_pages.store(t.walk_pages, std::memory_order_relaxed);
  g_prefetch_k_during_qk.store(t.k_during_qk, std::memory_order_relaxed);
}

// The lines of [p, p + bytes), bytes >= 1: a piece is one or two lines almost always, so those two
// go without the loop (its counter and branch cost more than the prefetches themselves).
template <int Locality>
__attribute__((always_inline)) inline void prefetch_lines(const int8_t* p, size_t bytes) {
  __builtin_prefetch(p, 0, Locality);
  if (bytes > 64) {
    __builtin_prefetch(p + 64, 0, Locality);
    for (size_t o = 128; o < bytes; o += 64) __builtin_prefetch(p + o, 0, Locality);
  }
}
__attribute__((always_inline)) inline void prefetch_piece(const int8_t* p, size_t bytes, bool l1) {
  if (l1) prefetch_lines<3>(p, bytes);
  else prefetch_lines<2>(p, bytes);
}

// One load from every 4 KiB page of [p, p + bytes): the pages are walked into the TLB now, so that
// the prefetches of their lines that follow land. On Zen 5, prefetches into pages the TLB did not
// hold came in late or not at all: with 4 KiB pages, cold llama3-8b decode (2048 keys) ran 6-11%
// faster at 1 thread with these loads, 1-7% at 2 (and 13-20% / 8-10% with prefetcht0 as well);
// with 2 MiB pages, where they find nothing to walk, the loads cost 1-4% (2026-12-02). Measured
// again on 2026-12-06, on the kernel of then, they cost 2-10% on 4 KiB pages too, and no CPU's
// default (prefetch_tuning) takes them. Loads, not prefetches: a prefetch is what gets dropped.
// Only bytes inside the range are read.
__attribute__((always_inline)) inline void touch_pages(const int8_t* p, size_t bytes) {
  if (bytes == 0) return;
  uint32_t sum = static_cast<uint8_t>(*reinterpret_cast<const volatile int8_t*>(p));
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = (reinterpret_cast<uintptr_t>(p) | 4095u) + 1; a < end; a += 4096)
    sum += static_cast<uint8_t>(*reinterpret_cast<const volatile int8_t*>(a));
  __asm__ volatile("" ::"r"(sum));  // the loads are the point; keep them
}

// Prefetch (prefetch_piece: into L1 or L2, per prefetch_tuning) spread over a compute loop: when the
// loop is at key t (< n), the `bytes` at p + t * ld. Rows of the next block (ld = the cache's row stride), or a contiguous stretch cut
// into n pieces (ld = bytes).
// always_inline: GCC would otherwise split `at` and outline its body, and a call to a function that
// only prefetches counts as free of side effects and is deleted (seen with GCC 12).
struct RowPrefetch {
  const int8_t* p = nullptr;
  size_t ld = 0, n = 0, bytes = 0;
  const int8_t* p2 = nullptr;  // a second set of rows, fetched alongside
  size_t ld2 = 0, n2 = 0, bytes2 = 0;
  bool l1 = false;  // pieces into L1 (else L2)
  __attribute__((always_inline)) inline void at(size_t t) const {
    if (t < n) prefetch_piece(p + t * ld, bytes, l1);
    if (t < n2) prefetch_piece(p2 + t * ld2, bytes2, l1);
  }
  __attribute__((always_inline)) inline void rest(size_t from) const {
    for (size_t t = from; t < n; ++t) prefetch_row(p + t * ld, bytes);
    for (size_t t = from; t < n2; ++t) prefetch_row(p2 + t * ld2, bytes2);
  }
  // The pieces from `by` on, renumbered from 0 (the part of the work a later loop takes).
  RowPrefetch from(size_t by) const {
    RowPrefetch f = *this;
    f.p += (by < n ? by : n) * ld, f.n = by < n ? n - by : 0;
    f.p2 += (by < n2 ? by : n2) * ld2, f.n2 = by < n2 ? n2 - by : 0;
    return f;
  }
  bool pending() const { return n || n2; }
};

// A row into L1 (the next tiles' keys).
__attribute__((always_inline)) inline void prefetch_row_l1(const int8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

// n rows of `bytes` at p, ld apart, a row per step.
inline RowPrefetch rows_prefetch(const int8_t* p, size_t ld, size_t n, size_t bytes, bool l1) {
  RowPrefetch f{p, ld, n, bytes};
  f.l1 = l1;
  return f;
}

// Two contiguous stretches of bytes, each cut into whole-line pieces, one piece of each per step of
// a loop of `steps`.
inline RowPrefetch spread(const int8_t* p, size_t bytes, const int8_t* p2, size_t bytes2, size_t steps, bool l1) {
  RowPrefetch f;
  f.l1 = l1;
  if (steps == 0) return f;
  if (bytes) {
    const size_t per = ((bytes + steps - 1) / steps + 63) / 64 * 64;
    f.p = p, f.ld = per, f.n = (bytes + per - 1) / per, f.bytes = per;
  }
  if (bytes2) {
    const size_t per = ((bytes2 + steps - 1) / steps + 63) / 64 * 64;
    f.p2 = p2, f.ld2 = per, f.n2 = (bytes2 + per - 1) / per, f.bytes2 = per;
  }
  return f;
}

// Exact int32 dots of TRt query rows (zero-padded to whole steps) with TKt int8 key rows: dot(q - zq, k).
// s16 scheme: the rows are int16 q - zq. u8 scheme (kQkU8): the rows are u8 q + 128, and each key's
// sum comes out of the same loop, so that (128 + zq) * sum k (qbias[r] = 128 + zq) is taken off.
// HD: the head dim when known at compile time (the d loop is then unrolled whole), else 0.
// Always inlined: GCC outlines it once it grows, and the call costs more than the first step saves.
template <int TRt, int TKt, size_t HD = 0>
__attribute__((always_inline)) inline void qk_tile(size_t head_dim_arg, const qelem* q, size_t ldq,
                                                   const int32_t* qbias, const int8_t* k, size_t ldk,
                                                   int32_t* dots, size_t ldd) {
  const size_t head_dim = HD ? HD : head_dim_arg;
  // With a compile-time row stride the query addresses are one base plus constants. The empty asm
  // hides that the base is the same on every tile: GCC would hoist all TRt x steps addresses out of
  // the key loop and spill them.
  if (HD) {
    ldq = query_row_elems(HD);
    __asm__("" : "+r"(q));
  }
  vi acc[TRt * TKt];
  vi ks[TKt];  // u8 scheme: the keys' sums
  for (int j = 0; j < TKt; ++j) ks[j] = dzero();
  // One row, four keys (MHA decode): each key's sum weighted by the row's bias (128 + zq, a u8) in
  // the same vpdpbusd, so that dot and bias term subtract per lane and the tile's four dots come
  // out of one 4-vector reduction (key_sums4) instead of an 8-vector tree and a scalar fix-up.
  constexpr bool kBiasSums = kQkU8 && TRt == 1 && TKt == 4;
  const vk sum_weights = _mm512_set1_epi8(static_cast<char>(kBiasSums ? qbias[0] : 1));
  const auto ksum = [&](vi a, vk kvec) { return _mm512_dpbusd_epi32(a, sum_weights, kvec); };
  size_t d = 0;
  if (head_dim >= QKB) {  // the first step initialises the accumulators
    vk kv[TKt];
    for (int j = 0; j < TKt; ++j) kv[j] = kload16(k + j * ldk);
    if constexpr (kQkU8)
      for (int j = 0; j < TKt; ++j) ks[j] = ksum(ks[j], kv[j]);
    for (int r = 0; r < TRt; ++r)
      for (int j = 0; j < TKt; ++j) acc[r * TKt + j] = qdot16_first(kv[j], q + r * ldq);
    d = QKB;
  } else {
    for (int i = 0; i < TRt * TKt; ++i) acc[i] = dzero();
  }
  for (; d + QKB <= head_dim; d += QKB) {
    vk kv[TKt];
    for (int j = 0; j < TKt; ++j) kv[j] = kload16(k + j * ldk + d);
    if constexpr (kQkU8)
      for (int j = 0; j < TKt; ++j) ks[j] = ksum(ks[j], kv[j]);
    for (int r = 0; r < TRt; ++r)
      for (int j = 0; j < TKt; ++j) acc[r * TKt + j] = qdot16(acc[r * TKt + j], kv[j], q + r * ldq + d);
  }
  if (d < head_dim) {  // the key row's tail: K is zero past it, whatever the query's padding holds
    const int rest = static_cast<int>(head_dim - d);
    vk kv[TKt];
    for (int j = 0; j < TKt; ++j) kv[j] = kload16_n(k + j * ldk + d, rest);
    if constexpr (kQkU8)
      for (int j = 0; j < TKt; ++j) ks[j] = ksum(ks[j], kv[j]);
    for (int r = 0; r < TRt; ++r)
      for (int j = 0; j < TKt; ++j) acc[r * TKt + j] = qdot16(acc[r * TKt + j], kv[j], q + r * ldq + d);
  }
  if constexpr (kQkU8 && TRt == 4 && TKt == 4) {
    qk_u8_finish_4x4(acc, ks, qbias, dots, ldd);
    return;
  }
  if constexpr (kBiasSums) {
    vi e[4];
    for (int j = 0; j < 4; ++j) e[j] = _mm512_sub_epi32(acc[j], ks[j]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dots), _mm512_castsi512_si128(key_sums4(e)));
    return;
  }
  // Every accumulator's sum, and after them the u8 scheme's key sums, through the reduction trees
  // 16 or 8 at a time, zero-padded: a horizontal sum per vector costs several times more (a 3 x 4
  // tile took 16 of them per 4 keys: GQA 3 decode ran at ~1.5x the least-work step's time).
  constexpr int kDots = TRt * TKt, kSums = kDots + (kQkU8 ? TKt : 0);
  constexpr int kPadded = kSums % 16 == 0 || kSums > 8 ? (kSums + 15) / 16 * 16 : 8;
  vi all[kPadded];
  for (int i = 0; i < kDots; ++i) all[i] = acc[i];
  if constexpr (kQkU8)
    for (int j = 0; j < TKt; ++j) all[kDots + j] = ks[j];
  for (int i = kSums; i < kPadded; ++i) all[i] = dzero();
  alignas(64) int32_t sums[kPadded];
  if constexpr (kPadded % 16 == 0) {
    for (int i = 0; i < kPadded; i += 16) dreduce16(all + i, sums + i);
  } else {
    dreduce8(all, sums);
  }
  if constexpr (kQkU8) {  // the u8 scheme's other tile shapes (row and key tails)
    for (int j = 0; j < TKt; ++j) {
      const uint32_t sk = static_cast<uint32_t>(sums[kDots + j]);
      for (int r = 0; r < TRt; ++r)
        sums[r * TKt + j] = static_cast<int32_t>(static_cast<uint32_t>(sums[r * TKt + j]) - static_cast<uint32_t>(qbias[r]) * sk);
    }
  }
  for (int r = 0; r < TRt; ++r) std::memcpy(dots + r * ldd, sums + r * TKt, sizeof(int32_t) * TKt);
}

// Q.K^T of TRt rows over the block's nb keys, a tile of kKeys keys at a time. The first row tile
// (pf != nullptr) also does the block's L2 prefetch work, a piece per key, and, when more row tiles
// follow (l1), fetches key rows 8 tiles ahead into L1 for them (strided rows are beyond the L1
// prefetchers). With one row tile (decode) nothing would read those lines again.
template <int TRt, size_t HD>
inline void qk_rows_hd(size_t nb, size_t head_dim, const qelem* q, size_t ldq, const int32_t* qbias, const int8_t* k,
                       size_t ldk, int32_t* dots, size_t ldd, const RowPrefetch* pf, bool l1) {
  constexpr size_t kKeys = 4, kAhead = 8 * kKeys;
  size_t j = 0;
  if (pf && l1) {
    for (; j + kAhead + kKeys <= nb; j += kKeys) {
      for (size_t t = 0; t < kKeys; ++t) {
        pf->at(j + t);
        prefetch_row_l1(k + (j + kAhead + t) * ldk, HD ? HD : head_dim);
      }
      qk_tile<TRt, kKeys, HD>(head_dim, q, ldq, qbias, k + j * ldk, ldk, dots + j, ldd);
    }
  }
  for (; j + kKeys <= nb; j += kKeys) {
    if (pf)
      for (size_t t = 0; t < kKeys; ++t) pf->at(j + t);
    qk_tile<TRt, kKeys, HD>(head_dim, q, ldq, qbias, k + j * ldk, ldk, dots + j, ldd);
  }
  if (pf) pf->rest(j);
  switch (nb - j) {
    case 1: qk_tile<TRt, 1, HD>(head_dim, q, ldq, qbias, k + j * ldk, ldk, dots + j, ldd); break;
    case 2: qk_tile<TRt, 2, HD>(head_dim, q, ldq, qbias, k + j * ldk, ldk, dots + j, ldd); break;
    case 3: qk_tile<TRt, 3, HD>(head_dim, q, ldq, qbias, k + j * ldk, ldk, dots + j, ldd); break;
    default: break;
  }
}

// The common head dims get a d loop of compile-time length.
template <int TRt>
inline void qk_rows(size_t nb, size_t head_dim, const qelem* q, size_t ldq, const int32_t* qbias, const int8_t* k,
                    size_t ldk, int32_t* dots, size_t ldd, const RowPrefetch* pf, bool l1) {
  if (head_dim == 128) qk_rows_hd<TRt, 128>(nb, head_dim, q, ldq, qbias, k, ldk, dots, ldd, pf, l1);
  else if (head_dim == 64) qk_rows_hd<TRt, 64>(nb, head_dim, q, ldq, qbias, k, ldk, dots, ldd, pf, l1);
  else qk_rows_hd<TRt, 0>(nb, head_dim, q, ldq, qbias, k, ldk, dots, ldd, pf, l1);
}

// A vector of V: widened from the int8 cache, or loaded from a block already converted to fp32.
inline vf vload_v(const int8_t* p) { return vcvt_s8(p); }
inline vf vload_v(const float* p) { return vload(p); }
inline vf vload_v_n(const int8_t* p, int n) { return vcvt_s8_n(p, n); }
inline vf vload_v_n(const float* p, int n) { return vload_n(p, n); }

// W.V for TRt rows at columns [d0, d0 + NVt*NF) (with PARTIAL the last vector has `last` lanes),
// then acc = acc * rescale + (W.V - z_row), or acc = W.V - z_row on the item's first block.
// kLdw: the weight rows' stride as a constant (0: ldw_rt), see pv_tile.
template <int TRt, int NVt, bool PARTIAL, bool PF, typename VT, size_t kLdw>
inline void pv_tile_ldw(size_t nb, const float* w, size_t ldw_rt, const VT* v, size_t ldv, size_t d0, int last,
                        const float* zterm, const float* rescale, float* acc, size_t lda, bool first,
                        const RowPrefetch& pf) {
  const size_t ldw = kLdw ? kLdw : ldw_rt;
  vf t[TRt][NVt];
  for (int r = 0; r < TRt; ++r)
    for (int i = 0; i < NVt; ++i) t[r][i] = vzero();
  const VT* vrow = v + d0;
#pragma GCC unroll 4
  for (size_t k = 0; k < nb; ++k, vrow += ldv) {
    if (PF) pf.at(k);  // spread over the key loop, not a burst
    vf bv[NVt];
    for (int i = 0; i < NVt; ++i)
      bv[i] = (PARTIAL && i == NVt - 1) ? vload_v_n(vrow + i * NF, last) : vload_v(vrow + i * NF);
    for (int r = 0; r < TRt; ++r) {
      const vf wr = vset1(w[r * ldw + k]);
      for (int i = 0; i < NVt; ++i) t[r][i] = vfma(wr, bv[i], t[r][i]);
    }
  }
  for (int r = 0; r < TRt; ++r) {
    float* arow = acc + r * lda + d0;
    const vf z = vset1(zterm[r]), c = vset1(rescale[r]);
    for (int i = 0; i < NVt; ++i) {
      const bool part = PARTIAL && i == NVt - 1;
      vf x = vsub(t[r][i], z);
      if (!first) x = vfma(part ? vload_n(arow + i * NF, last) : vload(arow + i * NF), c, x);
      if (part) vstore_n(arow + i * NF, x, last);
      else vstore(arow + i * NF, x);
    }
  }
}

// pv_tile_ldw, with the grouped decode's weight stride (its kv_block) made a constant: the TRt
// weight rows are then one base register plus offsets, and the key loop no longer runs out of
// general registers (GCC kept three of its pointers in xmm registers, three vmovq a key on the
// FMA ports). Paired A/B on the Intel Xeon VM (2026-12-07, llama3-8b decode, same bits): hot
// 0.952-0.962 on avx512_vnni (2048 and 8192 keys, 1 and 2 threads), 0.972 on avx512, 0.999 on
// avx2; cold 1.003-1.024 (2048 keys), 1.002-1.007 (8192). NEON not measured.
template <int TRt, int NVt, bool PARTIAL, bool PF = false, typename VT = int8_t>
inline void pv_tile(size_t nb, const float* w, size_t ldw, const VT* v, size_t ldv, size_t d0, int last,
                    const float* zterm, const float* rescale, float* acc, size_t lda, bool first,
                    const RowPrefetch& pf = RowPrefetch{}) {
  constexpr size_t kGrouped = 64;
  if (ldw == kGrouped)
    pv_tile_ldw<TRt, NVt, PARTIAL, PF, VT, kGrouped>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first, pf);
  else
    pv_tile_ldw<TRt, NVt, PARTIAL, PF, VT, 0>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first, pf);
}

// How pv_rows cuts a row of head_dim columns: full column tiles up to tiles_end, then either two
// tiles for the last 5 vectors (split_last) or one narrower tile for what is left.
// A lone last vector would be a tile of only PV_ROWS FMA chains, too few to cover the FMA latency
// (AVX2, D 128: 5 x 3 + 1 -> 4 x 3 + 2 x 2 vectors, 512-token prefill 1.3-2% faster, decode unchanged).
struct PvColumns {
  size_t tiles_end;
  bool split_last;
  // Key loops that carry prefetch work: the full tiles and the two split ones.
  size_t prefetch_loops() const { return tiles_end / (4 * NF) + (split_last ? 2 : 0); }
};

inline PvColumns pv_columns(size_t head_dim) {
  constexpr size_t kCols = 4 * NF;
  const bool split_last = head_dim % NF == 0 && head_dim > kCols && (head_dim / NF) % 4 == 1;
  return {split_last ? head_dim - kCols - NF : head_dim / kCols * kCols, split_last};
}

// One column tile's key loop, with the next nb pieces of the prefetch work if any are left.
template <int TRt, int NVt, typename VT>
inline void pv_tile_with(RowPrefetch& todo, size_t nb, const float* w, size_t ldw, const VT* v, size_t ldv, size_t d0,
                         const float* zterm, const float* rescale, float* acc, size_t lda, bool first) {
  if (todo.pending()) {
    pv_tile<TRt, NVt, false, true, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first, todo);
    todo = todo.from(nb);
  } else {
    pv_tile<TRt, NVt, false, false, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
  }
}

template <int TRt, typename VT>
inline void pv_rows(size_t nb, size_t head_dim, const float* w, size_t ldw, const VT* v, size_t ldv,
                    const float* zterm, const float* rescale, float* acc, size_t lda, bool first,
                    const RowPrefetch& pf) {
  constexpr size_t kCols = 4 * NF;
  const PvColumns cols = pv_columns(head_dim);
  const bool split_last = cols.split_last;
  const size_t tiles_end = cols.tiles_end;
  // The prefetch work: nb pieces per column tile's key loop, in order, whatever is left in one go.
  RowPrefetch todo = pf;
  if (head_dim < kCols) {  // no full tile (and so no split either)
    todo.rest(0);
    todo = RowPrefetch{};
  }
  size_t d0 = 0;
  for (; d0 < tiles_end; d0 += kCols)
    pv_tile_with<TRt, 4, VT>(todo, nb, w, ldw, v, ldv, d0, zterm, rescale, acc, lda, first);
  if (split_last) {
    constexpr int kA = 3;
    pv_tile_with<TRt, kA, VT>(todo, nb, w, ldw, v, ldv, d0, zterm, rescale, acc, lda, first);
    pv_tile_with<TRt, 2, VT>(todo, nb, w, ldw, v, ldv, d0 + kA * NF, zterm, rescale, acc, lda,
                                                  first);
    todo.rest(0);
    return;
  }
  todo.rest(0);
  const size_t rem = head_dim - d0;
  if (rem == 0) return;
  const int nv = static_cast<int>((rem + NF - 1) / NF);
  const int last = static_cast<int>(rem - static_cast<size_t>(nv - 1) * NF);
  switch (nv) {
    case 1:
      if (last == NF) pv_tile<TRt, 1, false, false, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 1, true, false, VT>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 2:
      if (last == NF) pv_tile<TRt, 2, false, false, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 2, true, false, VT>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 3:
      if (last == NF) pv_tile<TRt, 3, false, false, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 3, true, false, VT>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 4:
      if (last == NF) pv_tile<TRt, 4, false, false, VT>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 4, true, false, VT>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    default: break;
  }
}

// How many of a block's keys a row tile needs. Causal, with several query positions per item: a
// row sees the keys up to its own position, so on the block holding the diagonal a tile needs
// only up to its last row's (a prefill item's 16 positions would otherwise compute ~7.5 keys a row
// that the mask then drops). Everywhere else: the whole block.
struct KeyLimits {
  size_t nb = 0;
  bool trim = false;
  uint32_t row[64];
  size_t operator()(size_t r0, size_t rows) const {
    if (!trim) return nb;
    uint32_t m = 0;
    for (size_t r = r0; r < r0 + rows; ++r) m = row[r] > m ? row[r] : m;
    return m;
  }
};

// W.V for all Mh rows of one head, a row tile at a time over the keys it needs; the first row tile
// does the prefetch work.
template <typename VT>
void pv_all_rows(size_t Mh, const KeyLimits& keys, size_t D, const float* S, size_t ld_s, const VT* v, size_t ldv,
                 const float* zterm, const float* rescale, float* acc, bool first, const RowPrefetch& pf) {
  size_t r0 = 0;
  for (; r0 + 4 <= Mh; r0 += 4)
    pv_rows<4, VT>(keys(r0, 4), D, S + r0 * ld_s, ld_s, v, ldv, zterm + r0, rescale + r0,
                               acc + r0 * D, D, first, r0 == 0 ? pf : RowPrefetch{});
  switch (Mh - r0) {
    case 1: pv_rows<1, VT>(keys(r0, 1), D, S + r0 * ld_s, ld_s, v, ldv, zterm + r0, rescale + r0,
                                       acc + r0 * D, D, first, r0 == 0 ? pf : RowPrefetch{}); break;
    case 2: pv_rows<2, VT>(keys(r0, 2), D, S + r0 * ld_s, ld_s, v, ldv, zterm + r0, rescale + r0,
                                       acc + r0 * D, D, first, r0 == 0 ? pf : RowPrefetch{}); break;
    case 3: pv_rows<3, VT>(keys(r0, 3), D, S + r0 * ld_s, ld_s, v, ldv, zterm + r0, rescale + r0,
                                       acc + r0 * D, D, first, r0 == 0 ? pf : RowPrefetch{}); break;
    default: break;
  }
}

// The block's nb V rows (ldv apart) as fp32, D floats a row.
void convert_v_block(size_t nb, size_t D, const int8_t* v, size_t ldv, float* out) {
  for (size_t j = 0; j < nb; ++j, v += ldv, out += D) {
    size_t d = 0;
    for (; d + NF <= D; d += NF) vstore(out + d, vcvt_s8(v + d));
    if (d < D) vstore_n(out + d, vcvt_s8_n(v + d, static_cast<int>(D - d)), static_cast<int>(D - d));
  }
}

struct Item {
  size_t b, kvh0, q0, qn, split;  // KV heads [kvh0, kvh0 + heads_per_item)
};

inline Item decode_item(size_t item, const AttentionArgs& A, const AttentionPlan& P) {
  Item it;
  it.split = item % P.kv_splits;
  item /= P.kv_splits;
  const size_t qb = item % P.q_blocks;
  item /= P.q_blocks;
  const size_t groups = A.kv_heads / P.heads_per_item;
  it.kvh0 = (item % groups) * P.heads_per_item;
  it.b = item / groups;
  it.q0 = qb * P.q_positions;
  it.qn = A.q_len - it.q0 < P.q_positions ? A.q_len - it.q0 : P.q_positions;
  return it;
}

// Row `row` of an item: KV head kvh0 + g, query head (kvh0 + g) * rep + r, position q0 + i, with
// row = (g * rep + r) * qn + i. Rows of one KV head are contiguous.
inline size_t row_query_head(const Item& it, size_t rep, size_t row) { return it.kvh0 * rep + row / it.qn; }
inline size_t row_position(const Item& it, size_t row) { return it.q0 + row % it.qn; }

// Per-thread scratch of one item, carved from the slice (scratch_layout).
struct Slice {
  float* S;         // scores -> probabilities -> weights, [rows of one head] x kv_block
  int32_t* dots;    // exact int32 Q.K^T, same shape
  float* row_max;   // per item row
  float* row_sum;
  float* rescale;   // per item row: the block's accumulator rescale ...
  float* zterm;     // ... and V zero-point term
  float* acc;       // item rows x D
  int8_t* vcopy;    // the block's V rows of one head, packed (strided caches) ...
  int8_t* kpanels;  // AttentionPlan::pack_keys: the block's K in key panels, then the keys' sums
  float* vf32;      // ... or converted to fp32 (AttentionPlan::convert_v)
  unsigned char* params;  // the block's per-key qparams of each of the item's KV heads (BlockParams)
  qelem* q16;       // int8 query: item rows x ldq of int16 q - zq, or (kQkU8) u8 q + 128
  float* qf;        // fp32 query: item rows x D
  float* qcoef;     // q scale * softmax scale
  int32_t* qsum;    // sum(q - zq)
  int32_t* qbias;   // kQkU8: 128 + zq
};

inline Slice carve(const ScratchLayout& L, const AttentionPlan& P, size_t rows, unsigned char* slice) {
  Slice x;
  x.S = reinterpret_cast<float*>(slice + L.s_off);
  x.dots = reinterpret_cast<int32_t*>(slice + L.dots_off);
  x.row_max = reinterpret_cast<float*>(slice + L.max_off);
  x.row_sum = reinterpret_cast<float*>(slice + L.sum_off);
  x.rescale = reinterpret_cast<float*>(slice + L.terms_off);
  x.zterm = x.rescale + rows;
  x.acc = reinterpret_cast<float*>(slice + L.acc_off);
  x.vcopy = reinterpret_cast<int8_t*>(slice + L.vcopy_off);
  x.kpanels = reinterpret_cast<int8_t*>(slice + L.kpanel_off);
  x.vf32 = reinterpret_cast<float*>(slice + L.vf32_off);
  x.params = slice + L.params_off;
  x.q16 = reinterpret_cast<qelem*>(slice + L.q_off);
  x.qf = reinterpret_cast<float*>(slice + L.q_off);
  x.qcoef = reinterpret_cast<float*>(slice + L.qscale_off);
  x.qsum = reinterpret_cast<int32_t*>(slice + L.qsum_off);
  x.qbias = x.qsum + rows;
  return x;
}

// One KV head's qparams for the keys of a block, contiguous: kv_block of each.
struct BlockParams {
  int32_t* kzp;
  float* ksc;
  float* vsc;
  float* vzp;
};

inline BlockParams head_params(const Slice& x, size_t kv_block, size_t g) {
  BlockParams p;
  p.kzp = reinterpret_cast<int32_t*>(x.params) + g * 4 * kv_block;
  p.ksc = reinterpret_cast<float*>(p.kzp + kv_block);
  p.vsc = p.ksc + kv_block;
  p.vzp = p.vsc + kv_block;
  return p;
}

// The block's per-token qparams of hg KV heads, strided in the cache (s: key stride, h: head
// stride), into each head's contiguous vectors. Keys outer: in a [B, S, H] layout one key's heads
// are adjacent. A function of its own: inlined, its pointers would compete for registers with the
// block's.
__attribute__((noinline)) void gather_params(size_t nb, size_t hg, const int8_t* __restrict kzp_in,
                                             const float* __restrict ksc_in, size_t ks, size_t kh,
                                             const int8_t* __restrict vzp_in, const float* __restrict vsc_in,
                                             size_t vs, size_t vh, size_t kv_block, unsigned char* __restrict out) {
  int32_t* const kzp = reinterpret_cast<int32_t*>(out);
  float* const f = reinterpret_cast<float*>(out);
  const size_t ld = 4 * kv_block;  // one head's four vectors
  size_t j0 = 0;
  // Heads adjacent (kh = vh = 1), in groups of 8: 8 x 8 transposes, 8 keys at a time (the scalar
  // loop below was 5% of a llama3-8b decode call).
  if (hg % 8 == 0 && kh == 1 && vh == 1) {
    for (; j0 + 8 <= nb; j0 += 8)
      for (size_t g = 0; g < hg; g += 8) {
        transpose8_s8_i32(kzp_in + j0 * ks + g, ks, kzp + g * ld + j0, ld);
        transpose8_f32(ksc_in + j0 * ks + g, ks, f + g * ld + kv_block + j0, ld);
        transpose8_f32(vsc_in + j0 * vs + g, vs, f + g * ld + 2 * kv_block + j0, ld);
        transpose8_s8_f32(vzp_in + j0 * vs + g, vs, f + g * ld + 3 * kv_block + j0, ld);
      }
  }
  for (size_t j = j0; j < nb; ++j) {
    const int8_t* kz = kzp_in + j * ks;
    const float* kc = ksc_in + j * ks;
    const int8_t* vz = vzp_in + j * vs;
    const float* vc = vsc_in + j * vs;
    for (size_t g = 0; g < hg; ++g) {
      kzp[g * ld + j] = kz[g * kh];
      f[g * ld + kv_block + j] = kc[g * kh];
      f[g * ld + 2 * kv_block + j] = vc[g * vh];
      f[g * ld + 3 * kv_block + j] = static_cast<float>(vz[g * vh]);
    }
  }
}

// Whether the K and V scales of a gathered block (gather_params' layout) are all > 0 and at most
// their limits (finite, AttentionArgs::k_scale_limit / v_scale_limit: no float32 overflow), the
// check the binding otherwise makes before the call (AttentionArgs::kv_scale_fault). No branch
// per element, so the loop vectorises; the scales are in L1 from the gather.
inline bool block_scales_ok(const unsigned char* params, size_t hg, size_t nb, size_t kv_block, float k_limit,
                            float v_limit) {
  const float* f = reinterpret_cast<const float*>(params);
  int ok = 1;
  for (size_t g = 0; g < hg; ++g) {
    const float* ksc = f + g * 4 * kv_block + kv_block;
    const float* vsc = ksc + kv_block;
    for (size_t j = 0; j < nb; ++j)
      ok &= (ksc[j] > 0.0f) & (ksc[j] <= k_limit) & (vsc[j] > 0.0f) & (vsc[j] <= v_limit);  // false for NaN, inf
  }
  return ok != 0;
}

// How decode's lane tiles (qk_lane_tile_4x4) cover a head's Mh query rows: n4 tiles of 4 rows,
// then n3 of 3 and n2 of 2 (zero rows in their other lanes), and n1 rows left to qk_tile's one-row
// tile: 4s and a 3 (Mh % 4 == 3); 4s and two 3s, or a lone 2 (2); 4s and three 3s, or 4s and one
// row (1). Paired A/B, 2049 keys: a lone row in a lane tile took 1.10-1.13x the one-row qk_tile's
// time (MHA), and a 5-row head as a 3 and a 2 1.08x a 4-row tile and one row; 4 + 2 and 3 + 3, or
// 4 + 3 + 2 and 3 + 3 + 3, took the same time.
struct LaneTiling {
  size_t n4 = 0, n3 = 0, n2 = 0, n1 = 0;
  size_t tiles() const { return n4 + n3 + n2; }
};
inline LaneTiling lane_tiling(size_t Mh) {
  LaneTiling t;
  t.n4 = Mh / 4;
  switch (Mh % 4) {
    case 3: t.n3 = 1; break;
    case 2:
      if (t.n4 == 0) t.n2 = 1;
      else t.n4 -= 1, t.n3 = 2;
      break;
    case 1:
      if (t.n4 >= 2) t.n4 -= 2, t.n3 = 3;
      else t.n1 = 1;
      break;
    default: break;
  }
  return t;
}
constexpr size_t kLaneTiles = 16;  // the most lane tiles of a block kept in registers and on the stack

// Lane-tiled Q.K^T of every head's rows (lane_tiling: hg * tiles <= kLaneTiles), keys
// [0, nb - nb % 4) outer; returns the first key left. The lane tiles are built once per block.
// Against qk_tile (paired A/B, decode at 2048 keys, same dots): GQA 4, D 64 0.92-0.96 hot and cold;
// D 128 0.99-1.00 in the tile's broadcast form, whose broadcasts and finish cost about as much as
// qk_tile's reduction (its rotated form since: simd_prelude); GQA 3 (the small model, 9/3 heads,
// D 64, against 3 x 4 qk_tiles) 0.84-0.85 at 513-8193 keys; GQA 2 (16/8) 0.95 at D 128, 0.89 at
// D 64.
// N4, N3, N2: lt's counts fixed at compile time for the common GQA groups (-1: taken from lt), the
// tile loops then unrolled (a loop of one tile cost GQA 4 about 1% at 2048 keys).
template <size_t HD, int N4 = -1, int N3 = -1, int N2 = -1>
size_t qk_heads_lane_tiles(size_t hg, size_t Mh, LaneTiling lt, size_t nb, const qelem* q16, size_t ldq,
                           const int32_t* qbias, const int8_t* k, size_t ldk, size_t ldh, int32_t* dots, size_t ld_s,
                           const RowPrefetch& pf, size_t& step) {
  constexpr bool kRot = kRotatedLaneTile<HD>;
  if constexpr (N4 >= 0) lt.n4 = N4;
  if constexpr (N3 >= 0) lt.n3 = N3;
  if constexpr (N2 >= 0) lt.n2 = N2;
  if constexpr (N4 >= 0 && N3 >= 0 && N2 >= 0) lt.n1 = 0;  // the groups named have no row left
  vi qt[kLaneTiles][HD / 16], bias[kLaneTiles];
  size_t t = 0;
  for (size_t g = 0; g < hg; ++g) {
    size_t r = g * Mh;
    for (size_t i = 0; i < lt.n4; ++i, ++t, r += 4) {
      qk_lane_tiles<HD, kRot, 4>(q16 + r * ldq, ldq, qt[t]);
      bias[t] = lane_bias4<4>(qbias + r);
    }
    for (size_t i = 0; i < lt.n3; ++i, ++t, r += 3) {
      qk_lane_tiles<HD, kRot, 3>(q16 + r * ldq, ldq, qt[t]);
      bias[t] = lane_bias4<3>(qbias + r);
    }
    for (size_t i = 0; i < lt.n2; ++i, ++t, r += 2) {
      qk_lane_tiles<HD, kRot, 2>(q16 + r * ldq, ldq, qt[t]);
      bias[t] = lane_bias4<2>(qbias + r);
    }
  }
  const size_t r1 = Mh - lt.n1;  // a head's rows left to one-row qk_tiles: [r1, Mh)
  size_t j = 0;
  for (; j + 4 <= nb; j += 4) {
    t = 0;
    for (size_t g = 0; g < hg; ++g, ++step) {
      pf.at(step);
      const int8_t* kg = k + g * ldh + j * ldk;
      int32_t* dg = dots + g * Mh * ld_s + j;
      for (size_t i = 0; i < lt.n4; ++i, ++t, dg += 4 * ld_s) qk_lane_tile_4x4<HD, kRot, 4>(qt[t], bias[t], kg, ldk, dg, ld_s);
      for (size_t i = 0; i < lt.n3; ++i, ++t, dg += 3 * ld_s) qk_lane_tile_4x4<HD, kRot, 3>(qt[t], bias[t], kg, ldk, dg, ld_s);
      for (size_t i = 0; i < lt.n2; ++i, ++t, dg += 2 * ld_s) qk_lane_tile_4x4<HD, kRot, 2>(qt[t], bias[t], kg, ldk, dg, ld_s);
      for (size_t r = g * Mh + r1; r < (g + 1) * Mh; ++r)
        qk_tile<1, 4, HD>(HD, q16 + r * ldq, ldq, qbias + r, kg, ldk, dots + r * ld_s + j, ld_s);
    }
  }
  return j;
}

// One head's Mh rows of Q.K^T against kKeys keys: whole row tiles, then a tile of the rows left.
template <size_t HD>
__attribute__((always_inline)) inline void qk_head_tile(size_t Mh, size_t head_dim, const qelem* q16, size_t ldq,
                                                        const int32_t* qbias, const int8_t* k, size_t ldk,
                                                        int32_t* dots, size_t ld_s) {
  constexpr size_t kKeys = 4;
  constexpr int kRows = 4;
  size_t r0 = 0;
  for (; r0 + kRows <= Mh; r0 += kRows)
    qk_tile<kRows, kKeys, HD>(head_dim, q16 + r0 * ldq, ldq, qbias + r0, k, ldk, dots + r0 * ld_s, ld_s);
  switch (Mh - r0) {
    case 1: qk_tile<1, kKeys, HD>(head_dim, q16 + r0 * ldq, ldq, qbias + r0, k, ldk, dots + r0 * ld_s, ld_s); break;
    case 2: qk_tile<2, kKeys, HD>(head_dim, q16 + r0 * ldq, ldq, qbias + r0, k, ldk, dots + r0 * ld_s, ld_s); break;
    case 3: qk_tile<3, kKeys, HD>(head_dim, q16 + r0 * ldq, ldq, qbias + r0, k, ldk, dots + r0 * ld_s, ld_s); break;
    default: break;
  }
}

// Q.K^T of all hg KV heads of a block (Mh rows each), keys outer and heads inner: in a [B, S, H, D]
// cache the block's K is then read front to back, a stretch the hardware prefetchers follow; head
// by head its rows would be H*D bytes apart. k: the block's first key row of the first head, ldk
// the key stride, ldh the head stride. pf: a piece per (key tile, head).
template <size_t HD>
void qk_heads_keys_outer(size_t hg, size_t Mh, size_t nb, size_t head_dim, const qelem* q16, size_t ldq,
                         const int32_t* qbias, const int8_t* k, size_t ldk, size_t ldh, int32_t* dots, size_t ld_s,
                         const RowPrefetch& pf) {
  constexpr size_t kKeys = 4;
  constexpr int kRows = 4;
  size_t j = 0, step = 0;
  if constexpr (HD != 0 && HD % 64 == 0) {
    const LaneTiling lt = lane_tiling(Mh);
    if (lt.tiles() > 0 && hg * lt.tiles() <= kLaneTiles) {
      if (Mh == 4) j = qk_heads_lane_tiles<HD, 1, 0, 0>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
      else if (Mh == 3) j = qk_heads_lane_tiles<HD, 0, 1, 0>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
      else if (Mh == 2) j = qk_heads_lane_tiles<HD, 0, 0, 1>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
      else if (Mh == 8) j = qk_heads_lane_tiles<HD, 2, 0, 0>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
      else if (Mh == 7) j = qk_heads_lane_tiles<HD, 1, 1, 0>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
      else j = qk_heads_lane_tiles<HD>(hg, Mh, lt, nb, q16, ldq, qbias, k, ldk, ldh, dots, ld_s, pf, step);
    }
  }
  for (; j + kKeys <= nb; j += kKeys)
    for (size_t g = 0; g < hg; ++g, ++step) {
      pf.at(step);
      qk_head_tile<HD>(Mh, head_dim, q16 + g * Mh * ldq, ldq, qbias + g * Mh, k + g * ldh + j * ldk, ldk,
                       dots + g * Mh * ld_s + j, ld_s);
    }
  pf.rest(step);
  if (j < nb)
    for (size_t g = 0; g < hg; ++g) {
      size_t r0 = g * Mh;
      for (; r0 + kRows <= (g + 1) * Mh; r0 += kRows)
        qk_rows<kRows>(nb - j, head_dim, q16 + r0 * ldq, ldq, qbias + r0, k + g * ldh + j * ldk, ldk,
                       dots + r0 * ld_s + j, ld_s, nullptr, false);
      switch ((g + 1) * Mh - r0) {
        case 1: qk_rows<1>(nb - j, head_dim, q16 + r0 * ldq, ldq, qbias + r0, k + g * ldh + j * ldk, ldk,
                                       dots + r0 * ld_s + j, ld_s, nullptr, false); break;
        case 2: qk_rows<2>(nb - j, head_dim, q16 + r0 * ldq, ldq, qbias + r0, k + g * ldh + j * ldk, ldk,
                                       dots + r0 * ld_s + j, ld_s, nullptr, false); break;
        case 3: qk_rows<3>(nb - j, head_dim, q16 + r0 * ldq, ldq, qbias + r0, k + g * ldh + j * ldk, ldk,
                                       dots + r0 * ld_s + j, ld_s, nullptr, false); break;
        default: break;
      }
    }
}

// Prefill's Q.K^T in GEMM form (AttentionPlan::pack_keys: many query rows per KV head). The block's
// K is packed once into key panels (csrc/attention.h: key_panel_keys), 4-byte group c of 16 keys
// side by side, so that one vpdpbusd takes a query row's group c (broadcast) against 16 keys and
// every dot ends in a lane of its own: no per-key reduction, no per-tile key sums (the packing
// makes them once). The same exact dots as qk_tile's. Timed from L1 on the Zen 4 VM (64 rows x 256
// keys x D 128, the packing included; /tmp probe, 2026-12-06): 10.9-11.0 us against 19.2-19.3 us
// for the 4 x 4 tiles.
// 16 keys x 64 bytes (ldk apart) -> out[4s + L] = dword 4L + s of the 16 keys (lane order = keys):
// 32- and 64-bit unpacks within the 128-bit lanes, then a 4 x 4 transpose of the lanes.
inline void transpose_key_dwords16(const int8_t* k, size_t ldk, vi* out) {
  vi a[16], b[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_loadu_si512(k + i * ldk);
  for (int i = 0; i < 16; i += 2) {
    b[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
    b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // a[4g + s]: lane L = dword 4L + s of keys 4g .. 4g + 3
    a[i] = _mm512_unpacklo_epi64(b[i], b[i + 2]);
    a[i + 1] = _mm512_unpackhi_epi64(b[i], b[i + 2]);
    a[i + 2] = _mm512_unpacklo_epi64(b[i + 1], b[i + 3]);
    a[i + 3] = _mm512_unpackhi_epi64(b[i + 1], b[i + 3]);
  }
  for (int s = 0; s < 4; ++s) {  // lane g of out[4s + L] = lane L of a[4g + s]
    const vi t0 = _mm512_shuffle_i32x4(a[s], a[4 + s], 0x88), t1 = _mm512_shuffle_i32x4(a[s], a[4 + s], 0xDD);
    const vi t2 = _mm512_shuffle_i32x4(a[8 + s], a[12 + s], 0x88), t3 = _mm512_shuffle_i32x4(a[8 + s], a[12 + s], 0xDD);
    out[4 * s] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    out[4 * s + 1] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    out[4 * s + 2] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
    out[4 * s + 3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
  }
}

// The block's nb key rows (ldk apart, head_dim % 4 == 0) into panels of ldp keys (keys nb .. the
// next multiple of 32 zeroed), and each key's sum into ksum. pf: the prefetch work of the block's
// Q.K^T, a piece per key.
inline void pack_key_panels(size_t nb, size_t head_dim, const int8_t* k, size_t ldk, int8_t* panels, size_t ldp,
                            int32_t* ksum, const RowPrefetch& pf) {
  const vi ones = _mm512_set1_epi8(1);
  size_t j = 0;
  for (; j + 16 <= nb; j += 16) {
    for (size_t t = 0; t < 16; ++t) pf.at(j + t);
    vi sums = dzero();
    size_t d = 0;
    for (; d + 64 <= head_dim; d += 64) {
      vi g[16];
      transpose_key_dwords16(k + j * ldk + d, ldk, g);
      for (int i = 0; i < 16; ++i) {
        _mm512_storeu_si512(panels + ((d / 4 + 4 * (i % 4) + i / 4) * ldp + j) * 4, g[i]);
        sums = _mm512_dpbusd_epi32(sums, ones, g[i]);
      }
    }
    _mm512_storeu_si512(ksum + j, sums);
    for (; d < head_dim; d += 4)  // a row's last groups, under 64 bytes
      for (size_t t = 0; t < 16; ++t) {
        const int8_t* src = k + (j + t) * ldk + d;
        std::memcpy(panels + ((d / 4) * ldp + j + t) * 4, src, 4);
        ksum[j + t] += src[0] + src[1] + src[2] + src[3];
      }
  }
  for (; j < nb; ++j) {  // the last keys, under 16
    pf.at(j);
    for (size_t d = 0; d < head_dim; d += 4) std::memcpy(panels + ((d / 4) * ldp + j) * 4, k + j * ldk + d, 4);
    ksum[j] = row_sum_s8(k + j * ldk, head_dim);
  }
  const size_t padded = (nb + 31) / 32 * 32;
  for (size_t d = 0; d < head_dim; d += 4) std::memset(panels + ((d / 4) * ldp + nb) * 4, 0, (padded - nb) * 4);
  for (; j < padded; ++j) ksum[j] = 0;
  pf.rest(nb);
}

// R query rows (u8 q + 128, ldq apart) against the first nkeys keys of the panels, 32 keys a step
// (the padding past the block's keys is zero): dots[r * ldd + j] = sum (q_r + 128) k_j - qbias[r] *
// sum k_j in wrapping int32, qk_tile's dots exactly. Keys up to nkeys rounded up to 32 are written.
template <int R>
inline void qk_panel_tile(size_t nkeys, size_t quads, const uint8_t* q, size_t ldq, const int32_t* qbias,
                          const int8_t* panels, size_t ldp, const int32_t* ksum, int32_t* dots, size_t ldd) {
  for (size_t j = 0; j < nkeys; j += 32) {
    vi acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = dzero();
    const int8_t* pc = panels + j * 4;
    for (size_t c = 0; c < quads; ++c, pc += ldp * 4) {
      const vi k0 = _mm512_loadu_si512(pc), k1 = _mm512_loadu_si512(pc + 64);
      for (int r = 0; r < R; ++r) {
        int32_t group;
        std::memcpy(&group, q + r * ldq + 4 * c, 4);
        const vi b = _mm512_set1_epi32(group);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b, k0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b, k1);
      }
    }
    const vi s0 = _mm512_loadu_si512(ksum + j), s1 = _mm512_loadu_si512(ksum + j + 16);
    for (int r = 0; r < R; ++r) {
      const vi bias = _mm512_set1_epi32(qbias[r]);
      _mm512_storeu_si512(dots + r * ldd + j, _mm512_sub_epi32(acc[r][0], _mm512_mullo_epi32(bias, s0)));
      _mm512_storeu_si512(dots + r * ldd + j + 16, _mm512_sub_epi32(acc[r][1], _mm512_mullo_epi32(bias, s1)));
    }
  }
}

// All Mh rows of one head, 8 rows a tile (16 accumulators), each tile over the keys its rows need.
inline void qk_panel_rows(size_t Mh, const KeyLimits& keys, size_t quads, const uint8_t* q, size_t ldq,
                          const int32_t* qbias, const int8_t* panels, size_t ldp, const int32_t* ksum, int32_t* dots,
                          size_t ldd) {
  size_t r0 = 0;
  for (; r0 + 8 <= Mh; r0 += 8)
    qk_panel_tile<8>(keys(r0, 8), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum, dots + r0 * ldd, ldd);
  switch (Mh - r0) {
    case 1: qk_panel_tile<1>(keys(r0, 1), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 2: qk_panel_tile<2>(keys(r0, 2), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 3: qk_panel_tile<3>(keys(r0, 3), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 4: qk_panel_tile<4>(keys(r0, 4), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 5: qk_panel_tile<5>(keys(r0, 5), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 6: qk_panel_tile<6>(keys(r0, 6), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    case 7: qk_panel_tile<7>(keys(r0, 7), quads, q + r0 * ldq, ldq, qbias + r0, panels, ldp, ksum,
                                    dots + r0 * ldd, ldd); break;
    default: break;
  }
}

// Keys [n0, n0 + nb) for the rows [row0, row0 + Mh) of KV head kvh: S = scale * Q.K^T, mask,
// online softmax, acc = acc * rescale + W.V - z. L2 prefetch work rides on the first row tile of
// each phase: pf_qk's during Q.K^T, pf_pv's during P.V (run_item says what they fetch).
void attend_block(const AttentionArgs& A, const AttentionPlan& P, const Slice& x, const Item& it, size_t kvh,
                  const BlockParams& bp, size_t row0, size_t Mh, size_t n0, size_t nb, bool first, bool fetch_k,
                  bool dots_ready, const RowPrefetch& pf_qk, const RowPrefetch& pf_pv) {
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, ld_s = P.kv_block, ldq = query_row_elems(D);
  const size_t kqp = it.b * A.k_qp.b + kvh * A.k_qp.h;
  const int8_t* kblk = A.k + it.b * A.kst.b + kvh * A.kst.h + n0 * A.kst.s;
  const int8_t* vblk = A.v + it.b * A.vst.b + kvh * A.vst.h + n0 * A.vst.s;
  float* S = x.S;
  int32_t* dots = x.dots + (A.q8 ? row0 * ld_s : 0);  // a row per item row (qk_heads_keys_outer fills them all)
  const qelem* q16 = x.q16 + row0 * ldq;
  const int32_t* qbias = x.qbias + row0;
  float* row_max = x.row_max + row0;
  float* row_sum = x.row_sum + row0;
  float* rescale = x.rescale + row0;
  float* zterm = x.zterm + row0;
  float* acc = x.acc + row0 * D;
  if (fetch_k)  // the item's first block: nothing fetched it yet
    for (size_t j = 0; j < nb; ++j) prefetch_row(kblk + j * A.kst.s, D);
  // Whether a mask changes any score of this block after Q.K^T (else the scores' pass also finds
  // each row's largest): an explicit mask, or causal with a key past the first position's last.
  const bool masked = A.mask_kind != MaskKind::kNone || (A.causal && A.start_pos + it.q0 < n0 + nb - 1);
  // (A group wider than MAX_ROWS query heads, qpos = 1, has more rows than the stack array.)
  float block_max[64];
  const bool have_max = A.q8 && !masked && Mh <= 64;
  KeyLimits keys;
  keys.nb = nb;
  keys.trim = A.causal && masked && it.qn > 1 && Mh <= 64;
  if (keys.trim) {
    for (size_t r = 0; r < Mh; ++r) {
      const size_t lim = A.start_pos + row_position(it, row0 + r) + 1;  // keys [0, lim)
      keys.row[r] = static_cast<uint32_t>(lim <= n0 ? 0 : (lim - n0 < nb ? lim - n0 : nb));
    }
  }

  // S = scale * Q.K^T
  if (A.q8) {
    size_t r0 = dots_ready ? Mh : 0;
    if (P.pack_keys && r0 == 0) {  // the GEMM form (qk_panel_rows); pack_keys: D % 4 == 0, kv_block % 32 == 0
      const size_t ldp = key_panel_keys(P.kv_block);
      int32_t* ksum = reinterpret_cast<int32_t*>(x.kpanels + ldp * D);
      pack_key_panels(nb, D, kblk, A.kst.s, x.kpanels, ldp, ksum, pf_qk);
      qk_panel_rows(Mh, keys, D / 4, q16, ldq, qbias, x.kpanels, ldp, ksum, dots, ld_s);
      r0 = Mh;
    }
    for (; r0 + 4 <= Mh; r0 += 4)
      qk_rows<4>(keys(r0, 4), D, q16 + r0 * ldq, ldq, qbias + r0, kblk, A.kst.s, dots + r0 * ld_s, ld_s,
                             r0 == 0 ? &pf_qk : nullptr, Mh > 4);
    switch (Mh - r0) {  // (0 when dots_ready)
      case 1: qk_rows<1>(keys(r0, 1), D, q16 + r0 * ldq, ldq, qbias + r0, kblk, A.kst.s, dots + r0 * ld_s, ld_s,
                                     r0 == 0 ? &pf_qk : nullptr, false); break;
      case 2: qk_rows<2>(keys(r0, 2), D, q16 + r0 * ldq, ldq, qbias + r0, kblk, A.kst.s, dots + r0 * ld_s, ld_s,
                                     r0 == 0 ? &pf_qk : nullptr, false); break;
      case 3: qk_rows<3>(keys(r0, 3), D, q16 + r0 * ldq, ldq, qbias + r0, kblk, A.kst.s, dots + r0 * ld_s, ld_s,
                                     r0 == 0 ? &pf_qk : nullptr, false); break;
      default: break;
    }
    // d = dot(q - zq, k) - zk * sum(q - zq), in wrapping unsigned arithmetic (the result fits);
    // then qk_gemm's epilogue, float(d) * ((sq * scale) * sk), for bit-identical scores. Each row's
    // largest score comes out of the same pass (unless a mask changes the scores afterwards).
    for (size_t row = 0; row < Mh; ++row) {
      const int32_t* dr = dots + row * ld_s;
      float* sr = S + row * ld_s;
      const int32_t qs = x.qsum[row0 + row];
      const float coef = x.qcoef[row0 + row];
      const vf vcoef = vset1(coef);
      vf vm = vset1(kNegInf);
      const size_t nr = keys.trim ? keys.row[row] : nb;  // the keys this row sees; its dots end there
      size_t j = 0;
      for (; j + NF <= nr; j += NF) {
        const vf sc = vscores(dr + j, bp.kzp + j, qs, bp.ksc + j, vcoef);
        vstore(sr + j, sc);
        vm = vmax(vm, sc);
      }
      float m = vhmax(vm);
      for (; j < nr; ++j) {
        const uint32_t d = static_cast<uint32_t>(dr[j]) - static_cast<uint32_t>(bp.kzp[j]) * static_cast<uint32_t>(qs);
        sr[j] = static_cast<float>(static_cast<int32_t>(d)) * (coef * bp.ksc[j]);
        m = sr[j] > m ? sr[j] : m;
      }
      for (; j < nb; ++j) sr[j] = kNegInf;
      if (have_max) block_max[row] = m;
    }
  } else {
    const QMatrix kmat{kblk, A.kst.s, A.k_scale + kqp + n0 * A.k_qp.s, A.k_qp.s, A.k_zp + kqp + n0 * A.k_qp.s,
                       A.k_qp.s, nullptr};
    qsdpa_qk_gemm_f32s8__avx512_vnni(Mh, nb, D, x.qf + row0 * D, D, kmat, A.scale, S, ld_s);
    pf_qk.rest(0);  // the prefetch work qk_rows spreads over its tiles for int8 queries, in one go
  }

  // Mask, online softmax, then W = P * s_v and each row's V zero-point term.
  for (size_t row = 0; row < Mh; ++row) {
    float* s = S + row * ld_s;
    if (masked) {
      const size_t h = row_query_head(it, rep, row0 + row), pos = row_position(it, row0 + row);
      if (A.mask_kind == MaskKind::kAdditive) {
        const float* mrow = A.mask_add + it.b * A.mask.b + h * A.mask.h + pos * A.mask.s + n0;
        size_t j = 0;
        for (; j + NF <= nb; j += NF) vstore(s + j, vadd(vload(s + j), vload(mrow + j)));
        for (; j < nb; ++j) s[j] += mrow[j];
      } else if (A.mask_kind == MaskKind::kKeep) {
        const uint8_t* mrow = A.mask_keep + it.b * A.mask.b + h * A.mask.h + pos * A.mask.s + n0;
        for (size_t j = 0; j < nb; ++j)
          if (!mrow[j]) s[j] = kNegInf;
      }
      if (A.causal) {
        const size_t last_key = A.start_pos + pos;  // bottom-right: keys [0, start_pos + pos]
        for (size_t j = last_key + 1 > n0 ? last_key + 1 - n0 : 0; j < nb; ++j) s[j] = kNegInf;
      }
    }
    rescale[row] = softmax_weights_row(s, nb, have_max ? block_max[row] : row_max_of(s, nb), bp.vsc, bp.vzp,
                                       row_max[row], row_sum[row], zterm[row], first);
  }

  // acc = acc * rescale + W.V - z.
  if (P.convert_v) {  // many row tiles: convert the block once (AttentionPlan::convert_v)
    convert_v_block(nb, D, vblk, A.vst.s, x.vf32);
    pv_all_rows<float>(Mh, keys, D, S, ld_s, x.vf32, D, zterm, rescale, acc, first, pf_pv);
    return;
  }
  // Strided V rows (H*D bytes apart) of a long block are packed first: the column tiles pass over
  // the block's rows D / (PV_VECS * NF) times (per row tile), and rows that far apart share a
  // handful of L1 sets, so unpacked they would come from L2 on every pass. Up to 64 rows stay in
  // L1 unpacked (measured: packing them costs more than it saves).
  const int8_t* vsrc = vblk;
  size_t ldv = A.vst.s;
  if (ldv != D && Mh > 0 && nb > 64) {
    // Fixed-size copies for the common head dims (inlined vector moves, no libc call per row).
    if (D == 128) {
      for (size_t j = 0; j < nb; ++j) std::memcpy(x.vcopy + j * 128, vblk + j * A.vst.s, 128);
    } else if (D == 64) {
      for (size_t j = 0; j < nb; ++j) std::memcpy(x.vcopy + j * 64, vblk + j * A.vst.s, 64);
    } else {
      for (size_t j = 0; j < nb; ++j) std::memcpy(x.vcopy + j * D, vblk + j * A.vst.s, D);
    }
    vsrc = x.vcopy;
    ldv = D;
  }
  pv_all_rows<int8_t>(Mh, keys, D, S, ld_s, vsrc, ldv, zterm, rescale, acc, first, pf_pv);
}

// A flash-decoding partial record (ScratchLayout::partials_off): the item's running max (M),
// sum (M) and accumulator (M x D), each part 64-B aligned. Split items run in it; the merge reads it.
struct Partial {
  float* max;
  float* sum;
  float* acc;
};

inline Partial partial_record(unsigned char* partials, const ScratchLayout& L, const AttentionPlan& P, size_t item) {
  unsigned char* rec = partials + item * L.partial_record_bytes;
  const size_t mbytes = align_up(P.rows_per_item * sizeof(float));
  return {reinterpret_cast<float*>(rec), reinterpret_cast<float*>(rec + mbytes), reinterpret_cast<float*>(rec + 2 * mbytes)};
}

// The keys an item attends: [begin, end), its KV split's share when the range is split.
struct KeyRange {
  size_t begin, end;
};

inline KeyRange item_keys(const AttentionArgs& A, const AttentionPlan& P, const Item& it) {
  size_t key_end = A.n_keys;
  if (A.causal && A.start_pos + it.q0 + it.qn < key_end) key_end = A.start_pos + it.q0 + it.qn;
  if (P.kv_splits == 1) return {0, key_end};
  return {split_first_key(key_end, P.kv_splits, P.threads, it.split),
          split_first_key(key_end, P.kv_splits, P.threads, it.split + 1)};
}

// The items of a call, handed out in order to whichever thread asks. A thread running an
// all-heads item takes its next one as that item's last block starts, and fetches the next
// item's first block during it (run_item), so that the next item does not start on a cold block.
struct ItemQueue {
  std::atomic<size_t> next{0};
  size_t take() { return next.fetch_add(1, std::memory_order_relaxed); }
};

// What run_item leaves its thread: the next item it took (>= P.items: none left), and whether
// that item's first block was fetched during this one's last.
struct NextItem {
  size_t item;
  bool fetched;
};

NextItem run_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* slice,
                  unsigned char* partials, size_t item, ItemQueue& queue, bool fetched) {
  NextItem next{P.items, false};
  bool took = false;
  const auto done = [&]() -> NextItem {
    if (!took) next.item = queue.take();
    return next;
  };
  const Item it = decode_item(item, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, Mh = rep * it.qn, M = P.heads_per_item * Mh;
  const size_t ldq = query_row_elems(D);
  Slice x = carve(L, P, M, slice);
  if (P.kv_splits > 1) {  // a split item runs in its partial record: nothing to copy at the end
    const Partial rec = partial_record(partials, L, P, item);
    x.row_max = rec.max;
    x.row_sum = rec.sum;
    x.acc = rec.acc;
  }

  // Pack the item's query rows. int8 rows become int16 (q - zq), zero-padded to ldq, with their
  // sum and scale * softmax scale.
  for (size_t row = 0; row < M; ++row) {
    const size_t h = row_query_head(it, rep, row), pos = row_position(it, row);
    const size_t src = it.b * A.q.b + h * A.q.h + pos * A.q.s;
    if (A.q8) {
      const size_t qp = it.b * A.q_qp.b + h * A.q_qp.h + pos * A.q_qp.s;
      const int32_t zq = A.q_zp[qp];
      const int8_t* in = A.q8 + src;
      qelem* o = x.q16 + row * ldq;
      int32_t sum = 0;
      for (size_t d = 0; d < D; ++d) {
        sum += in[d] - zq;
        o[d] = static_cast<qelem>(kQkU8 ? in[d] + 128 : in[d] - zq);
      }
      for (size_t d = D; d < ldq; ++d) o[d] = 0;
      x.qsum[row] = sum;
      x.qbias[row] = 128 + zq;
      x.qcoef[row] = A.q_scale[qp] * A.scale;
    } else {
      std::memcpy(x.qf + row * D, A.qf + src, D * sizeof(float));
    }
  }

  // Keys this item may attend, then its share of them when the KV range is split.
  const KeyRange range = item_keys(A, P, it);
  const size_t k_begin = range.begin, k_end = range.end;

  // Block-major over the item's KV heads: in a [B, S, H, D] cache the heads of a block of keys are
  // one contiguous stretch of memory, read front to back.
  const PrefetchTuning pft = prefetch_tuning();
  bool first = true;
  for (size_t n0 = k_begin; n0 < k_end; n0 += P.kv_block) {
    const size_t nb = k_end - n0 < P.kv_block ? k_end - n0 : P.kv_block;
    const size_t after = k_end - n0 - nb;
    const size_t next_nb = after < P.kv_block ? after : P.kv_block;
    const size_t hg = P.heads_per_item;
    const size_t kq = it.b * A.k_qp.b + it.kvh0 * A.k_qp.h + n0 * A.k_qp.s;
    const size_t vq = it.b * A.v_qp.b + it.kvh0 * A.v_qp.h + n0 * A.v_qp.s;
    gather_params(nb, hg, A.k_zp + kq, A.k_scale + kq, A.k_qp.s, A.k_qp.h, A.v_zp + vq, A.v_scale + vq, A.v_qp.s,
                  A.v_qp.h, P.kv_block, x.params);
    if (A.kv_scale_fault) {
      // A bad scale stops the item before the block is computed, so no bad value reaches the
      // arithmetic; an item that finds another's fault stops too. `out` stays unwritten: this item
      // returns before its write, and the merge is skipped.
      if (!block_scales_ok(x.params, hg, nb, P.kv_block, A.k_scale_limit, A.v_scale_limit)) {
        __atomic_store_n(A.kv_scale_fault, 1, __ATOMIC_RELAXED);
        return done();
      }
      if (__atomic_load_n(A.kv_scale_fault, __ATOMIC_RELAXED)) return done();
    }
    if (hg > 1) {
      // All heads of a block of keys are one contiguous stretch of K and one of V: the first
      // block is fetched up front, each next one while this one is computed. The next block's K
      // goes a piece per (key tile, head) step of the keys-outer Q.K^T, its V a piece per key of
      // every P.V column tile of every head, so the prefetches come at an even pace: on Zen 5 a
      // software prefetch issued while the core's misses are all in flight is dropped (a 128 KiB
      // burst of them left most lines uncached; spaced ~3 ns apart they all landed), and a burst
      // during Q.K^T alone, as before, ran several times faster than that.
      const size_t kbytes = A.kst.s, vbytes = A.vst.s;  // one key's row of every head
      const int8_t* kb = A.k + it.b * A.kst.b + it.kvh0 * A.kst.h;
      const int8_t* vb = A.v + it.b * A.vst.b + it.kvh0 * A.vst.h;
      // Q.K^T keys outer (int8 queries) for every group size: reading the block's K in memory order
      // paid for all of them (paired A/B, 2049 keys, same bits; avx512_vnni / avx512 / avx2): MHA
      // 32/32 D 128 0.78 / 0.73 / 0.88, GQA 2 0.98 / 0.97 / 0.98, GQA 5 0.92 / 0.93 / 0.97.
      const bool keys_outer = A.q8;
      // The item's first block, unless the previous item fetched it: its K at once, its V during
      // its Q.K^T when that runs keys outer (else at once as well).
      const bool cold_start = first && !fetched;
      if (cold_start) {
        prefetch_row(kb + n0 * kbytes, nb * kbytes);
        if (!keys_outer) prefetch_row(vb + n0 * vbytes, nb * vbytes);
      }
      size_t klen = next_nb * kbytes, vlen = next_nb * vbytes;
      const int8_t* kn = kb + (n0 + nb) * kbytes;
      const int8_t* vn = vb + (n0 + nb) * vbytes;
      if (after == 0) {  // the last block: the next item's first one is fetched during it
        next.item = queue.take();
        took = true;
        if (next.item < P.items) {
          const Item nit = decode_item(next.item, A, P);
          const KeyRange nr = item_keys(A, P, nit);
          const size_t nnb = nr.end - nr.begin < P.kv_block ? nr.end - nr.begin : P.kv_block;
          kn = A.k + nit.b * A.kst.b + nit.kvh0 * A.kst.h + nr.begin * kbytes;
          vn = A.v + nit.b * A.vst.b + nit.kvh0 * A.vst.h + nr.begin * vbytes;
          klen = nnb * kbytes, vlen = nnb * vbytes;
          next.fetched = nnb > 0;
        }
      }
      if (pft.walk_pages) {
        touch_pages(kn, klen);
        touch_pages(vn, vlen);
      }
      const size_t loops = pv_columns(D).prefetch_loops(), pv_steps = nb * (loops ? loops : 1);
      // The next block's K: the first klen_qk bytes during the keys-outer Q.K^T, the rest with V.
      const size_t klen_qk = keys_outer ? klen * pft.k_during_qk / 8 / 64 * 64 : 0;
      const int8_t* krest = kn + klen_qk;
      const size_t krest_len = keys_outer ? klen - klen_qk : 0;
      if (keys_outer) {
        const RowPrefetch pfk = spread(kn, klen_qk, cold_start ? vb + n0 * vbytes : nullptr, cold_start ? nb * vbytes : 0,
                                       nb / 4 * hg, pft.to_l1);
        const int8_t* kblk = kb + n0 * kbytes;
        if (D == 128) qk_heads_keys_outer<128>(hg, Mh, nb, D, x.q16, ldq, x.qbias, kblk, kbytes, A.kst.h, x.dots, P.kv_block, pfk);
        else if (D == 64) qk_heads_keys_outer<64>(hg, Mh, nb, D, x.q16, ldq, x.qbias, kblk, kbytes, A.kst.h, x.dots, P.kv_block, pfk);
        else qk_heads_keys_outer<0>(hg, Mh, nb, D, x.q16, ldq, x.qbias, kblk, kbytes, A.kst.h, x.dots, P.kv_block, pfk);
      }
      for (size_t g = 0; g < hg; ++g) {
        // This head's share of the next block's V (and of its K when Q.K^T runs head by head).
        const size_t k0 = klen * g / hg, k1 = klen * (g + 1) / hg, v0 = vlen * g / hg, v1 = vlen * (g + 1) / hg;
        const size_t r0 = krest_len * g / hg, r1 = krest_len * (g + 1) / hg;
        attend_block(A, P, x, it, it.kvh0 + g, head_params(x, P.kv_block, g), g * Mh, Mh, n0, nb, first, false,
                     keys_outer, keys_outer ? RowPrefetch{} : spread(kn + k0, k1 - k0, nullptr, 0, nb, pft.to_l1),
                     spread(vn + v0, v1 - v0, krest + r0, r1 - r0, pv_steps, pft.to_l1));
      }
    } else {
      // One phase ahead: this block's V rows during its Q.K^T, the next block's K rows during P.V.
      const size_t h = it.kvh0;
      attend_block(A, P, x, it, h, head_params(x, P.kv_block, 0), 0, Mh, n0, nb, first, first, false,
                   rows_prefetch(A.v + it.b * A.vst.b + h * A.vst.h + n0 * A.vst.s, A.vst.s, nb, A.head_dim, pft.to_l1),
                   rows_prefetch(A.k + it.b * A.kst.b + h * A.kst.h + (n0 + nb) * A.kst.s, A.kst.s, next_nb, A.head_dim,
                                 pft.to_l1));
    }
    first = false;
  }
  if (first) {  // no key in range (an empty KV split): an empty partial
    for (size_t row = 0; row < M; ++row) {
      x.row_max[row] = kNegInf;
      x.row_sum[row] = 0.0f;
    }
    std::memset(x.acc, 0, M * D * sizeof(float));
  }

  if (P.kv_splits == 1) {
    for (size_t row = 0; row < M; ++row) {
      const size_t h = row_query_head(it, rep, row), pos = row_position(it, row);
      float* o = A.out + it.b * A.o.b + h * A.o.h + pos * A.o.s;
      const float inv = x.row_sum[row] > 0.0f ? 1.0f / x.row_sum[row] : 0.0f;  // fully masked row -> 0
      const vf vinv = vset1(inv);
      const float* a = x.acc + row * D;
      size_t j = 0;
      for (; j + NF <= D; j += NF) vstore(o + j, vmul(vload(a + j), vinv));
      for (; j < D; ++j) o[j] = a[j] * inv;
    }
  }
  return done();
}

// Flash-decoding merge of one (batch, KV head group, query block), or of part `chunk` of its rows
// in `chunks` equal parts: rescale each split's partial to the common max and normalise.
void merge_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* partials,
                size_t group, size_t chunk = 0, size_t chunks = 1) {
  const Item it = decode_item(group * P.kv_splits, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, M = P.heads_per_item * rep * it.qn;
  for (size_t row = M * chunk / chunks; row < M * (chunk + 1) / chunks; ++row) {
    const size_t h = row_query_head(it, rep, row), pos = row_position(it, row);
    float m = kNegInf;
    for (size_t sp = 0; sp < P.kv_splits; ++sp) {
      const float mx = partial_record(partials, L, P, group * P.kv_splits + sp).max[row];
      if (mx > m) m = mx;
    }
    float* o = A.out + it.b * A.o.b + h * A.o.h + pos * A.o.s;
    float total = 0.0f;
    for (size_t sp = 0; sp < P.kv_splits; ++sp) {
      const Partial rec = partial_record(partials, L, P, group * P.kv_splits + sp);
      const float mx = rec.max[row];
      const float sm = rec.sum[row];
      const float* a = rec.acc + row * D;
      const float c = mx == kNegInf ? 0.0f : std::exp(mx - m);
      total += sm * c;
      const vf vc = vset1(c);
      size_t j = 0;
      if (sp == 0) {
        for (; j + NF <= D; j += NF) vstore(o + j, vmul(vload(a + j), vc));
        for (; j < D; ++j) o[j] = a[j] * c;
      } else {
        for (; j + NF <= D; j += NF) vstore(o + j, vfma(vload(a + j), vc, vload(o + j)));
        for (; j < D; ++j) o[j] += a[j] * c;
      }
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    scale_row(o, D, inv);
  }
}

// ---------------------------------------------------------------------------------------------
// The least-work decode step: the bench's "step" rows (qsdpa/_bench.py StepProbe), timed beside
// qsdpa on the same cold layers after the same pause, so that a cold decode target is set against
// what a kernel of these semantics cannot avoid on this core in the same rounds, not only against
// a plain read. Per key and KV head: the exact int8 dots of the group's query rows (and the key's
// sum in the u8 scheme) with this variant's dot instructions, left in their accumulators (a real
// kernel must also reduce each key's dots out of them: left out); per block of keys and KV head the
// kernel's own qparam gather, the least a softmax can do (scores from a block of dots, the row max,
// exp, the sum, the V scale folded into each weight, the V zero-point term), and fp32 P.V of every
// query row over the widened int8 V row. The dots it never reduces cannot feed the softmax, which
// reads a block of zero dots instead: every weight is then exp(0) times the key's V scale. The
// next block is fetched during each, evenly, as the kernel does (half its K during Q.K^T, the rest
// with V), into L1 or L2 (to_l1). Keys split evenly over the threads; no masks, no per-call checks
// beyond the binding's, no merge.
// The totals it returns let the tests check that it did read and use every byte: the sum of all
// its dots (exact while each fold's sum fits int32: `fold` in step_thread), of the key sums, and
// of P.V.
constexpr size_t kStepBlock = 64;

struct StepTotals {
  long long dots = 0, key_sums = 0;
  double pv = 0.0;
};

// P.V of R rows (weights w, ldw apart) over NV vectors of columns of nb V rows (ldv apart), into
// acc (lda apart); a prefetch piece per key.
template <int R, int NV>
inline void step_pv(size_t nb, const float* w, size_t ldw, const int8_t* v, size_t ldv, float* acc, size_t lda,
                    const RowPrefetch& pf, size_t& step) {
  vf t[R][NV];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < NV; ++i) t[r][i] = vload(acc + r * lda + i * NF);
  for (size_t j = 0; j < nb; ++j, v += ldv) {
    pf.at(step++);
    vf x[NV];
    for (int i = 0; i < NV; ++i) x[i] = vcvt_s8(v + i * NF);
    for (int r = 0; r < R; ++r) {
      const vf wr = vset1(w[r * ldw + j]);
      for (int i = 0; i < NV; ++i) t[r][i] = vfma(wr, x[i], t[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < NV; ++i) vstore(acc + r * lda + i * NF, t[r][i]);
}

template <int R>
inline void step_pv_cols(size_t nb, size_t D, const float* w, size_t ldw, const int8_t* v, size_t ldv, float* acc,
                         size_t lda, const RowPrefetch& pf, size_t& step) {
  constexpr size_t kCols = 4 * NF;
  size_t c = 0;
  for (; c + kCols <= D; c += kCols) step_pv<R, 4>(nb, w, ldw, v + c, ldv, acc + c, lda, pf, step);
  switch ((D - c) / NF) {  // D is a multiple of NF (qsdpa_decode_step_probe_refusal)
    case 1: step_pv<R, 1>(nb, w, ldw, v + c, ldv, acc + c, lda, pf, step); break;
    case 2: step_pv<R, 2>(nb, w, ldw, v + c, ldv, acc + c, lda, pf, step); break;
    case 3: step_pv<R, 3>(nb, w, ldw, v + c, ldv, acc + c, lda, pf, step); break;
    default: break;
  }
}

// One thread's share of the step, keys [k_begin, k_end): REP query rows per KV head, HD the head
// dim when known at compile time (else 0). s: the thread's scratch (step_scratch).
template <int REP, size_t HD>
void step_thread(const AttentionArgs& A, size_t k_begin, size_t k_end, bool to_l1, unsigned char* s, StepTotals& out) {
  const size_t H = A.kv_heads, D = HD ? HD : A.head_dim, B = kStepBlock, ldq = query_row_elems(D);
  qelem* q = reinterpret_cast<qelem*>(s);
  unsigned char* params = s + align_up(H * REP * ldq * sizeof(qelem));
  float* w = reinterpret_cast<float*>(params + align_up(H * 4 * B * sizeof(float)));
  float* acc = w + REP * B;
  int32_t* zdots = reinterpret_cast<int32_t*>(acc + H * REP * D);
  // The query rows as the kernel packs them (run_item): u8 q + 128, or int16 q - zq.
  for (size_t row = 0; row < H * REP; ++row) {
    const int8_t* in = A.q8 + row * A.q.h;
    const int32_t zq = A.q_zp[row * A.q_qp.h];
    qelem* o = q + row * ldq;
    for (size_t d = 0; d < D; ++d) o[d] = static_cast<qelem>(kQkU8 ? in[d] + 128 : in[d] - zq);
    for (size_t d = D; d < ldq; ++d) o[d] = 0;
  }
  // Zeroed, so that the softmax's lanes past a short last block read finite qparams.
  std::memset(params, 0, H * 4 * B * sizeof(float));
  std::memset(acc, 0, H * REP * D * sizeof(float));
  std::memset(zdots, 0, B * sizeof(int32_t));
  // Keys per fold of the dot accumulators into the totals: |dot| <= D * 255 * 128 per key and head.
  const size_t fold = std::max<size_t>(1, std::min<size_t>(B, (size_t(1) << 16) / (H * D)));
  const size_t kbytes = A.kst.s, vbytes = A.vst.s;  // one key's row of every head (contiguous)
  const size_t row_tiles = (REP + 3) / 4, col_tiles = (D / NF + 4 - 1) / 4;
  float row_sums[REP] = {}, zterms[REP] = {};
  for (size_t n0 = k_begin; n0 < k_end; n0 += B) {
    const size_t nb = std::min(B, k_end - n0), next_nb = std::min(B, k_end - n0 - nb);
    const int8_t* kblk = A.k + n0 * kbytes;
    const int8_t* vblk = A.v + n0 * vbytes;
    if (n0 == k_begin) {
      prefetch_row(kblk, nb * kbytes);
      prefetch_row(vblk, nb * vbytes);
    }
    const size_t klen = next_nb * kbytes, vlen = next_nb * vbytes, klen_qk = klen / 2 / 64 * 64;
    const RowPrefetch pfk = spread(kblk + nb * kbytes, klen_qk, nullptr, 0, nb * H, to_l1);
    const RowPrefetch pfv = spread(vblk + nb * vbytes, vlen, kblk + nb * kbytes + klen_qk, klen - klen_qk,
                                   nb * H * row_tiles * col_tiles, to_l1);
    size_t step = 0;
    for (size_t j0 = 0; j0 < nb; j0 += fold) {
      vi a[REP];
      for (int r = 0; r < REP; ++r) a[r] = dzero();
      vi ks = dzero();
      for (size_t j = j0; j < std::min(nb, j0 + fold); ++j)
        for (size_t g = 0; g < H; ++g) {
          pfk.at(step++);
          const int8_t* k = kblk + j * kbytes + g * A.kst.h;
          const qelem* qg = q + g * REP * ldq;
          for (size_t d = 0; d < D; d += QKB) {
            const vk kv = kload16(k + d);
            if constexpr (kQkU8) ks = ksum_step(ks, kv);
            for (int r = 0; r < REP; ++r) a[r] = qdot16(a[r], kv, qg + r * ldq + d);
          }
        }
      for (int r = 0; r < REP; ++r) out.dots += dhsum(a[r]);
      if constexpr (kQkU8) out.key_sums += dhsum(ks);
    }
    gather_params(nb, H, A.k_zp + n0 * A.k_qp.s, A.k_scale + n0 * A.k_qp.s, A.k_qp.s, A.k_qp.h,
                  A.v_zp + n0 * A.v_qp.s, A.v_scale + n0 * A.v_qp.s, A.v_qp.s, A.v_qp.h, B, params);
    step = 0;
    for (size_t g = 0; g < H; ++g) {
      const int32_t* kzp = reinterpret_cast<const int32_t*>(params) + g * 4 * B;
      const float* ksc = reinterpret_cast<const float*>(kzp + B);
      const float* vsc = ksc + B;
      const float* vzp = vsc + B;
      for (int r = 0; r < REP; ++r) {
        const vf coef = vset1(A.q_scale[(g * REP + r) * A.q_qp.h]);
        float* wr = w + r * B;
        vf m = vset1(kNegInf);
        for (size_t i = 0; i < B; i += NF) {
          const vf sc = vscores(zdots + i, kzp + i, 0, ksc + i, coef);
          vstore(wr + i, sc);
          m = vmax(m, sc);
        }
        const vf vm = vset1(vhmax(m));
        vf sum = vzero(), z = vzero();
        for (size_t i = 0; i < B; i += NF) {
          const vf p = vexp(vsub(vload(wr + i), vm));
          sum = vadd(sum, p);
          const vf wv = vmul(p, vload(vsc + i));
          vstore(wr + i, wv);
          z = vfma(wv, vload(vzp + i), z);
        }
        row_sums[r] += vhsum(sum);
        zterms[r] += vhsum(z);
      }
      const int8_t* vg = vblk + g * A.vst.h;
      float* ag = acc + g * REP * D;
      for (int r0 = 0; r0 < REP; r0 += 4) {
        switch (REP - r0 < 4 ? REP - r0 : 4) {
          case 1: step_pv_cols<1>(nb, D, w + r0 * B, B, vg, vbytes, ag + r0 * D, D, pfv, step); break;
          case 2: step_pv_cols<2>(nb, D, w + r0 * B, B, vg, vbytes, ag + r0 * D, D, pfv, step); break;
          case 3: step_pv_cols<3>(nb, D, w + r0 * B, B, vg, vbytes, ag + r0 * D, D, pfv, step); break;
          default: step_pv_cols<4>(nb, D, w + r0 * B, B, vg, vbytes, ag + r0 * D, D, pfv, step); break;
        }
      }
    }
    pfv.rest(step);
  }
  double pv = 0.0;  // row by row in vectors: a scalar chain of dependent adds took ~5 us a call
  for (size_t row = 0; row < H * REP; ++row) {
    vf sum = vzero();
    for (size_t i = 0; i < D; i += NF) sum = vadd(sum, vload(acc + row * D + i));
    pv += vhsum(sum);
  }
  out.pv += pv;
  __asm__ volatile("" ::"m"(row_sums), "m"(zterms));  // the softmax's sums: work a kernel must do
}

template <int REP>
void step_thread_hd(const AttentionArgs& A, size_t k_begin, size_t k_end, bool to_l1, unsigned char* s, StepTotals& out) {
  if (A.head_dim == 128) step_thread<REP, 128>(A, k_begin, k_end, to_l1, s, out);
  else if (A.head_dim == 64) step_thread<REP, 64>(A, k_begin, k_end, to_l1, s, out);
  else step_thread<REP, 0>(A, k_begin, k_end, to_l1, s, out);
}

void step_thread_any(const AttentionArgs& A, size_t k_begin, size_t k_end, bool to_l1, unsigned char* s, StepTotals& out) {
  switch (A.q_heads / A.kv_heads) {
    case 1: step_thread_hd<1>(A, k_begin, k_end, to_l1, s, out); break;
    case 2: step_thread_hd<2>(A, k_begin, k_end, to_l1, s, out); break;
    case 3: step_thread_hd<3>(A, k_begin, k_end, to_l1, s, out); break;
    case 4: step_thread_hd<4>(A, k_begin, k_end, to_l1, s, out); break;
    case 5: step_thread_hd<5>(A, k_begin, k_end, to_l1, s, out); break;
    case 6: step_thread_hd<6>(A, k_begin, k_end, to_l1, s, out); break;
    case 7: step_thread_hd<7>(A, k_begin, k_end, to_l1, s, out); break;
    case 8: step_thread_hd<8>(A, k_begin, k_end, to_l1, s, out); break;
    default: break;  // qsdpa_decode_step_probe_refusal refuses it
  }
}

// A thread's scratch, kept across calls (no allocation once grown), 64-byte aligned.
unsigned char* step_scratch(const AttentionArgs& A) {
  const size_t rows = A.q_heads, rep = A.q_heads / A.kv_heads, D = A.head_dim;
  const size_t bytes = align_up(rows * query_row_elems(D) * sizeof(qelem)) +  // step_thread's carving
                       align_up(A.kv_heads * 4 * kStepBlock * sizeof(float)) +
                       (rep * kStepBlock + rows * D) * sizeof(float) + kStepBlock * sizeof(int32_t);
  thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
}

}  // namespace
}  // namespace avx512_vnni
}  // namespace qsdpa

// The decode prefetch tuning in force (prefetch_tuning above), read and set by the module's
// _prefetch_tuning / _set_prefetch_tuning (tests, A/B timing); k_during_qk is checked there.
void qsdpa_prefetch_tuning_get__avx512_vnni(bool* to_l1, bool* walk_pages, unsigned* k_during_qk) {
  const qsdpa::avx512_vnni::PrefetchTuning t = qsdpa::avx512_vnni::prefetch_tuning();
  *to_l1 = t.to_l1, *walk_pages = t.walk_pages, *k_during_qk = t.k_during_qk;
}
void qsdpa_prefetch_tuning_set__avx512_vnni(bool to_l1, bool walk_pages, unsigned k_during_qk) {
  qsdpa::avx512_vnni::set_prefetch_tuning({to_l1, walk_pages, k_during_qk});
}

// Tuning of this variant (from the registry), for plan_attention().
extern const size_t qsdpa_attention_kv_block__avx512_vnni = 256;
extern const size_t qsdpa_attention_max_rows__avx512_vnni = 64;

void qsdpa_flash_attention_s8__avx512_vnni(const qsdpa::AttentionArgs& args, const qsdpa::AttentionPlan& plan,
    const qsdpa::ScratchLayout& layout, unsigned char* scratch) {
  using namespace qsdpa::avx512_vnni;
  unsigned char* partials = scratch + layout.partials_off;
  const int threads = static_cast<int>(plan.threads);
  if (threads == 1) {  // no parallel region: libgomp allocates a team for every 1-thread region
    QSDPA_TRACE_THREAD(kTraceThreadStart, 0);
    ItemQueue queue;
    for (NextItem n{queue.take(), false}; n.item < plan.items;)
      n = run_item(args, plan, layout, scratch, partials, n.item, queue, n.fetched);
    QSDPA_TRACE_THREAD(kTraceItemsEnd, 0);
    const bool fault = args.kv_scale_fault && *args.kv_scale_fault;
    for (size_t g = 0; plan.kv_splits > 1 && !fault && g < plan.items / plan.kv_splits; ++g)
      merge_item(args, plan, layout, partials, g);
    QSDPA_TRACE_THREAD(kTraceThreadEnd, 0);
    return;
  }
  // No OpenMP barrier inside the region: libgomp spins only ~100 times before a futex sleep once
  // it manages more threads than there are CPUs (any second pool: an OpenMP region entered from
  // another thread of the process, as after ExecuTorch's ops here), and a sleeping vCPU takes tens of
  // microseconds to wake. The threads spin-wait for each other instead (spin_until), and the master
  // leaves last, so that the region's closing barrier finds the others there. 2-thread llama3-8b
  // decode on the Zen 4 VM, paired A/B, time with barriers / without: with a second pool alive
  // 1.057 (8192 keys) and 1.21 (2048) back to back, 1.057 and 1.12 after the bench's pause;
  // without one 0.995-1.02.
  std::atomic<int> arrived{0}, merged{0};
  ItemQueue queue;
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    QSDPA_TRACE_THREAD(kTraceThreadStart, thread);
    unsigned char* slice = scratch + layout.slice_bytes * static_cast<size_t>(thread);
    for (NextItem n{queue.take(), false}; n.item < plan.items;)
      n = run_item(args, plan, layout, slice, partials, n.item, queue, n.fetched);
    QSDPA_TRACE_THREAD(kTraceItemsEnd, thread);
    if (plan.kv_splits > 1) {  // without splits each item wrote its rows of `out`: nothing to wait for
      const int team = omp_get_num_threads();
      arrived.fetch_add(1, std::memory_order_release);  // this thread's partial records are complete
      spin_until(arrived, team);
      const bool fault = args.kv_scale_fault && __atomic_load_n(args.kv_scale_fault, __ATOMIC_RELAXED);
      if (!fault) {
        // Fewer groups than threads (decode at B = 1 is one group): each group's rows are shared out.
        const size_t groups = plan.items / plan.kv_splits;
        const size_t chunks = groups < static_cast<size_t>(team) ? static_cast<size_t>(team) : 1;
        for (size_t i = static_cast<size_t>(thread); i < groups * chunks; i += static_cast<size_t>(team))
          merge_item(args, plan, layout, partials, i / chunks, i % chunks, chunks);
      }
      merged.fetch_add(1, std::memory_order_release);
      if (thread == 0) spin_until(merged, team);
    }
    QSDPA_TRACE_THREAD(kTraceThreadEnd, thread);
  }
}

// The least-work decode step (step_thread above) on `threads` threads of the kernels' OpenMP team,
// keys split evenly in whole blocks. The binding has checked the arguments
// (qsdpa_decode_step_probe_refusal).
void qsdpa_decode_step_probe__avx512_vnni(const qsdpa::AttentionArgs& A, int threads, bool to_l1, long long* dots,
                                             long long* key_sums, double* pv) {
  using namespace qsdpa::avx512_vnni;
  const size_t n = A.n_keys;
  const auto first_key = [n](int t, int nt) -> size_t {
    return t >= nt ? n : n * static_cast<size_t>(t) / static_cast<size_t>(nt) / kStepBlock * kStepBlock;
  };
  StepTotals total;
  if (threads == 1) {  // no parallel region, as in the kernel
    step_thread_any(A, 0, n, to_l1, step_scratch(A), total);
  } else {
    long long d = 0, k = 0;
    double p = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : d, k, p)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      StepTotals mine;
      step_thread_any(A, first_key(t, nt), first_key(t + 1, nt), to_l1, step_scratch(A), mine);
      d += mine.dots, k += mine.key_sums, p += mine.pv;
    }
    total.dots = d, total.key_sums = k, total.pv = p;
  }
  *dots = total.dots, *key_sums = total.key_sums, *pv = total.pv;
}

// Why the step probe cannot run on these arguments ("" when it can).
std::string qsdpa_decode_step_probe_refusal__avx512_vnni(const qsdpa::AttentionArgs& A) {
  using namespace qsdpa::avx512_vnni;
  if (!A.q8) return "the step probe needs an int8 query";
  if (A.batch != 1 || A.q_len != 1) return "the step probe runs decode at batch 1: query [1, 1, Hq, D]";
  if (A.q_heads / A.kv_heads > 8) return "the step probe takes at most 8 query heads per KV head";
  const size_t unit = static_cast<size_t>(NF > QKB ? NF : QKB);
  if (A.head_dim % unit != 0)
    return "the step probe needs a head dim that is a multiple of " + std::to_string(unit) + " in this variant";
  if (A.kst.h != A.head_dim || A.kst.s != A.kv_heads * A.head_dim || A.vst.h != A.head_dim ||
      A.vst.s != A.kv_heads * A.head_dim)
    return "the step probe needs key and value contiguous as [1, S, H, D]";
  return "";
}
