// The attention problem as the kernels see it, and the one function that lays out their scratch.
// Header-only data and integer arithmetic: shared by every variant module and exposed to Python
// (qsdpa.scratch_layout) so tests check exactly the layout the kernels use.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qsdpa {

// Element strides of a 4-D tensor along (batch, head, sequence); the head dim is contiguous.
struct Strides3 {
  size_t b, h, s;
};

enum class MaskKind : int { kNone = 0, kAdditive = 1, kKeep = 2 };

struct AttentionArgs {
  size_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
  size_t start_pos;
  size_t n_keys;  // keys any row may attend: start_pos + q_len without a mask, kv_len with one
  bool causal;    // bottom-right: query row i sees keys [0, start_pos + i]
  float scale;
  // Query: int8 with per-row qparams, or fp32 (q8 == nullptr).
  const int8_t* q8;
  const float* qf;
  Strides3 q;
  const float* q_scale;
  const int8_t* q_zp;
  Strides3 q_qp;
  const int8_t* k;
  Strides3 kst;
  const float* k_scale;
  const int8_t* k_zp;
  Strides3 k_qp;
  const int8_t* v;
  Strides3 vst;
  const float* v_scale;
  const int8_t* v_zp;
  Strides3 v_qp;
  MaskKind mask_kind;
  const float* mask_add;    // additive mask, or
  const uint8_t* mask_keep; // boolean keep-mask (numpy bool: 0 / 1)
  Strides3 mask;            // (batch, head, query row); keys contiguous; 0 strides broadcast
  float* out;
  Strides3 o;
  // nullptr: every K/V scale was checked before the call. Otherwise the kernel checks each block's
  // scales as it gathers them (kernel_checks_kv_scales), stops at a bad one, sets *kv_scale_fault
  // and leaves `out` unwritten; the caller then names the bad scale.
  int* kv_scale_fault;
  // The largest K and V scale the call accepts, finite (<= FLT_MAX): a K scale above k_scale_limit
  // could take a score, or an intermediate of one, past float32; a V scale above v_scale_limit the
  // output accumulators (the binding's overflow bound, csrc/attention_binding.h). Checked with
  // "> 0", wherever the scales are checked, in the same comparison as "finite".
  float k_scale_limit, v_scale_limit;
};

// Per-call work decomposition, chosen by plan_attention() from the shape and the thread count.
struct AttentionPlan {
  size_t heads_per_item; // KV heads of one item: all of them for decode on a [B, S, H, D] cache, else 1
  size_t rows_per_item;  // M: query rows processed together (KV heads x group heads x positions)
  size_t q_positions;    // query positions per item
  size_t q_blocks;       // ceil(q_len / q_positions)
  size_t kv_block;       // keys per inner step
  size_t kv_splits;      // >1: flash-decoding, KV range split across items and merged afterwards
  size_t items;          // batch * (kv_heads / heads_per_item) * q_blocks * kv_splits
  size_t threads;
  bool convert_v;        // each V block is converted to fp32 once, for the many rows that read it
  bool pack_keys;        // ... and its K packed once into key panels (key_panel_keys) for a GEMM-form Q.K^T
};

// P.V reads each V row once per row tile. With this many query rows per KV head (prefill) the
// block is converted to fp32 once and the row tiles load floats: that drops the widening from
// every tile's inner loop. Decode's few rows per head convert on the fly.
constexpr size_t kConvertVRows = 16;

// Key panels (AttentionPlan::pack_keys, variants with a GEMM-form Q.K^T): a block's K as 4-byte
// groups, group c of every key side by side ([pad4(D) / 4][key_panel_keys(kv_block)][4] int8, keys
// past the block's zero), then each key's int32 sum. The GEMM tile steps 32 keys.
constexpr size_t key_panel_keys(size_t kv_block) { return (kv_block + 31) / 32 * 32; }

constexpr size_t kScratchAlign = 64;

inline size_t align_up(size_t bytes) { return (bytes + (kScratchAlign - 1)) & ~(kScratchAlign - 1); }

