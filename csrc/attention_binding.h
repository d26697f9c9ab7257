// Python-facing argument checks of quantized_sdpa, shared by every variant module: every array
// the kernel will touch is checked here (dtype, rank, C-contiguity, shapes, qparam values over the
// range read) so that bad input raises a Python exception naming the argument, before `out` is
// written. Internal linkage: each module gets its own copy.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Overflow guard. Finite inputs the checks above accept can still take float32 scores past FLT_MAX
// (q_scales 1e30 with scale 1e10, a float query of 3e38): the softmax then returns a plausible,
// wrong row, and scalar and SIMD disagree. So every score, and every intermediate of one, must stay
// within kOverflowLimit = 2^125 (FLT_MAX / 8), with |q - zq|, |k - zk| <= 255 and |k| <= 128:
//   int8 query: qcoef = q_scale * scale, qcoef * k_scale, and float(d) * (qcoef * k_scale) with the
//     exact |d| <= D * 255 * 255 (flash_attention's epilogue, qk_gemm's);
//   fp32 query: the fp32 dot sum q * k and the zero-point term zk * sum q, each <= 128 * D * max|q|,
//     their difference <= 256 * D * max|q|; k_scale * scale; and the product (qk_gemm_f32a);
//   softmax: s - row max >= -2^126; exp clamps its argument before multiplying it by log2(e).
// And the output's: W = P * v_scale with P <= 1, so the accumulators (W.V and the zero-point term
// z = sum W * zv) stay within n_keys * 255 * max v_scale, and so do the KV-split merge's sums.
// Bounds from the maxima, so conservative by up to D x (a float query's max |q| in every element);
// realistic inputs (scales 1e-3..1e2, scale 1/sqrt(D), D <= 256) are ~30 orders of magnitude below.
// The query side's maxima come from the query checks; each K and V scale is then compared with the
// limit they leave it (AttentionArgs::k_scale_limit / v_scale_limit) in the same comparison that
// checks it is finite, so the K/V pass, on the decode hot path, costs what it did.
constexpr double kOverflowLimit = 0x1p125;
constexpr const char* kOverflowLimitText = "2^125 (4.25e+37)";

// A float32 value in the fewest digits that read back as it (1e+34, not 9.9999998e+33); a
// computed double (a product of them) to 6 digits.
inline std::string num(float x) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return buf;
}
inline std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// quantize_rows' error for a row of finite values whose range (max - min, with 0) exceeds float32:
// no int8 scale covers it (PyTorch's would be inf). Names the input x; callers rename it.
[[noreturn]] inline void throw_row_range_error(const float* p, size_t d, size_t row) {
  double lo = 0.0, hi = 0.0;
  for (size_t j = 0; j < d; ++j) {
    lo = p[j] < lo ? p[j] : lo;
    hi = p[j] > hi ? p[j] : hi;
  }
  throw py::value_error("x's range (max - min, with 0) must fit in float32 (<= 3.4028235e+38) in every row: row " +
                        std::to_string(row) + " spans [" + num(static_cast<float>(lo)) + ", " +
                        num(static_cast<float>(hi)) + "], a range of " + num(hi - lo) +
                        ", which no int8 scale covers (it would be inf)");
}

inline std::string where(size_t b, size_t h, size_t s) {
  return "batch " + std::to_string(b) + ", head " + std::to_string(h) + ", position " + std::to_string(s);
}

// What the K and V scale limits of a call come from, to name the factors when a scale exceeds one.
struct OverflowBound {
  float k_limit = FLT_MAX, v_limit = FLT_MAX;
  bool float_query = false;
  double scale = 0.0;  // |scale|
  double q_max = 0.0;  // max q_scales (int8 query) or max |query| (float query)
  size_t head_dim = 0, n_keys = 0;

  std::string k_message(float x, const std::string& at) const {
    const double d = static_cast<double>(head_dim), k = static_cast<double>(x);
    const std::string xs = num(x), ss = num(static_cast<float>(scale)), qs = num(static_cast<float>(q_max));
    const std::string head = "k_scales holds " + xs + " at " + at + ", and |scale| (" + ss + ") x ";
    const std::string limit = " exceeds " + std::string(kOverflowLimitText) + "; with ";
    if (!float_query)
      return "scale x q_scales x k_scales can overflow float32 scores: " + head + "max q_scales (" + qs + ") x " + xs +
             " x head_dim (" + std::to_string(head_dim) + ") x 255 x 255 = " + num(scale * q_max * k * d * 65025.0) +
             limit + "these q_scales and scale, k_scales must be <= " + num(k_limit);
    const double qpart = q_max * d * 256.0;
    if (qpart >= 1.0)
      return "scale x query x k_scales can overflow float32 scores: " + head + "max |query| (" + qs + ") x head_dim (" +
             std::to_string(head_dim) + ") x 256 x " + xs + " = " + num(scale * qpart * k) + limit +
             "this query and scale, k_scales must be <= " + num(k_limit);
    return "scale x k_scales can overflow float32 scores: " + head + xs + " = " + num(scale * k) + limit +
           "this scale, k_scales must be <= " + num(k_limit);
  }
  std::string v_message(float x, const std::string& at) const {
    const double v = static_cast<double>(x);
    return "v_scales can overflow the float32 output: v_scales holds " + num(x) + " at " + at + ", and keys (" +
           std::to_string(n_keys) + ") x 255 x " + num(x) + " = " + num(static_cast<double>(n_keys) * 255.0 * v) +
           " exceeds " + kOverflowLimitText + "; with " + std::to_string(n_keys) + " keys, v_scales must be <= " +
           num(v_limit);
  }
};

