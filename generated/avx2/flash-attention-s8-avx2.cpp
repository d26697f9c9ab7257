// Generated from templates/flash_attention.cpp.j2 for ISA 'avx2' by `python -m codegen` — do not edit.
// softmax(scale * Q.K^T + mask) . V over an int8 K/V cache, int8 or fp32 Q
// kv_block = 256 keys, up to 64 query rows per work item.
//
// Work item = (batch, KV head, block of query positions, KV split). Its rows are every query head
// of the KV head's group at every position of the block, so each int8 K/V byte is loaded and
// widened once per item, not once per query head. Per KV block: S = scale * Q.K^T (qk_gemm), mask,
// online softmax (running max and sum per row, vectorised exp), acc += P.V (dequant_gemm, no
// dequantized V). Decode with too few items for the threads splits the KV range (flash-decoding)
// and merges (max, sum, acc) afterwards. Scratch: one slice per thread of the process-wide arena,
// laid out by qsdpa::scratch_layout; nothing in it is zero-filled that the kernel overwrites.
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_thread_num() { return 0; }  // built without OpenMP: one thread
#endif

#include <cmath>
#include <cstring>
#include <limits>

#include "attention.h"
#include "avx2/simd-avx2.h"

void qsdpa_qk_gemm_s8s8__avx2(size_t m, size_t n, size_t k, const qsdpa::QMatrix& a,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);
void qsdpa_qk_gemm_f32s8__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);
void qsdpa_dequant_gemm_f32s8__avx2(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float* c, size_t ldc, bool accumulate);