// Scratch of one call. Each thread owns one slice of `slice_bytes` at `slice_bytes * thread`; the
// flash-decoding partials follow the slices. Every offset is a multiple of 64 bytes.
struct ScratchLayout {
  // Offsets inside a thread's slice, and the sizes the kernel touches.
  size_t q_off, q_bytes;            // packed query rows: fp32 M x D, or int16 (q - zq) M x pad(D) (u8 q + 128 in the first half)
  size_t qscale_off, qscale_bytes;  // int8 query: M fp32 (q scale * softmax scale) ...
  size_t qsum_off, qsum_bytes;      // ... and M int32 sums of (q - zq), then M int32 128 + zq (u8 Q.K^T scheme)
  size_t dots_off, dots_bytes;      // int8 query: exact int32 dot products, M x kv_block
  size_t s_off, s_bytes;            // scores / probabilities / weights, M x kv_block fp32
  size_t params_off, params_bytes;  // the block's K and V qparams, 4 x kv_block (int32 / fp32) per KV head
  size_t vcopy_off, vcopy_bytes;    // the block's V rows of one head, packed: kv_block x D int8
  size_t vf32_off, vf32_bytes;      // ... or converted (AttentionPlan::convert_v): kv_block x D fp32
  size_t kpanel_off, kpanel_bytes;  // AttentionPlan::pack_keys: the block's K panels and key sums (key_panel_keys)
  size_t max_off, max_bytes;        // running row max, M fp32 (none with partials: the record has it)
  size_t sum_off, sum_bytes;        // running row sum, M fp32 (likewise)
  size_t terms_off, terms_bytes;    // per row: accumulator rescale and V zero-point term, 2 x M fp32
  size_t acc_off, acc_bytes;        // output accumulator, M x D fp32 (likewise)
  size_t slice_bytes;
  size_t threads;
  // Flash-decoding partials, one record per item: max (M), sum (M), acc (M x D), each 64-B aligned.
  size_t partials_off, partial_record_bytes, partials_bytes;
  size_t total_bytes;
  // nullptr, or (a size overflowed 64 bits: every size above is then meaningless) which product of
  // the arguments overflowed. The kernels' own layouts cannot: their sizes come from arrays in memory.
  const char* overflow;
};

// int8 query rows are stored as int16 (q - zq) zero-padded to a multiple of this many elements, so
// every variant's dot step (up to 32 int16) reads whole vectors of them.
constexpr size_t kQueryPad = 64;

constexpr size_t query_row_elems(size_t head_dim) { return (head_dim + kQueryPad - 1) / kQueryPad * kQueryPad; }