// Whether x[0], x[step], ... (n of them) are all > 0 and <= limit (a finite float: so all finite).
// No branch per element: with contiguous scales (step 1) the loop vectorises. A compare-and-branch
// per element took ~41 us per 8193 x 8 scales, ~20 us of a 2048-key llama3-8b decode call, serial
// before the threads start.
inline bool scales_valid(const float* x, size_t n, size_t step, float limit) {
  int ok = 1;
  if (step == 1) {
    for (size_t i = 0; i < n; ++i) ok &= (x[i] > 0.0f) & (x[i] <= limit);  // false for NaN and inf
  } else {
    for (size_t i = 0; i < n; ++i) ok &= (x[i * step] > 0.0f) & (x[i * step] <= limit);
  }
  return ok != 0;
}

// The runs of scales of tokens [0, n_tokens) of every row, as (base, count, step): fn returns
// false to stop.
template <typename Fn>
inline void for_scale_runs(const QParams& qp, const Dims& d, size_t n_tokens, Fn fn) {
  bool go = true;
  for (size_t b = 0; go && b < d.b; ++b) {
    const float* base = qp.scale + b * qp.st.b;
    if (qp.st.h == 1 && qp.st.s == d.h) {  // [B, S, H, 1] contiguous: one run of n_tokens x H
      go = fn(base, n_tokens * d.h, size_t(1));
    } else if (qp.st.s <= qp.st.h) {  // a row of tokens per head
      for (size_t h = 0; go && h < d.h; ++h) go = fn(base + h * qp.st.h, n_tokens, qp.st.s);
    } else {  // the heads of each token
      for (size_t s = 0; go && s < n_tokens; ++s) go = fn(base + s * qp.st.s, d.h, qp.st.h);
    }
  }
}

// Every scale the kernel will read, tokens [0, n_tokens) of every row, must be finite, > 0 and at
// most `limit` (FLT_MAX, or the overflow bound's: `bound` names its factors, `is_k` which message).
inline void check_scales(const QParams& qp, const Dims& d, size_t n_tokens, const char* name, float limit,
                         const OverflowBound* bound = nullptr, bool is_k = true) {
  bool ok = true;
  for_scale_runs(qp, d, n_tokens,
                 [&ok, limit](const float* x, size_t n, size_t step) { return ok = scales_valid(x, n, step, limit); });
  if (ok) return;
  for (size_t b = 0; b < d.b; ++b)  // name the first bad one
    for (size_t h = 0; h < d.h; ++h)
      for (size_t s = 0; s < n_tokens; ++s) {
        const float x = qp.scale[b * qp.st.b + h * qp.st.h + s * qp.st.s];
        if (!(x > 0.0f) || !std::isfinite(x))
          throw py::value_error(std::string(name) + " must be finite and > 0; found " + std::to_string(x) + " at " +
                                where(b, h, s));
        if (!(x <= limit)) {
          if (bound == nullptr)  // not reached: the limit is then FLT_MAX
            throw py::value_error(std::string(name) + " must be <= " + num(limit) + "; found " + num(x) + " at " +
                                  where(b, h, s));
          throw py::value_error(is_k ? bound->k_message(x, where(b, h, s)) : bound->v_message(x, where(b, h, s)));
        }
      }
}