namespace qsdpa {
namespace avx2 {
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

// One row of scores -> probabilities for this block, updating the row's running max and sum and
// rescaling its accumulator. Returns nothing; a row with no attended key so far keeps p = 0.
inline void softmax_row(float* s, size_t nb, float& row_max, float& row_sum, float* acc, size_t head_dim, bool first) {
  vf vm = vset1(kNegInf);
  size_t j = 0;
  for (; j + NF <= nb; j += NF) vm = vmax(vm, vload(s + j));
  if (j < nb) vm = vmax(vm, vload_fill(s + j, static_cast<int>(nb - j), kNegInf));
  const float block_max = vhmax(vm);
  const float old_max = first ? kNegInf : row_max;
  const float new_max = block_max > old_max ? block_max : old_max;
  if (new_max == kNegInf) {  // every key so far is masked out
    std::memset(s, 0, nb * sizeof(float));
    if (first) row_sum = 0.0f;
    row_max = kNegInf;
    return;
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
  if (first) {
    row_sum = block_sum;
  } else {
    const float c = old_max == kNegInf ? 0.0f : std::exp(old_max - new_max);
    row_sum = row_sum * c + block_sum;
    if (c != 1.0f) scale_row(acc, head_dim, c);
  }
  row_max = new_max;
}

struct Item {
  size_t b, kvh, q0, qn, split;
};

inline Item decode_item(size_t item, const AttentionArgs& A, const AttentionPlan& P) {
  Item it;
  it.split = item % P.kv_splits;
  item /= P.kv_splits;
  const size_t qb = item % P.q_blocks;
  item /= P.q_blocks;
  it.kvh = item % A.kv_heads;
  it.b = item / A.kv_heads;
  it.q0 = qb * P.q_positions;
  it.qn = A.q_len - it.q0 < P.q_positions ? A.q_len - it.q0 : P.q_positions;
  return it;
}

void run_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* slice,
              unsigned char* partials, size_t item) {
  const Item it = decode_item(item, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim, M = rep * it.qn, ld_s = P.kv_block;
  float* S = reinterpret_cast<float*>(slice + L.s_off);
  float* row_max = reinterpret_cast<float*>(slice + L.max_off);
  float* row_sum = reinterpret_cast<float*>(slice + L.sum_off);
  float* acc = reinterpret_cast<float*>(slice + L.acc_off);

  // Pack the group's query rows: row r * qn + i is query head kvh * rep + r at position q0 + i.
  int8_t* q8 = reinterpret_cast<int8_t*>(slice + L.q_off);
  float* qf = reinterpret_cast<float*>(slice + L.q_off);
  float* qscale = reinterpret_cast<float*>(slice + L.qscale_off);
  int8_t* qzp = reinterpret_cast<int8_t*>(slice + L.qzp_off);
  for (size_t r = 0; r < rep; ++r) {
    const size_t h = it.kvh * rep + r;
    for (size_t i = 0; i < it.qn; ++i) {
      const size_t row = r * it.qn + i, pos = it.q0 + i;
      const size_t src = it.b * A.q.b + h * A.q.h + pos * A.q.s;
      if (A.q8) {
        std::memcpy(q8 + row * D, A.q8 + src, D);
        const size_t qp = it.b * A.q_qp.b + h * A.q_qp.h + pos * A.q_qp.s;
        qscale[row] = A.q_scale[qp];
        qzp[row] = A.q_zp[qp];
      } else {
        std::memcpy(qf + row * D, A.qf + src, D * sizeof(float));
      }
    }
  }
  const QMatrix qmat{q8, D, qscale, 1, qzp, 1, nullptr};

  // Keys this item may attend, then its share of them when the KV range is split.
  size_t key_end = A.n_keys;
  if (A.causal && A.start_pos + it.q0 + it.qn < key_end) key_end = A.start_pos + it.q0 + it.qn;
  size_t k_begin = 0, k_end = key_end;
  if (P.kv_splits > 1) {
    const size_t blocks = (key_end + P.kv_block - 1) / P.kv_block;
    const size_t per = (blocks + P.kv_splits - 1) / P.kv_splits;
    k_begin = it.split * per * P.kv_block;
    k_end = (it.split + 1) * per * P.kv_block;
    if (k_begin > key_end) k_begin = key_end;
    if (k_end > key_end) k_end = key_end;
  }

  const size_t kbase = it.b * A.kst.b + it.kvh * A.kst.h, kqp = it.b * A.k_qp.b + it.kvh * A.k_qp.h;
  const size_t vbase = it.b * A.vst.b + it.kvh * A.vst.h, vqp = it.b * A.v_qp.b + it.kvh * A.v_qp.h;
  bool first = true;
  for (size_t n0 = k_begin; n0 < k_end; n0 += P.kv_block) {
    const size_t nb = k_end - n0 < P.kv_block ? k_end - n0 : P.kv_block;
    const QMatrix kmat{A.k + kbase + n0 * A.kst.s, A.kst.s, A.k_scale + kqp + n0 * A.k_qp.s, A.k_qp.s,
                       A.k_zp + kqp + n0 * A.k_qp.s, A.k_qp.s, nullptr};
    if (A.q8) {
      qsdpa_qk_gemm_s8s8__avx2(M, nb, D, qmat, kmat, A.scale, S, ld_s);
    } else {
      qsdpa_qk_gemm_f32s8__avx2(M, nb, D, qf, D, kmat, A.scale, S, ld_s);
    }
    for (size_t r = 0; r < rep; ++r) {
      const size_t h = it.kvh * rep + r;
      for (size_t i = 0; i < it.qn; ++i) {
        const size_t row = r * it.qn + i, pos = it.q0 + i;
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
        softmax_row(s, nb, row_max[row], row_sum[row], acc + row * D, D, first);
      }
    }
    const QMatrix vmat{A.v + vbase + n0 * A.vst.s, A.vst.s, A.v_scale + vqp + n0 * A.v_qp.s, A.v_qp.s,
                       A.v_zp + vqp + n0 * A.v_qp.s, A.v_qp.s, nullptr};
    qsdpa_dequant_gemm_f32s8__avx2(M, D, nb, S, ld_s, vmat, acc, D, !first);
    first = false;
  }
  if (first) {  // no key in range (an empty KV split): an empty partial
    for (size_t row = 0; row < M; ++row) {
      row_max[row] = kNegInf;
      row_sum[row] = 0.0f;
    }
    std::memset(acc, 0, M * D * sizeof(float));
  }

  if (P.kv_splits == 1) {
    for (size_t r = 0; r < rep; ++r) {
      const size_t h = it.kvh * rep + r;
      for (size_t i = 0; i < it.qn; ++i) {
        const size_t row = r * it.qn + i;
        float* o = A.out + it.b * A.o.b + h * A.o.h + (it.q0 + i) * A.o.s;
        const float inv = row_sum[row] > 0.0f ? 1.0f / row_sum[row] : 0.0f;  // fully masked row -> 0
        const vf vinv = vset1(inv);
        const float* a = acc + row * D;
        size_t j = 0;
        for (; j + NF <= D; j += NF) vstore(o + j, vmul(vload(a + j), vinv));
        for (; j < D; ++j) o[j] = a[j] * inv;
      }
    }
  } else {
    unsigned char* rec = partials + item * L.partial_record_bytes;
    const size_t mbytes = align_up(P.rows_per_item * sizeof(float));
    std::memcpy(rec, row_max, M * sizeof(float));
    std::memcpy(rec + mbytes, row_sum, M * sizeof(float));
    std::memcpy(rec + 2 * mbytes, acc, M * D * sizeof(float));
  }
}

// Flash-decoding merge of one (batch, KV head, query block): rescale each split's partial to the
// common max and normalise.
void merge_item(const AttentionArgs& A, const AttentionPlan& P, const ScratchLayout& L, unsigned char* partials,
                size_t group) {
  const Item it = decode_item(group * P.kv_splits, A, P);
  const size_t rep = A.q_heads / A.kv_heads, D = A.head_dim;
  const size_t mbytes = align_up(P.rows_per_item * sizeof(float));
  for (size_t r = 0; r < rep; ++r) {
    const size_t h = it.kvh * rep + r;
    for (size_t i = 0; i < it.qn; ++i) {
      const size_t row = r * it.qn + i;
      float m = kNegInf;
      for (size_t sp = 0; sp < P.kv_splits; ++sp) {
        const float* mx = reinterpret_cast<const float*>(partials + (group * P.kv_splits + sp) * L.partial_record_bytes);
        if (mx[row] > m) m = mx[row];
      }
      float* o = A.out + it.b * A.o.b + h * A.o.h + (it.q0 + i) * A.o.s;
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
}

}  // namespace
}  // namespace avx2
}  // namespace qsdpa

// Tuning of this variant (from the registry), for plan_attention().
extern const size_t qsdpa_attention_kv_block__avx2 = 256;
extern const size_t qsdpa_attention_max_rows__avx2 = 64;

void qsdpa_flash_attention_s8__avx2(const qsdpa::AttentionArgs& args, const qsdpa::AttentionPlan& plan,
    const qsdpa::ScratchLayout& layout, unsigned char* scratch) {
  using namespace qsdpa::avx2;
  unsigned char* partials = scratch + layout.partials_off;
  const int threads = static_cast<int>(plan.threads);
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
