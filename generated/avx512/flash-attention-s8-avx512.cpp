// Generated from templates/flash_attention.cpp.j2 for ISA 'avx512' by `python -m codegen` — do not edit.
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
//     weight) and z_row = sum_t W[t] * z_v[t]: int8 V rows are widened in registers, never
//     dequantized into memory.
// Decode with too few items for the threads splits the KV range (flash-decoding) and merges (max,
// sum, acc) afterwards. Scratch: one slice per thread of the process-wide arena, laid out by
// qsdpa::scratch_layout; nothing in it is zero-filled that the kernel overwrites.
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num() { return 0; }  // built without OpenMP: one thread
#endif

#include <cmath>
#include <cstring>
#include <limits>

#include "attention.h"
#include "avx512/simd-avx512.h"

void qsdpa_qk_gemm_f32s8__avx512(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);

namespace qsdpa {
namespace avx512 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

// One row of scores -> probabilities for this block, updating the row's running max and sum.
// Returns the factor the row's accumulator must be rescaled by (1 on the first block: unused).
inline float softmax_row(float* s, size_t nb, float& row_max, float& row_sum, bool first) {
  vf vm = vset1(kNegInf);
  size_t j = 0;
  for (; j + NF <= nb; j += NF) vm = vmax(vm, vload(s + j));
  if (j < nb) vm = vmax(vm, vload_fill(s + j, static_cast<int>(nb - j), kNegInf));
  const float block_max = vhmax(vm);
  const float old_max = first ? kNegInf : row_max;
  const float new_max = block_max > old_max ? block_max : old_max;
  if (new_max == kNegInf) {  // every key so far is masked out: p = 0, the accumulator stays 0
    std::memset(s, 0, nb * sizeof(float));
    if (first) row_sum = 0.0f;
    row_max = kNegInf;
    return 1.0f;
  }
  const vf vmx = vset1(new_max);
  vf vs = vzero();
  for (j = 0; j + NF <= nb; j += NF) {
    const vf p = vexp(vsub(vload(s + j), vmx));
    vstore(s + j, p);
    vs = vadd(vs, p);
  }
  if (j < nb) {
    const int rest = static_cast<int>(nb - j);
    const vf p = vexp(vsub(vload_fill(s + j, rest, kNegInf), vmx));  // padded lanes: exp(-inf) = 0
    vstore_n(s + j, p, rest);
    vs = vadd(vs, p);
  }
  const float block_sum = vhsum(vs);
  row_max = new_max;
  if (first) {
    row_sum = block_sum;
    return 1.0f;
  }
  const float c = old_max == kNegInf ? 0.0f : std::exp(old_max - new_max);
  row_sum = row_sum * c + block_sum;
  return c;
}

// Prefetch of two contiguous byte ranges (K's, then V's) into L2, a few lines per step of a
// compute loop rather than in a burst.
struct LinePrefetch {
  const int8_t* p = nullptr;
  const int8_t* end = nullptr;
  const int8_t* p2 = nullptr;
  const int8_t* end2 = nullptr;
  size_t per_step = 0;
  inline void run(size_t budget) {
    while (budget) {
      if (p >= end) {
        if (p2 >= end2) return;
        p = p2;
        end = end2;
        p2 = end2;
      }
      const size_t left = static_cast<size_t>(end - p + 63) / 64;
      const size_t n = left < budget ? left : budget;
      for (size_t i = 0; i < n; ++i) __builtin_prefetch(p + 64 * i, 0, 2);
      p += 64 * n;
      budget -= n;
    }
  }
  inline void step() { run(per_step); }
  inline void finish() { run(~size_t(0)); }
};

// Exact int32 dots of TRt query rows (int16, zero-padded to whole steps) with TKt int8 key rows.
template <int TRt, int TKt>
inline void qk_tile(size_t head_dim, const int16_t* q, size_t ldq, const int8_t* k, size_t ldk, int32_t* dots,
                    size_t ldd) {
  vi acc[TRt * TKt];
  for (int i = 0; i < TRt * TKt; ++i) acc[i] = dzero();
  size_t d = 0;
  for (; d + QKB <= head_dim; d += QKB) {
    vk kv[TKt];
    for (int j = 0; j < TKt; ++j) kv[j] = kload16(k + j * ldk + d);
    for (int r = 0; r < TRt; ++r)
      for (int j = 0; j < TKt; ++j) acc[r * TKt + j] = qdot16(acc[r * TKt + j], kv[j], q + r * ldq + d);
  }
  if (d < head_dim) {  // the key row's tail; the query's padding is zero
    const int rest = static_cast<int>(head_dim - d);
    vk kv[TKt];
    for (int j = 0; j < TKt; ++j) kv[j] = kload16_n(k + j * ldk + d, rest);
    for (int r = 0; r < TRt; ++r)
      for (int j = 0; j < TKt; ++j) acc[r * TKt + j] = qdot16(acc[r * TKt + j], kv[j], q + r * ldq + d);
  }
  alignas(64) int32_t sums[TRt * TKt];
  if ((TRt * TKt) % 8 == 0) {
    for (int i = 0; i < TRt * TKt; i += 8) dreduce8(acc + i, sums + i);
  } else {
    for (int i = 0; i < TRt * TKt; ++i) sums[i] = dhsum(acc[i]);
  }
  for (int r = 0; r < TRt; ++r) std::memcpy(dots + r * ldd, sums + r * TKt, sizeof(int32_t) * TKt);
}

template <int TRt>
inline void qk_rows(size_t nb, size_t head_dim, const int16_t* q, size_t ldq, const int8_t* k, size_t ldk,
                    int32_t* dots, size_t ldd, const int8_t* pf, size_t pf_ld, size_t pf_n,
                    LinePrefetch* lines) {
  constexpr size_t kKeys = 4;
  size_t j = 0;
  for (; j + kKeys <= nb; j += kKeys) {
    for (size_t t = 0; t < kKeys && j + t < pf_n; ++t) prefetch_row(pf + (j + t) * pf_ld, head_dim);
    if (lines) lines->step();
    // Key rows 8 tiles ahead into L1 (strided rows are beyond the L1 prefetchers); the first row
    // tile only (the one given prefetch work), later ones find them in L1/L2.
    for (size_t t = 0; (pf_n || lines) && t < kKeys && j + 8 * kKeys + t < nb; ++t)
      for (size_t o = 0; o < head_dim; o += 64) __builtin_prefetch(k + (j + 8 * kKeys + t) * ldk + o, 0, 3);
    qk_tile<TRt, kKeys>(head_dim, q, ldq, k + j * ldk, ldk, dots + j, ldd);
  }
  for (size_t t = j; t < pf_n; ++t) prefetch_row(pf + t * pf_ld, head_dim);
  if (lines) lines->finish();
  switch (nb - j) {
    case 1: qk_tile<TRt, 1>(head_dim, q, ldq, k + j * ldk, ldk, dots + j, ldd); break;
    case 2: qk_tile<TRt, 2>(head_dim, q, ldq, k + j * ldk, ldk, dots + j, ldd); break;
    case 3: qk_tile<TRt, 3>(head_dim, q, ldq, k + j * ldk, ldk, dots + j, ldd); break;
    default: break;
  }
}

// W.V for TRt rows at columns [d0, d0 + NVt*NF) (with PARTIAL the last vector has `last` lanes),
// then acc = acc * rescale + (W.V - z_row), or acc = W.V - z_row on the item's first block.
template <int TRt, int NVt, bool PARTIAL>
inline void pv_tile(size_t nb, const float* w, size_t ldw, const int8_t* v, size_t ldv, size_t d0, int last,
                    const float* zterm, const float* rescale, float* acc, size_t lda, bool first,
                    const int8_t* pf = nullptr, size_t pf_ld = 0, size_t pf_n = 0, size_t pf_bytes = 0) {
  vf t[TRt][NVt];
  for (int r = 0; r < TRt; ++r)
    for (int i = 0; i < NVt; ++i) t[r][i] = vzero();
  const int8_t* vrow = v + d0;
#pragma GCC unroll 2
  for (size_t k = 0; k < nb; ++k, vrow += ldv) {
    if (k < pf_n) prefetch_row(pf + k * pf_ld, pf_bytes);  // spread over the key loop, not a burst
    vf bv[NVt];
    for (int i = 0; i < NVt; ++i)
      bv[i] = (PARTIAL && i == NVt - 1) ? vcvt_s8_n(vrow + i * NF, last) : vcvt_s8(vrow + i * NF);
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

template <int TRt>
inline void pv_rows(size_t nb, size_t head_dim, const float* w, size_t ldw, const int8_t* v, size_t ldv,
                    const float* zterm, const float* rescale, float* acc, size_t lda, bool first, const int8_t* pf,
                    size_t pf_ld, size_t pf_n) {
  constexpr size_t kCols = 4 * NF;
  size_t d0 = 0;
  if (head_dim < kCols) {
    for (size_t t = 0; t < pf_n; ++t) prefetch_row(pf + t * pf_ld, head_dim);
    pf_n = 0;
  }
  for (; d0 + kCols <= head_dim; d0 += kCols, pf_n = 0)
    pv_tile<TRt, 4, false>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first, pf, pf_ld,
                                       pf_n < nb ? pf_n : nb, head_dim);
  for (size_t t = nb; t < pf_n; ++t) prefetch_row(pf + t * pf_ld, head_dim);
  const size_t rem = head_dim - d0;
  if (rem == 0) return;
  const int nv = static_cast<int>((rem + NF - 1) / NF);
  const int last = static_cast<int>(rem - static_cast<size_t>(nv - 1) * NF);
  switch (nv) {
    case 1:
      if (last == NF) pv_tile<TRt, 1, false>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 1, true>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 2:
      if (last == NF) pv_tile<TRt, 2, false>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 2, true>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 3:
      if (last == NF) pv_tile<TRt, 3, false>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 3, true>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    case 4:
      if (last == NF) pv_tile<TRt, 4, false>(nb, w, ldw, v, ldv, d0, NF, zterm, rescale, acc, lda, first);
      else pv_tile<TRt, 4, true>(nb, w, ldw, v, ldv, d0, last, zterm, rescale, acc, lda, first);
      break;
    default: break;
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
  int8_t* vcopy;    // the block's V rows of one head, packed (strided caches)
  int32_t* kzp;     // the block's per-key qparams
  float* ksc;
  float* vsc;
  float* vzp;
  int16_t* q16;     // int8 query: item rows x ldq of (q - zq)
  float* qf;        // fp32 query: item rows x D
  float* qcoef;     // q scale * softmax scale
  int32_t* qsum;    // sum(q - zq)
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
  x.kzp = reinterpret_cast<int32_t*>(slice + L.params_off);
  x.ksc = reinterpret_cast<float*>(x.kzp + P.kv_block);
  x.vsc = x.ksc + P.kv_block;
  x.vzp = x.vsc + P.kv_block;
  x.q16 = reinterpret_cast<int16_t*>(slice + L.q_off);
  x.qf = reinterpret_cast<float*>(slice + L.q_off);
  x.qcoef = reinterpret_cast<float*>(slice + L.qscale_off);
  x.qsum = reinterpret_cast<int32_t*>(slice + L.qsum_off);
  return x;
}

// Keys [n0, n0 + nb) for the rows [row0, row0 + Mh) of KV head kvh: S = scale * Q.K^T, mask,
// online softmax, acc = acc * rescale + W.V - z.
// Prefetch into L2: with `lines` (all heads per item), the slice of the next block it names,
// spread over the Q.K^T tiles; otherwise one phase ahead: this block's V rows during Q.K^T, and
// during P.V the next block's K rows (k_after: k_after_n rows).
void attend_block(const AttentionArgs& A, const AttentionPlan& P, const Slice& x, const Item& it, size_t kvh,
                  size_t row0, size_t Mh, size_t n0, size_t nb, bool first, bool fetch_k, const int8_t* k_after,
                  size_t k_after_n, LinePrefetch* lines) {
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, ld_s = P.kv_block, ldq = query_row_elems(D);
  const size_t kqp = it.b * A.k_qp.b + kvh * A.k_qp.h, vqp = it.b * A.v_qp.b + kvh * A.v_qp.h;
  const int8_t* kblk = A.k + it.b * A.kst.b + kvh * A.kst.h + n0 * A.kst.s;
  const int8_t* vblk = A.v + it.b * A.vst.b + kvh * A.vst.h + n0 * A.vst.s;
  float* S = x.S;
  int32_t* dots = x.dots;
  const int16_t* q16 = x.q16 + row0 * ldq;
  float* row_max = x.row_max + row0;
  float* row_sum = x.row_sum + row0;
  float* rescale = x.rescale + row0;
  float* zterm = x.zterm + row0;
  float* acc = x.acc + row0 * D;
  if (fetch_k)  // the item's first block: nothing fetched it yet
    for (size_t j = 0; j < nb; ++j) prefetch_row(kblk + j * A.kst.s, D);
  for (size_t j = 0; j < nb; ++j) {  // gather the block's per-token qparams (strided in the cache)
    const size_t kq = kqp + (n0 + j) * A.k_qp.s, vq = vqp + (n0 + j) * A.v_qp.s;
    x.kzp[j] = A.k_zp[kq];
    x.ksc[j] = A.k_scale[kq];
    x.vsc[j] = A.v_scale[vq];
    x.vzp[j] = static_cast<float>(A.v_zp[vq]);
  }

  // S = scale * Q.K^T
  if (A.q8) {
    size_t r0 = 0;
    for (; r0 + 4 <= Mh; r0 += 4)
      qk_rows<4>(nb, D, q16 + r0 * ldq, ldq, kblk, A.kst.s, dots + r0 * ld_s, ld_s, vblk, A.vst.s,
                             r0 == 0 && !lines ? nb : 0, r0 == 0 ? lines : nullptr);
    switch (Mh - r0) {
      case 1: qk_rows<1>(nb, D, q16 + r0 * ldq, ldq, kblk, A.kst.s, dots + r0 * ld_s, ld_s, vblk, A.vst.s,
                                     r0 == 0 && !lines ? nb : 0, r0 == 0 ? lines : nullptr); break;
      case 2: qk_rows<2>(nb, D, q16 + r0 * ldq, ldq, kblk, A.kst.s, dots + r0 * ld_s, ld_s, vblk, A.vst.s,
                                     r0 == 0 && !lines ? nb : 0, r0 == 0 ? lines : nullptr); break;
      case 3: qk_rows<3>(nb, D, q16 + r0 * ldq, ldq, kblk, A.kst.s, dots + r0 * ld_s, ld_s, vblk, A.vst.s,
                                     r0 == 0 && !lines ? nb : 0, r0 == 0 ? lines : nullptr); break;
      default: break;
    }
    // d = dot(q - zq, k) - zk * sum(q - zq), in wrapping unsigned arithmetic (the result fits);
    // then qk_gemm's epilogue, float(d) * ((sq * scale) * sk), for bit-identical scores.
    for (size_t row = 0; row < Mh; ++row) {
      const int32_t* dr = dots + row * ld_s;
      float* sr = S + row * ld_s;
      const uint32_t qs = static_cast<uint32_t>(x.qsum[row0 + row]);
      const float coef = x.qcoef[row0 + row];
      for (size_t j = 0; j < nb; ++j) {
        const uint32_t d = static_cast<uint32_t>(dr[j]) - static_cast<uint32_t>(x.kzp[j]) * qs;
        sr[j] = static_cast<float>(static_cast<int32_t>(d)) * (coef * x.ksc[j]);
      }
    }
  } else {
    const QMatrix kmat{kblk, A.kst.s, A.k_scale + kqp + n0 * A.k_qp.s, A.k_qp.s, A.k_zp + kqp + n0 * A.k_qp.s,
                       A.k_qp.s, nullptr};
    qsdpa_qk_gemm_f32s8__avx512(Mh, nb, D, x.qf + row0 * D, D, kmat, A.scale, S, ld_s);
    // The prefetch work qk_rows spreads over its tiles for int8 queries, here in one go.
    if (lines) lines->finish();
    else
      for (size_t j = 0; j < nb; ++j) prefetch_row(vblk + j * A.vst.s, D);
  }

  // Mask, online softmax, then W = P * s_v and each row's V zero-point term.
  for (size_t row = 0; row < Mh; ++row) {
    const size_t h = row_query_head(it, rep, row0 + row), pos = row_position(it, row0 + row);
    float* s = S + row * ld_s;
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
    rescale[row] = softmax_row(s, nb, row_max[row], row_sum[row], first);
    vf zt = vzero();
    size_t j = 0;
    for (; j + NF <= nb; j += NF) {
      const vf w = vmul(vload(s + j), vload(x.vsc + j));
      vstore(s + j, w);
      zt = vfma(w, vload(x.vzp + j), zt);
    }
    float z = vhsum(zt);
    for (; j < nb; ++j) {
      s[j] *= x.vsc[j];
      z += s[j] * x.vzp[j];
    }
    zterm[row] = z;
  }

  // acc = acc * rescale + W.V - z. Strided V rows (H*D bytes apart) of a long block are packed
  // first: the column tiles pass over the block's rows D / (PV_VECS * NF) times (per row tile),
  // and rows that far apart share a handful of L1 sets, so unpacked they would come from L2 on
  // every pass. Up to 64 rows stay in L1 unpacked (measured: packing them costs more than it saves).
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
  size_t r0 = 0;
  for (; r0 + 4 <= Mh; r0 += 4)
    pv_rows<4>(nb, D, S + r0 * ld_s, ld_s, vsrc, ldv, zterm + r0, rescale + r0, acc + r0 * D, D, first,
                           k_after, A.kst.s, r0 == 0 && !lines ? k_after_n : 0);
  switch (Mh - r0) {
    case 1: pv_rows<1>(nb, D, S + r0 * ld_s, ld_s, vsrc, ldv, zterm + r0, rescale + r0, acc + r0 * D, D,
                                   first, k_after, A.kst.s, r0 == 0 && !lines ? k_after_n : 0); break;
    case 2: pv_rows<2>(nb, D, S + r0 * ld_s, ld_s, vsrc, ldv, zterm + r0, rescale + r0, acc + r0 * D, D,
                                   first, k_after, A.kst.s, r0 == 0 && !lines ? k_after_n : 0); break;
    case 3: pv_rows<3>(nb, D, S + r0 * ld_s, ld_s, vsrc, ldv, zterm + r0, rescale + r0, acc + r0 * D, D,
                                   first, k_after, A.kst.s, r0 == 0 && !lines ? k_after_n : 0); break;
    default: break;
  }
}

void run_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* slice,
              unsigned char* partials, size_t item) {
  const Item it = decode_item(item, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, Mh = rep * it.qn, M = P.heads_per_item * Mh;
  const size_t ldq = query_row_elems(D);
  const Slice x = carve(L, P, M, slice);

  // Pack the item's query rows. int8 rows become int16 (q - zq), zero-padded to ldq, with their
  // sum and scale * softmax scale.
  for (size_t row = 0; row < M; ++row) {
    const size_t h = row_query_head(it, rep, row), pos = row_position(it, row);
    const size_t src = it.b * A.q.b + h * A.q.h + pos * A.q.s;
    if (A.q8) {
      const size_t qp = it.b * A.q_qp.b + h * A.q_qp.h + pos * A.q_qp.s;
      const int32_t zq = A.q_zp[qp];
      const int8_t* in = A.q8 + src;
      int16_t* o = x.q16 + row * ldq;
      int32_t sum = 0;
      for (size_t d = 0; d < D; ++d) {
        o[d] = static_cast<int16_t>(in[d] - zq);
        sum += o[d];
      }
      for (size_t d = D; d < ldq; ++d) o[d] = 0;
      x.qsum[row] = sum;
      x.qcoef[row] = A.q_scale[qp] * A.scale;
    } else {
      std::memcpy(x.qf + row * D, A.qf + src, D * sizeof(float));
    }
  }

  // Keys this item may attend, then its share of them when the KV range is split.
  size_t key_end = A.n_keys;
  if (A.causal && A.start_pos + it.q0 + it.qn < key_end) key_end = A.start_pos + it.q0 + it.qn;
  size_t k_begin = 0, k_end = key_end;
  if (P.kv_splits > 1) {  // equal shares, in whole 16-key steps
    const size_t per = ((key_end + P.kv_splits - 1) / P.kv_splits + 15) / 16 * 16;
    k_begin = it.split * per;
    k_end = (it.split + 1) * per;
    if (k_begin > key_end) k_begin = key_end;
    if (k_end > key_end) k_end = key_end;
  }

  // Block-major over the item's KV heads: in a [B, S, H, D] cache the heads of a block of keys are
  // one contiguous stretch of memory, read front to back.
  bool first = true;
  for (size_t n0 = k_begin; n0 < k_end; n0 += P.kv_block) {
    const size_t nb = k_end - n0 < P.kv_block ? k_end - n0 : P.kv_block;
    const size_t after = k_end - n0 - nb;
    const size_t next_nb = after < P.kv_block ? after : P.kv_block;
    const size_t hg = P.heads_per_item;
    if (hg > 1) {
      // All heads of a block of keys are one contiguous stretch of K and one of V: the first
      // block is fetched up front, each next one while this one is computed, a slice per head.
      const size_t kbytes = A.kst.s, vbytes = A.vst.s;  // one key's row of every head
      const int8_t* kb = A.k + it.b * A.kst.b + it.kvh0 * A.kst.h;
      const int8_t* vb = A.v + it.b * A.vst.b + it.kvh0 * A.vst.h;
      if (first) {
        LinePrefetch now{kb + n0 * kbytes, kb + (n0 + nb) * kbytes, vb + n0 * vbytes, vb + (n0 + nb) * vbytes, 0};
        now.finish();
      }
      const size_t klen = next_nb * kbytes, vlen = next_nb * vbytes;
      const int8_t* kn = kb + (n0 + nb) * kbytes;
      const int8_t* vn = vb + (n0 + nb) * vbytes;
      const size_t tiles = (nb + 4 - 1) / 4;
      for (size_t g = 0; g < hg; ++g) {
        // This head's share of the next block, K then V, a few lines per Q.K^T tile.
        const size_t k0 = klen * g / hg, k1 = klen * (g + 1) / hg, v0 = vlen * g / hg, v1 = vlen * (g + 1) / hg;
        const size_t share = (k1 - k0 + v1 - v0 + 63) / 64;
        LinePrefetch lines{kn + k0, kn + k1, vn + v0, vn + v1, (share + tiles - 1) / tiles};
        attend_block(A, P, x, it, it.kvh0 + g, g * Mh, Mh, n0, nb, first, false, nullptr, 0, &lines);
      }
    } else {
      // K of the next block is fetched during this one's P.V, V during its Q.K^T (attend_block).
      attend_block(A, P, x, it, it.kvh0, 0, Mh, n0, nb, first, first, A.k + it.b * A.kst.b + it.kvh0 * A.kst.h +
                   (n0 + nb) * A.kst.s, next_nb, nullptr);
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
  } else {
    unsigned char* rec = partials + item * L.partial_record_bytes;
    const size_t mbytes = align_up(P.rows_per_item * sizeof(float));
    std::memcpy(rec, x.row_max, M * sizeof(float));
    std::memcpy(rec + mbytes, x.row_sum, M * sizeof(float));
    std::memcpy(rec + 2 * mbytes, x.acc, M * D * sizeof(float));
  }
}

// Flash-decoding merge of one (batch, KV head group, query block): rescale each split's partial
// to the common max and normalise.
void merge_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* partials,
                size_t group) {
  const Item it = decode_item(group * P.kv_splits, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, M = P.heads_per_item * rep * it.qn;
  const size_t mbytes = align_up(P.rows_per_item * sizeof(float));
  for (size_t row = 0; row < M; ++row) {
    const size_t h = row_query_head(it, rep, row), pos = row_position(it, row);
    float m = kNegInf;
    for (size_t sp = 0; sp < P.kv_splits; ++sp) {
      const float* mx = reinterpret_cast<const float*>(partials + (group * P.kv_splits + sp) * L.partial_record_bytes);
      if (mx[row] > m) m = mx[row];
    }
    float* o = A.out + it.b * A.o.b + h * A.o.h + pos * A.o.s;
    float total = 0.0f;
    for (size_t sp = 0; sp < P.kv_splits; ++sp) {
      const unsigned char* rec = partials + (group * P.kv_splits + sp) * L.partial_record_bytes;
      const float mx = reinterpret_cast<const float*>(rec)[row];
      const float sm = reinterpret_cast<const float*>(rec + mbytes)[row];
      const float* a = reinterpret_cast<const float*>(rec + 2 * mbytes) + row * D;
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

}  // namespace
}  // namespace avx512
}  // namespace qsdpa

// Tuning of this variant (from the registry), for plan_attention().
extern const size_t qsdpa_attention_kv_block__avx512 = 256;
extern const size_t qsdpa_attention_max_rows__avx512 = 64;

void qsdpa_flash_attention_s8__avx512(const qsdpa::AttentionArgs& args, const qsdpa::AttentionPlan& plan,
    const qsdpa::ScratchLayout& layout, unsigned char* scratch) {
  using namespace qsdpa::avx512;
  unsigned char* partials = scratch + layout.partials_off;
  const int threads = static_cast<int>(plan.threads);
  if (threads == 1) {  // no parallel region: libgomp allocates a team for every 1-thread region
    for (size_t item = 0; item < plan.items; ++item) run_item(args, plan, layout, scratch, partials, item);
    for (size_t g = 0; plan.kv_splits > 1 && g < plan.items / plan.kv_splits; ++g)
      merge_item(args, plan, layout, partials, g);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    unsigned char* slice = scratch + layout.slice_bytes * static_cast<size_t>(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (long long item = 0; item < static_cast<long long>(plan.items); ++item)
      run_item(args, plan, layout, slice, partials, static_cast<size_t>(item));
    if (plan.kv_splits > 1) {
      const long long groups = static_cast<long long>(plan.items / plan.kv_splits);
#pragma omp for schedule(static)
      for (long long g = 0; g < groups; ++g) merge_item(args, plan, layout, partials, static_cast<size_t>(g));
    }
  }
}