// heads: KV heads whose block qparams are gathered together (AttentionPlan::heads_per_item).
// Checked arithmetic: qsdpa.scratch_layout takes any sizes, and reports ScratchLayout::overflow.
inline ScratchLayout scratch_layout(size_t threads, size_t rows, size_t kv_block, size_t head_dim, bool float_query,
                                    size_t partial_items, size_t heads = 1, bool convert_v = false,
                                    bool pack_keys = false) {
  ScratchLayout L{};
  bool ovf = false;
  const auto mul = [&ovf](size_t a, size_t b) {
    size_t r;
    ovf |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  const auto add = [&ovf](size_t a, size_t b) {
    size_t r;
    ovf |= __builtin_add_overflow(a, b, &r);
    return r;
  };
  const auto aligned = [&add](size_t bytes) { return add(bytes, kScratchAlign - 1) & ~(kScratchAlign - 1); };
  size_t off = 0;
  auto place = [&off, &add, &aligned](size_t bytes, size_t& at, size_t& size) {
    at = off;
    size = bytes;
    off = add(off, aligned(bytes));
  };
  const size_t i8q = float_query ? 0 : 1;
  const size_t q_elems = add(head_dim, kQueryPad - 1) / kQueryPad * kQueryPad;  // query_row_elems
  place(float_query ? mul(mul(rows, head_dim), sizeof(float)) : mul(mul(rows, q_elems), sizeof(int16_t)), L.q_off,
        L.q_bytes);
  place(mul(i8q * rows, sizeof(float)), L.qscale_off, L.qscale_bytes);
  place(mul(mul(i8q * 2, rows), sizeof(int32_t)), L.qsum_off, L.qsum_bytes);
  place(mul(mul(i8q * rows, kv_block), sizeof(int32_t)), L.dots_off, L.dots_bytes);
  place(mul(mul(rows, kv_block), sizeof(float)), L.s_off, L.s_bytes);
  place(mul(mul(4 * sizeof(float), kv_block), heads), L.params_off, L.params_bytes);
  place(convert_v ? 0 : mul(kv_block, head_dim), L.vcopy_off, L.vcopy_bytes);
  place(convert_v ? mul(mul(kv_block, head_dim), sizeof(float)) : 0, L.vf32_off, L.vf32_bytes);
  const size_t panel_keys = add(kv_block, 31) / 32 * 32;  // key_panel_keys
  place(pack_keys ? mul(panel_keys, add(add(head_dim, 3) / 4 * 4, sizeof(int32_t))) : 0, L.kpanel_off, L.kpanel_bytes);
  // With KV splits every item is a split item and runs in its partial record: no row max, sum or
  // accumulator in the slice (16 KiB a thread for llama3-8b decode).
  const size_t running = partial_items ? 0 : 1;
  place(mul(running * rows, sizeof(float)), L.max_off, L.max_bytes);
  place(mul(running * rows, sizeof(float)), L.sum_off, L.sum_bytes);
  place(mul(mul(2, rows), sizeof(float)), L.terms_off, L.terms_bytes);
  place(mul(mul(running * rows, head_dim), sizeof(float)), L.acc_off, L.acc_bytes);
  L.slice_bytes = off;
  if (ovf) L.overflow = "the slice size (from rows, kv_block, head_dim and heads)";
  L.threads = threads;
  L.partials_off = mul(L.slice_bytes, threads);
  if (ovf && !L.overflow) L.overflow = "threads x the slice size";
  L.partial_record_bytes = partial_items ? add(mul(2, aligned(mul(rows, sizeof(float)))),
                                               aligned(mul(mul(rows, head_dim), sizeof(float))))
                                         : 0;
  L.partials_bytes = mul(L.partial_record_bytes, partial_items);
  L.total_bytes = add(L.partials_off, L.partials_bytes);
  if (ovf && !L.overflow) L.overflow = "partial_items x the partial record size (from rows and head_dim)";
  return L;
}

// Work decomposition for one call. rows: every query head of a KV head's group at up to
// max_rows / group positions. When every KV head's rows fit in max_rows (decode) and the cache is
// [B, S, H, D] (a block of keys holds all heads), one item takes all KV heads, block-major, so the
// cache is read front to back. KV splits (flash-decoding) only when there are fewer than 4 items
// per thread (2 for all-heads items), never more splits than KV blocks. force_splits > 0 overrides (tests use it).
inline AttentionPlan plan_attention(const AttentionArgs& A, size_t threads, size_t kv_block, size_t max_rows,
                                    size_t force_splits, size_t kv_block_grouped = 0, bool gemm_qk = false) {
  AttentionPlan P{};
  const size_t rep = A.q_heads / A.kv_heads;
  const bool seq_major = A.kst.h < A.kst.s && A.vst.h < A.vst.s;
  P.heads_per_item = seq_major && A.kv_heads * rep * A.q_len <= max_rows ? A.kv_heads : 1;
  const size_t group_rows = P.heads_per_item * rep;
  size_t qpos = max_rows / group_rows;
  if (qpos < 1) qpos = 1;
  if (qpos > A.q_len) qpos = A.q_len;
  P.q_positions = qpos;
  P.rows_per_item = group_rows * qpos;
  P.q_blocks = (A.q_len + qpos - 1) / qpos;
  // All heads per item: a block of keys is kv_block x H x D bytes of K and as much of V, and the
  // next one is prefetched whole while this one is computed; both must fit in L2 together.
  P.kv_block = P.heads_per_item > 1 && kv_block_grouped > 0 ? kv_block_grouped : kv_block;
  P.threads = threads < 1 ? 1 : threads;
  const size_t base = A.batch * (A.kv_heads / P.heads_per_item) * P.q_blocks;
  kv_block = P.kv_block;
  // Enough items per thread that dynamic scheduling evens out a slow core, few enough that each
  // split's fixed costs (query packing, first-block fetch, partial record, merge) stay small. An
  // all-heads decode item is 8x a one-head item: two per thread (llama3-8b decode at 2 threads,
  // 2048 keys: 4 splits 2.5-8% faster than 8 hot, 0-3% cold).
  const size_t items_per_thread = P.heads_per_item > 1 ? 2 : 4;
  size_t splits = 1;
  if (force_splits > 0) {
    splits = force_splits;
  } else if (P.threads > 1 && base < items_per_thread * P.threads) {
    splits = (items_per_thread * P.threads + base - 1) / base;
    const size_t blocks = (A.n_keys + kv_block - 1) / kv_block;
    if (splits > blocks) splits = blocks;
    if (splits < 1) splits = 1;
  }
  P.kv_splits = splits;
  P.items = base * splits;
  P.convert_v = P.heads_per_item == 1 && rep * P.q_positions >= kConvertVRows;
  // gemm_qk: the variant has a GEMM-form Q.K^T for int8 queries over whole 4-byte groups of K.
  P.pack_keys = gemm_qk && P.convert_v && A.q8 != nullptr && A.head_dim % 4 == 0 && P.kv_block % 32 == 0;
  return P;
}

// Weight of the first `threads` KV splits of a group against the others (split_first_key).
constexpr size_t kBigSplitWeight = 16;

// The first key of KV split s (s = splits: the end) of a range of n keys, in 16-key steps. Items
// are handed out in order as threads ask for them (the kernel's ItemQueue), so the first `threads`
// splits start together: they get 16x the keys of the rest, which go to whichever threads finish
// first. The cores of a shared VM slow down one at a time, and a sleeping worker starts late: with
// equal shares the call waits for the slower thread's second share (llama3-8b decode at 2 threads,
// 4 splits: 3-8% faster hot and cold, paired A/B). The big splits are all the same size (their share rounded
// down to 16 keys: 960 of 2049 keys, 15 whole 64-key blocks each) and the small ones split the
// rest evenly (64 and 65), so a thread's big split and a small one come to the same count within
// a few keys; rounding every boundary on its own gave 960, 976, 48 and 65, one thread 33 keys
// more (2 threads, 2048 keys: 1.5% faster hot, neutral cold and at 8192 keys, paired A/B). Each
// split's keys, and so its partial record, depend only on the plan, never on which thread ran it:
// results stay the same bits.
inline size_t split_first_key(size_t n, size_t splits, size_t threads, size_t s) {
  if (s >= splits) return n;
  if (splits <= threads) {  // no small splits to balance with: equal shares
    const size_t first = (n * s / splits + 8) / 16 * 16;
    return first < n ? first : n;
  }
  const size_t big = threads, small = splits - threads;
  const size_t big_keys = n * kBigSplitWeight / (big * kBigSplitWeight + small) / 16 * 16;
  if (s <= big) return s * big_keys;
  const size_t rest = n - big * big_keys;
  const size_t first = big * big_keys + (rest * (s - big) / small + 8) / 16 * 16;
  return first < n ? first : n;
}

// Whether the kernel can check the K/V scales itself, in its qparam gather, instead of a serial
// pass over them before the threads start (512 KiB of scales at 8192 keys, 20-40 us of an ~800 us
// 2-thread llama3-8b decode call). Two conditions: `out` is written only once every item is done
// (a KV split plan writes it in the merge, once every thread is done with its items; a single
// item writes it at its end), and the items read the scales of every key the serial check would,
// [0, n_keys): they do unless causal rows end before n_keys, which only a mask (n_keys = kv_len)
// allows; the binding refuses a mask with is_causal, so this second condition guards the
// kernel's contract, not a real call.
inline bool kernel_checks_kv_scales(const AttentionArgs& A, const AttentionPlan& P) {
  const bool writes_after_all = P.kv_splits > 1 || P.items == 1;
  const bool reads_every_key = !A.causal || A.start_pos + A.q_len >= A.n_keys;
  return writes_after_all && reads_every_key;
}

// The scratch layout of one call with this plan.
inline ScratchLayout plan_scratch_layout(const AttentionPlan& P, const AttentionArgs& A) {
  return scratch_layout(P.threads, P.rows_per_item, P.kv_block, A.head_dim, A.q8 == nullptr,
                        P.kv_splits > 1 ? P.items : 0, P.heads_per_item, P.convert_v, P.pack_keys);
}

}  // namespace qsdpa
