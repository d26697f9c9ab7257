// Python-facing argument checks of quantized_sdpa, shared by every variant module: every array
// the kernel will touch is checked here (dtype, rank, C-contiguity, shapes, qparam values over the
// range read) so that bad input raises a Python exception naming the argument, before `out` is
// written. Internal linkage: each module gets its own copy.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "array_checks.h"
#include "attention.h"
#include "qsdpa_types.h"

namespace qsdpa {
namespace {

namespace py = pybind11;

// (batch, heads, seq, head_dim) of a [B, S, H, D] (seq_dim2 = false) or [B, H, S, D] tensor, and
// its element strides along (batch, head, seq).
struct Dims {
  size_t b, h, s, d;
  Strides3 st;
};

template <typename T>
Dims dims_of(const Tensor<T>& t, bool seq_dim2) {
  Dims r{};
  r.b = t.shape[0];
  r.d = t.shape[3];
  if (seq_dim2) {
    r.h = t.shape[1];
    r.s = t.shape[2];
    r.st = Strides3{r.h * r.s * r.d, r.s * r.d, r.d};
  } else {
    r.s = t.shape[1];
    r.h = t.shape[2];
    r.st = Strides3{r.s * r.h * r.d, r.d, r.h * r.d};
  }
  return r;
}

inline std::string shape_str(const Dims& x, bool seq_dim2) {
  const auto s = [](size_t v) { return std::to_string(v); };
  return seq_dim2 ? "[" + s(x.b) + ", " + s(x.h) + ", " + s(x.s) + ", " + s(x.d) + "]"
                  : "[" + s(x.b) + ", " + s(x.s) + ", " + s(x.h) + ", " + s(x.d) + "]";
}

struct QParams {
  const float* scale;
  const int8_t* zp;
  Strides3 st;
  size_t scale_bytes, zp_bytes;
};

// Scales and zero points of a quantized tensor: shaped like it with a last dim of 1.
inline QParams qparams(const py::handle& scales_, const py::handle& zps_, const char* scales_name, const char* zps_name,
                       const Dims& data, const char* data_name, bool seq_dim2) {
  if (scales_.is_none() || zps_.is_none())
    throw py::value_error(std::string(scales_name) + " and " + zps_name + " are required for int8 " + data_name);
  auto sc = tensor<float>(scales_, scales_name, 4, false);
  auto zp = tensor<int8_t>(zps_, zps_name, 4, false);
  Dims ds = dims_of(sc, seq_dim2), dz = dims_of(zp, seq_dim2);
  Dims want = data;
  want.d = 1;
  if (ds.b != want.b || ds.h != want.h || ds.s != want.s || ds.d != 1)
    throw py::value_error(std::string(scales_name) + " must have shape " + shape_str(want, seq_dim2) + " (like " + data_name +
                          " with a last dim of 1), got " + shape_str(ds, seq_dim2));
  if (dz.b != want.b || dz.h != want.h || dz.s != want.s || dz.d != 1)
    throw py::value_error(std::string(zps_name) + " must have shape " + shape_str(want, seq_dim2) + " (like " + data_name +
                          " with a last dim of 1), got " + shape_str(dz, seq_dim2));
  return QParams{sc.data, zp.data, ds.st, span_bytes(sc), span_bytes(zp)};
}

// Whether x[0], x[step], ... (n of them) are all finite and > 0. No branch per element: with
// contiguous scales (step 1) the loop vectorises. A compare-and-branch per element took ~41 us per
// 8193 x 8 scales, ~20 us of a 2048-key llama3-8b decode call, serial before the threads start.
inline bool scales_valid(const float* x, size_t n, size_t step) {
  int ok = 1;
  if (step == 1) {
    for (size_t i = 0; i < n; ++i) ok &= (x[i] > 0.0f) & (x[i] <= FLT_MAX);  // false for NaN and inf
  } else {
    for (size_t i = 0; i < n; ++i) ok &= (x[i * step] > 0.0f) & (x[i * step] <= FLT_MAX);
  }
  return ok != 0;
}

// Every scale the kernel will read must be finite and > 0: tokens [0, n_tokens) of every row.
inline void check_scales(const QParams& qp, const Dims& d, size_t n_tokens, const char* name) {
  bool ok = true;
  for (size_t b = 0; ok && b < d.b; ++b) {
    const float* base = qp.scale + b * qp.st.b;
    if (qp.st.h == 1 && qp.st.s == d.h) {  // [B, S, H, 1] contiguous: one run of n_tokens x H
      ok = scales_valid(base, n_tokens * d.h, 1);
    } else if (qp.st.s <= qp.st.h) {  // a row of tokens per head
      for (size_t h = 0; ok && h < d.h; ++h) ok = scales_valid(base + h * qp.st.h, n_tokens, qp.st.s);
    } else {  // the heads of each token
      for (size_t s = 0; ok && s < n_tokens; ++s) ok = scales_valid(base + s * qp.st.s, d.h, qp.st.h);
    }
  }
  if (ok) return;
  for (size_t b = 0; b < d.b; ++b)  // name the first bad one
    for (size_t h = 0; h < d.h; ++h)
      for (size_t s = 0; s < n_tokens; ++s) {
        const float x = qp.scale[b * qp.st.b + h * qp.st.h + s * qp.st.s];
        if (!(x > 0.0f) || !std::isfinite(x))
          throw py::value_error(std::string(name) + " must be finite and > 0; found " + std::to_string(x) + " at batch " +
                                std::to_string(b) + ", head " + std::to_string(h) + ", position " + std::to_string(s));
      }
}

// A float query must be finite: a NaN score would drop out of the softmax as if masked and an inf
// one would take all the weight, so the call would return a plausible, wrong row.
inline void check_finite_query(const Tensor<float>& q) {
  int ok = 1;
  for (size_t i = 0; i < q.size; ++i) ok &= std::fabs(q.data[i]) <= FLT_MAX;  // false for NaN
  if (ok) return;
  for (size_t i = 0; i < q.size; ++i)
    if (!(std::fabs(q.data[i]) <= FLT_MAX))
      throw py::value_error("query must be finite; found " + std::to_string(q.data[i]) + " at flat index " +
                            std::to_string(i));
}

struct ParsedAttention {
  AttentionArgs args;
  bool empty;
  // What check_kv_scales needs when parse_attention was asked to leave the K/V scales to later.
  QParams qk, qv;
  Dims dk, dv;
};

// The K/V scale check parse_attention defers (defer_kv_scales): before the call when the kernel
// cannot make it (kernel_checks_kv_scales), or after a call whose kernel found a bad scale, to
// name it.
inline void check_kv_scales(const ParsedAttention& r) {
  if (r.empty) return;
  check_scales(r.qk, r.dk, r.args.n_keys, "k_scales");
  check_scales(r.qv, r.dv, r.args.n_keys, "v_scales");
}

inline ParsedAttention parse_attention(py::handle q_, py::handle q_scales_, py::handle q_zp_, py::handle k_,
                                       py::handle k_scales_, py::handle k_zp_, py::handle v_, py::handle v_scales_,
                                       py::handle v_zp_, py::handle mask_, long long start_pos, bool is_causal,
                                       double scale, bool seq_dim2, py::handle out_, bool defer_kv_scales = false) {
  ParsedAttention r{};
  AttentionArgs& A = r.args;
  const bool float_query = is_dtype(q_, 'f', 4);
  Dims dq{}, dk{}, dv{};
  Tensor<int8_t> q8{};
  Tensor<float> qf{};
  if (float_query) {
    qf = tensor<float>(q_, "query", 4, false);
    dq = dims_of(qf, seq_dim2);
    if (!q_scales_.is_none() || !q_zp_.is_none())
      throw py::value_error("q_scales and q_zero_points must be None for a float32 query");
  } else {
    if (!is_dtype(q_, 'i', 1)) {
      if (py::isinstance<py::array>(q_))
        throw py::type_error("query must have dtype int8 or float32, got " +
                             std::string(py::str(py::reinterpret_borrow<py::array>(q_).dtype())));
      throw py::type_error("query must be a numpy.ndarray");
    }
    q8 = tensor<int8_t>(q_, "query", 4, false);
    dq = dims_of(q8, seq_dim2);
  }
  auto k = tensor<int8_t>(k_, "key", 4, false);
  auto v = tensor<int8_t>(v_, "value", 4, false);
  dk = dims_of(k, seq_dim2);
  dv = dims_of(v, seq_dim2);
  QSDPA_REQUIRE(dk.d == dq.d && dv.d == dq.d, "query, key and value must have the same head dim (last dim): " +
          std::to_string(dq.d) + ", " + std::to_string(dk.d) + ", " + std::to_string(dv.d));
  QSDPA_REQUIRE(dk.b == dq.b && dv.b == dq.b, "query, key and value must have the same batch size: " +
          std::to_string(dq.b) + ", " + std::to_string(dk.b) + ", " + std::to_string(dv.b));
  QSDPA_REQUIRE(dk.h == dv.h && dk.s == dv.s, "key and value must have the same shape, got " + shape_str(dk, seq_dim2) +
          " and " + shape_str(dv, seq_dim2));
  QSDPA_REQUIRE(dk.h >= 1 && dq.h >= 1, "query and key must have at least one head");
  QSDPA_REQUIRE(dq.h % dk.h == 0, "query heads (" + std::to_string(dq.h) + ") must be a multiple of key/value heads (" +
          std::to_string(dk.h) + ")");
  QSDPA_REQUIRE(dq.d >= 1 && dq.d <= kMaxDotK, "head dim must be in [1, " + std::to_string(kMaxDotK) + "], got " + std::to_string(dq.d));
  QSDPA_REQUIRE(start_pos >= 0, "start_pos must be >= 0, got " + std::to_string(start_pos));
  QSDPA_REQUIRE(static_cast<size_t>(start_pos) + dq.s <= dk.s,
          "start_pos + query length (" + std::to_string(start_pos) + " + " + std::to_string(dq.s) +
          ") must not exceed the key/value length " + std::to_string(dk.s));
  // Finite as a double is not enough: the kernels take a float, and casting a double beyond
  // FLT_MAX to float is undefined behaviour.
  QSDPA_REQUIRE(std::isfinite(scale) && std::fabs(scale) <= static_cast<double>(FLT_MAX),
                "scale must be finite in float32 (|scale| <= 3.4028235e38)");

  QParams qq{}, qk, qv;
  if (!float_query) qq = qparams(q_scales_, q_zp_, "q_scales", "q_zero_points", dq, "query", seq_dim2);
  qk = qparams(k_scales_, k_zp_, "k_scales", "k_zero_points", dk, "key", seq_dim2);
  qv = qparams(v_scales_, v_zp_, "v_scales", "v_zero_points", dv, "value", seq_dim2);

  auto out = tensor<float>(out_, "out", 4, true);
  Dims dout = dims_of(out, seq_dim2);
  QSDPA_REQUIRE(dout.b == dq.b && dout.h == dq.h && dout.s == dq.s && dout.d == dq.d,
          "out must have the query's shape " + shape_str(dq, seq_dim2) + ", got " + shape_str(dout, seq_dim2));

  A.mask_kind = MaskKind::kNone;
  if (!mask_.is_none()) {
    QSDPA_REQUIRE(!is_causal, "attn_mask and is_causal cannot be used together");
    const bool keep = is_dtype(mask_, 'b', 1);
    if (!keep && !is_dtype(mask_, 'f', 4)) {
      if (py::isinstance<py::array>(mask_))
        throw py::type_error("attn_mask must have dtype float32 (additive) or bool (keep), got " +
                             std::string(py::str(py::reinterpret_borrow<py::array>(mask_).dtype())));
      throw py::type_error("attn_mask must be a numpy.ndarray or None");
    }
    const int nd = static_cast<int>(py::reinterpret_borrow<py::array>(mask_).ndim());
    QSDPA_REQUIRE(nd == 2 || nd == 4, "attn_mask must be 2-D [q_len, kv_len] or 4-D [batch, q_heads, q_len, kv_len]");
    size_t shape[4];
    if (keep) {
      auto m = tensor<bool>(mask_, "attn_mask", nd, false);
      std::copy(m.shape, m.shape + 4, shape);
      A.mask_keep = reinterpret_cast<const uint8_t*>(m.data);
      A.mask_kind = MaskKind::kKeep;
    } else {
      auto m = tensor<float>(mask_, "attn_mask", nd, false);
      std::copy(m.shape, m.shape + 4, shape);
      A.mask_add = m.data;
      A.mask_kind = MaskKind::kAdditive;
    }
    if (nd == 2) {
      QSDPA_REQUIRE(shape[0] == dq.s && shape[1] == dk.s, "attn_mask must have shape [" + std::to_string(dq.s) + ", " +
              std::to_string(dk.s) + "] ([q_len, kv_len]), got [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]");
      A.mask = Strides3{0, 0, dk.s};
    } else {
      QSDPA_REQUIRE(shape[0] == dq.b && shape[1] == dq.h && shape[2] == dq.s && shape[3] == dk.s,
              "attn_mask must have shape [" + std::to_string(dq.b) + ", " + std::to_string(dq.h) + ", " + std::to_string(dq.s) +
              ", " + std::to_string(dk.s) + "] ([batch, q_heads, q_len, kv_len])");
      A.mask = Strides3{dq.h * dq.s * dk.s, dq.s * dk.s, dk.s};
    }
  }

  A.batch = dq.b;
  A.q_heads = dq.h;
  A.kv_heads = dk.h;
  A.q_len = dq.s;
  A.kv_len = dk.s;
  A.head_dim = dq.d;
  A.start_pos = static_cast<size_t>(start_pos);
  A.n_keys = A.mask_kind == MaskKind::kNone ? A.start_pos + A.q_len : A.kv_len;
  A.causal = is_causal;
  A.scale = static_cast<float>(scale);
  A.q8 = float_query ? nullptr : q8.data;
  A.qf = float_query ? qf.data : nullptr;
  A.q = dq.st;
  A.q_scale = qq.scale;
  A.q_zp = qq.zp;
  A.q_qp = qq.st;
  A.k = k.data;
  A.kst = dk.st;
  A.k_scale = qk.scale;
  A.k_zp = qk.zp;
  A.k_qp = qk.st;
  A.v = v.data;
  A.vst = dv.st;
  A.v_scale = qv.scale;
  A.v_zp = qv.zp;
  A.v_qp = qv.st;
  A.out = out.data;
  A.o = dout.st;
  r.empty = out.size == 0;

  // The output must not alias anything the kernel reads.
  Matrix<float> out_span{out.data, 1, out.size, out.size};
  const std::pair<const void*, size_t> inputs[] = {
      float_query ? std::make_pair(static_cast<const void*>(qf.data), span_bytes(qf))
                  : std::make_pair(static_cast<const void*>(q8.data), span_bytes(q8)),
      {k.data, span_bytes(k)}, {v.data, span_bytes(v)}, {qk.scale, qk.scale_bytes}, {qk.zp, qk.zp_bytes},
      {qv.scale, qv.scale_bytes}, {qv.zp, qv.zp_bytes}, {qq.scale, qq.scale_bytes}, {qq.zp, qq.zp_bytes}};
  for (const auto& in : inputs)
    QSDPA_REQUIRE(in.first == nullptr || !overlaps(out_span, in.first, in.second), "out must not overlap an input array");
  if (A.mask_kind != MaskKind::kNone) {
    const void* m = A.mask_kind == MaskKind::kKeep ? static_cast<const void*>(A.mask_keep) : static_cast<const void*>(A.mask_add);
    const size_t mbytes = (A.mask.b ? A.batch * A.mask.b : A.q_len * A.mask.s) * (A.mask_kind == MaskKind::kKeep ? 1 : 4);
    QSDPA_REQUIRE(!overlaps(out_span, m, mbytes), "out must not overlap an input array");
  }

  A.kv_scale_fault = nullptr;
  r.qk = qk, r.qv = qv, r.dk = dk, r.dv = dv;
  if (!r.empty && !float_query) check_scales(qq, dq, dq.s, "q_scales");
  if (!r.empty && float_query) check_finite_query(qf);
  if (!defer_kv_scales) check_kv_scales(r);
  return r;
}

inline py::dict layout_dict(const ScratchLayout& L) {
  py::dict d;
  d["threads"] = L.threads;
  d["slice_bytes"] = L.slice_bytes;
  py::dict parts;
  const auto part = [&parts](const char* name, size_t off, size_t bytes) { parts[name] = py::make_tuple(off, bytes); };
  part("query", L.q_off, L.q_bytes);
  part("query_scales", L.qscale_off, L.qscale_bytes);
  part("query_sums", L.qsum_off, L.qsum_bytes);
  part("dots", L.dots_off, L.dots_bytes);
  part("scores", L.s_off, L.s_bytes);
  part("block_params", L.params_off, L.params_bytes);
  part("value_rows", L.vcopy_off, L.vcopy_bytes);
  part("value_f32", L.vf32_off, L.vf32_bytes);
  part("row_max", L.max_off, L.max_bytes);
  part("row_sum", L.sum_off, L.sum_bytes);
  part("row_terms", L.terms_off, L.terms_bytes);
  part("accumulator", L.acc_off, L.acc_bytes);
  d["slice"] = parts;
  d["partials_offset"] = L.partials_off;
  d["partial_record_bytes"] = L.partial_record_bytes;
  d["partials_bytes"] = L.partials_bytes;
  d["total_bytes"] = L.total_bytes;
  return d;
}

inline py::dict plan_dict(const AttentionPlan& P) {
  py::dict d;
  d["heads_per_item"] = P.heads_per_item;
  d["convert_v"] = P.convert_v;
  d["rows_per_item"] = P.rows_per_item;
  d["q_positions"] = P.q_positions;
  d["q_blocks"] = P.q_blocks;
  d["kv_block"] = P.kv_block;
  d["kv_splits"] = P.kv_splits;
  d["items"] = P.items;
  d["threads"] = P.threads;
  return d;
}

}  // namespace
}  // namespace qsdpa