// The largest of the scales check_scales would check, once every one is known finite and > 0 (it
// raises otherwise). One unsigned max per element, no branch: a float's bits minus 1, as uint32,
// grow with the value for every x > 0 and are above FLT_MAX's for +0 (wrapped), anything negative
// (-0 included), NaN and the infinities.
inline float checked_scales_max(const QParams& qp, const Dims& d, size_t n_tokens, const char* name) {
  uint32_t m = 0;
  const auto take = [&m](const float* p) {
    uint32_t u;
    std::memcpy(&u, p, sizeof u);
    u -= 1u;
    m = u > m ? u : m;
  };
  for_scale_runs(qp, d, n_tokens, [&take](const float* x, size_t n, size_t step) {
    if (step == 1) {
      for (size_t i = 0; i < n; ++i) take(x + i);
    } else {
      for (size_t i = 0; i < n; ++i) take(x + i * step);
    }
    return true;
  });
  constexpr uint32_t kFltMaxBits = 0x7f7fffffu;  // FLT_MAX's
  if (m > kFltMaxBits - 1u) check_scales(qp, d, n_tokens, name, FLT_MAX);  // raises, naming the first bad one
  const uint32_t bits = m + 1u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

// A float query must be finite: a NaN score would drop out of the softmax as if masked and an inf
// one would take all the weight, so the call would return a plausible, wrong row. Returns max |q|:
// the bits of |x| (sign cleared) grow with it, NaN and inf above every finite value's.
inline float check_finite_query(const Tensor<float>& q) {
  uint32_t m = 0;
  for (size_t i = 0; i < q.size; ++i) {
    uint32_t u;
    std::memcpy(&u, q.data + i, sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  if (m < 0x7f800000u) {
    float r;
    std::memcpy(&r, &m, sizeof r);
    return r;
  }
  for (size_t i = 0; i < q.size; ++i)
    if (!(std::fabs(q.data[i]) <= FLT_MAX))
      throw py::value_error("query must be finite; found " + std::to_string(q.data[i]) + " at flat index " +
                            std::to_string(i));
  return FLT_MAX;  // not reached
}

struct ParsedAttention {
  AttentionArgs args;
  bool empty;
  // What check_kv_scales needs when parse_attention was asked to leave the K/V scales to later.
  QParams qk, qv;
  Dims dk, dv;
  OverflowBound bound;
};

// The K/V scale check parse_attention defers (defer_kv_scales): before the call when the kernel
// cannot make it (kernel_checks_kv_scales), or after a call whose kernel found a bad scale, to
// name it.
inline void check_kv_scales(const ParsedAttention& r) {
  if (r.empty) return;
  check_scales(r.qk, r.dk, r.args.n_keys, "k_scales", r.args.k_scale_limit, &r.bound, true);
  check_scales(r.qv, r.dv, r.args.n_keys, "v_scales", r.args.v_scale_limit, &r.bound, false);
}

// The query side of the overflow bound (see kOverflowLimit), and the K and V scale limits it
// leaves: raises when the query side alone can overflow. q_max: max q_scales (int8 query) or
// max |query| (float query), both finite.
inline void set_overflow_limits(ParsedAttention& r, bool float_query, double q_max) {
  AttentionArgs& A = r.args;
  OverflowBound& o = r.bound;
  o.float_query = float_query;
  o.scale = std::fabs(static_cast<double>(A.scale));
  o.q_max = q_max;
  o.head_dim = A.head_dim;
  o.n_keys = A.n_keys;
  const double d = static_cast<double>(A.head_dim);
  double per_k;  // the largest |score| (or intermediate) per unit of k_scale
  if (float_query) {
    const double qpart = q_max * d * 256.0;
    if (qpart > kOverflowLimit)
      throw py::value_error("query can overflow float32 scores: max |query| (" + num(static_cast<float>(q_max)) +
                            ") x head_dim (" + std::to_string(A.head_dim) + ") x 256 = " + num(qpart) + " exceeds " +
                            kOverflowLimitText);
    per_k = o.scale * (qpart > 1.0 ? qpart : 1.0);
  } else {
    const double coef = o.scale * q_max;
    if (coef > kOverflowLimit)
      throw py::value_error("scale x q_scales can overflow float32 scores: |scale| (" +
                            num(static_cast<float>(o.scale)) + ") x max q_scales (" + num(static_cast<float>(q_max)) +
                            ") = " + num(coef) + " exceeds " + kOverflowLimitText);
    per_k = coef * d * 65025.0;
  }
  const double k_limit = per_k > 0.0 ? kOverflowLimit / per_k : HUGE_VAL;
  const double n = static_cast<double>(A.n_keys > 0 ? A.n_keys : 1);
  const double v_limit = kOverflowLimit / (n * 255.0);
  o.k_limit = A.k_scale_limit = k_limit < static_cast<double>(FLT_MAX) ? static_cast<float>(k_limit) : FLT_MAX;
  o.v_limit = A.v_scale_limit = v_limit < static_cast<double>(FLT_MAX) ? static_cast<float>(v_limit) : FLT_MAX;
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
  A.k_scale_limit = A.v_scale_limit = FLT_MAX;
  r.qk = qk, r.qv = qv, r.dk = dk, r.dv = dv;
  if (!r.empty) {
    const double q_max = float_query ? check_finite_query(qf) : checked_scales_max(qq, dq, dq.s, "q_scales");
    set_overflow_limits(r, float_query, q_max);
  }
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
  part("key_panels", L.kpanel_off, L.kpanel_bytes);
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
  d["pack_keys"] = P.pack_keys;
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
