// Generated from templates/module.cpp.j2 for ISA 'neon' by `python -m codegen` — do not edit.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "array_checks.h"
#include "attention.h"
#include "attention_binding.h"
#include "call_trace.h"
#include "python_errors.h"
#include "qsdpa_types.h"
#include "scratch_arena.h"
#include "neon/simd-neon.h"

namespace py = pybind11;

void qsdpa_dequant_gemm_f32s8__neon(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float* c, size_t ldc, bool accumulate);
void qsdpa_qk_gemm_s8s8__neon(size_t m, size_t n, size_t k, const qsdpa::QMatrix& a,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);
void qsdpa_qk_gemm_f32s8__neon(size_t m, size_t n, size_t k, const float* a, size_t lda,
    const qsdpa::QMatrix& b, float alpha, float* c, size_t ldc);
void qsdpa_flash_attention_s8__neon(const qsdpa::AttentionArgs& args, const qsdpa::AttentionPlan& plan,
    const qsdpa::ScratchLayout& layout, unsigned char* scratch);
void qsdpa_prefetch_tuning_get__neon(bool* to_l1, bool* walk_pages, unsigned* k_during_qk);
void qsdpa_prefetch_tuning_set__neon(bool to_l1, bool walk_pages, unsigned k_during_qk);
void qsdpa_decode_step_probe__neon(const qsdpa::AttentionArgs& A, int threads, bool to_l1, long long* dots,
    long long* key_sums, double* pv);
std::string qsdpa_decode_step_probe_refusal__neon(const qsdpa::AttentionArgs& A);
long long qsdpa_quantize_f32s8__neon(const qsdpa::QuantizeRows& a, int threads, bool check_only);

namespace {

using qsdpa::Matrix;
using qsdpa::Vector;

// Quantized rows of `data` with their per-row scale and zero point; rows = data.rows.
qsdpa::QMatrix qmatrix(const Matrix<int8_t>& data, const Vector<float>& scale, const Vector<int8_t>& zp) {
  return qsdpa::QMatrix{data.data, data.ld, scale.data, scale.stride, zp.data, zp.stride, nullptr};
}

void check_output(const Matrix<float>& c, size_t m, size_t n, std::initializer_list<std::pair<const void*, size_t>> inputs) {
  QSDPA_REQUIRE(c.rows == m && c.cols == n, "c must have shape " + qsdpa::dims(m, n) + ", got " + qsdpa::dims(c.rows, c.cols));
  for (const auto& in : inputs)
    QSDPA_REQUIRE(!qsdpa::overlaps(c, in.first, in.second), "c must not overlap an input array");
}

// The process-wide scratch arena, owned by the scalar module (see csrc/scratch_arena.h).
const qsdpa::ArenaApi* g_arena = nullptr;

// The plan of one quantized_sdpa call on this variant: its registry blocking, the caller's thread
// count. quantized_sdpa and attention_plan both take it from here, so what attention_plan reports
// is what the kernel runs.
qsdpa::AttentionPlan attention_plan_for(const qsdpa::AttentionArgs& A, int threads, int force_splits) {
  return qsdpa::plan_attention(A, static_cast<size_t>(threads), 256, 64,
                               static_cast<size_t>(force_splits), 64,
                               false);
}

// The module's quantized_sdpa (registered below as a METH_FASTCALL function): 16 or 17 positional
// arguments, the checks of parse_attention, then the kernel with the GIL released. Returns out.
PyObject* quantized_sdpa_entry(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  try {
#ifdef QSDPA_TRACE
    for (uint64_t& t : qsdpa::g_trace) t = 0;
    QSDPA_TRACE_STAMP(kTraceEntry);
#endif
    if (argc != 16 && argc != 17)
      throw py::type_error("quantized_sdpa takes 16 or 17 positional arguments (query, q_scales, q_zero_points, key, "
                           "k_scales, k_zero_points, value, v_scales, v_zero_points, attn_mask, start_pos, is_causal, "
                           "scale, is_seq_at_dim_2, out, threads[, force_splits])");
    const auto a = [argv](int i) { return py::handle(argv[i]); };
    const py::handle q = a(0), q_scales = a(1), q_zp = a(2), key = a(3), k_scales = a(4), k_zp = a(5), value = a(6),
                     v_scales = a(7), v_zp = a(8), mask = a(9), out = a(14);
    const long long start_pos = a(10).cast<long long>();
    const bool is_causal = a(11).cast<bool>(), seq_dim2 = a(13).cast<bool>();
    const double scale = a(12).cast<double>();
    const int threads = a(15).cast<int>(), force_splits = argc == 17 ? a(16).cast<int>() : 0;
    QSDPA_REQUIRE(threads >= 1, "threads must be >= 1");
    QSDPA_REQUIRE(force_splits >= 0, "force_splits must be >= 0");
    const qsdpa::ParsedAttention parsed = qsdpa::parse_attention(q, q_scales, q_zp, key, k_scales, k_zp, value, v_scales,
                                                                 v_zp, mask, start_pos, is_causal, scale, seq_dim2, out, true);
    if (!parsed.empty) {
      qsdpa::AttentionArgs A = parsed.args;
      const qsdpa::AttentionPlan plan = attention_plan_for(A, threads, force_splits);
      const qsdpa::ScratchLayout layout = qsdpa::plan_scratch_layout(plan, A);
      int kv_scale_fault = 0;
      if (qsdpa::kernel_checks_kv_scales(A, plan)) A.kv_scale_fault = &kv_scale_fault;
      else qsdpa::check_kv_scales(parsed);
      bool got_memory;
      {
        py::gil_scoped_release nogil;
        qsdpa::ArenaLease lease(g_arena, layout.total_bytes);
        got_memory = lease.ok();
        QSDPA_TRACE_STAMP(kTraceReady);
        if (got_memory) qsdpa_flash_attention_s8__neon(A, plan, layout, lease.data());
        QSDPA_TRACE_STAMP(kTraceKernelEnd);
      }
      if (!got_memory) throw std::bad_alloc();
      if (kv_scale_fault) {  // out unwritten; name the bad scale
        qsdpa::check_kv_scales(parsed);
        throw py::value_error("k_scales and v_scales must be finite and > 0 (a scale changed during the call)");
      }
    }
    return py::reinterpret_borrow<py::object>(out).release().ptr();
  } catch (...) {
    return qsdpa::raise_current_exception();
  }
}

void attach_arena(py::module_& mod) {
  std::string name = py::cast<std::string>(mod.attr("__name__"));
  const auto dot = name.rfind('.');
  const std::string owner = (dot == std::string::npos ? std::string() : name.substr(0, dot + 1)) + "_kernels_scalar";
  py::capsule cap = py::module_::import(owner.c_str()).attr("_arena_api");
  g_arena = static_cast<const qsdpa::ArenaApi*>(cap.get_pointer());
  if (g_arena == nullptr || g_arena->abi_version != qsdpa::kArenaAbiVersion)
    throw std::runtime_error("qsdpa: scratch arena ABI mismatch between " + owner + " and " + name);
}

}  // namespace

// The module's Python name. A build for A/B timing (CMake's QSDPA_AB_SUFFIX, tools/ab_decode.py)
// renames it: a second build under the same name would load as the installed one.
#ifndef QSDPA_MODULE_NAME
#define QSDPA_MODULE_NAME _kernels_neon
#endif
PYBIND11_MODULE(QSDPA_MODULE_NAME, mod) {
  mod.doc() = "qsdpa kernels for ISA 'neon' (ARMv8-A Advanced SIMD). Generated; see templates/.";
  mod.attr("ISA") = "neon";
  mod.attr("MAX_DOT_K") = qsdpa::kMaxDotK;
  // Whether prefill's int8 Q.K^T runs in GEMM form on packed key panels (AttentionPlan::pack_keys).
  mod.attr("GEMM_QK") = false;

  mod.def("whoami", []() {
    py::dict d;
    d["isa"] = "neon";
    d["family"] = "neon";
    d["cflags"] = py::make_tuple("-march=armv8-a");
    py::dict macros;
#ifdef __SSE2__
    macros["__SSE2__"] = true;
#else
    macros["__SSE2__"] = false;
#endif
#ifdef __AVX__
    macros["__AVX__"] = true;
#else
    macros["__AVX__"] = false;
#endif
#ifdef __AVX2__
    macros["__AVX2__"] = true;
#else
    macros["__AVX2__"] = false;
#endif
#ifdef __FMA__
    macros["__FMA__"] = true;
#else
    macros["__FMA__"] = false;
#endif
#ifdef __F16C__
    macros["__F16C__"] = true;
#else
    macros["__F16C__"] = false;
#endif
#ifdef __AVX512F__
    macros["__AVX512F__"] = true;
#else
    macros["__AVX512F__"] = false;
#endif
#ifdef __AVX512BW__
    macros["__AVX512BW__"] = true;
#else
    macros["__AVX512BW__"] = false;
#endif
#ifdef __AVX512DQ__
    macros["__AVX512DQ__"] = true;
#else
    macros["__AVX512DQ__"] = false;
#endif
#ifdef __AVX512VL__
    macros["__AVX512VL__"] = true;
#else
    macros["__AVX512VL__"] = false;
#endif
#ifdef __AVX512VNNI__
    macros["__AVX512VNNI__"] = true;
#else
    macros["__AVX512VNNI__"] = false;
#endif
#ifdef __ARM_NEON
    macros["__ARM_NEON"] = true;
#else
    macros["__ARM_NEON"] = false;
#endif
#ifdef __ARM_FEATURE_DOTPROD
    macros["__ARM_FEATURE_DOTPROD"] = true;
#else
    macros["__ARM_FEATURE_DOTPROD"] = false;
#endif
#ifdef __aarch64__
    macros["__aarch64__"] = true;
#else
    macros["__aarch64__"] = false;
#endif
#ifdef __x86_64__
    macros["__x86_64__"] = true;
#else
    macros["__x86_64__"] = false;
#endif
    d["macros"] = macros;
    d["compiler"] = __VERSION__;
    py::dict tiles;
    tiles["dequant_gemm"] = py::dict(py::arg("MR") = 4, py::arg("NR") = 4);
    tiles["qk_gemm"] = py::dict(py::arg("MR") = 4, py::arg("NR") = 4);
    tiles["qk_gemm_f32a"] = py::dict(py::arg("MR") = 4, py::arg("NR") = 4);
    tiles["flash_attention"] = py::dict(py::arg("KV_BLOCK") = 256, py::arg("KV_BLOCK_GROUPED") = 64, py::arg("MAX_ROWS") = 64, py::arg("QK_ROWS") = 4, py::arg("QK_KEYS") = 4, py::arg("PV_ROWS") = 4, py::arg("PV_VECS") = 4, py::arg("K_QK_EIGHTHS") = 4);
    tiles["quantize"] = py::dict(py::arg("CHAINS") = 2);
    d["tiles"] = tiles;
    return d;
  }, "ISA, compiler and the predefined ISA macros this module was built with.");

  mod.def("dequant_gemm", [](py::handle a_, py::handle b_, py::handle bs_, py::handle bz_, py::handle c_, double beta) {
    auto a = qsdpa::matrix<float>(a_, "a", false);
    auto b = qsdpa::matrix<int8_t>(b_, "b", false);
    QSDPA_REQUIRE(beta == 0.0 || beta == 1.0, "beta must be 0 or 1");
    QSDPA_REQUIRE(b.rows == a.cols, "b must have a.shape[1] = " + std::to_string(a.cols) + " rows, got " + std::to_string(b.rows));
    auto bs = qsdpa::vector<float>(bs_, "b_scales", b.rows);
    auto bz = qsdpa::vector<int8_t>(bz_, "b_zero_points", b.rows);
    auto c = qsdpa::matrix<float>(c_, "c", true);
    check_output(c, a.rows, b.cols, {qsdpa::extent(a), qsdpa::extent(b),
                 qsdpa::extent(bs), qsdpa::extent(bz)});
    if (c.rows > 0 && c.cols > 0) {
      py::gil_scoped_release nogil;
      if (a.cols == 0) {
        for (size_t i = 0; i < c.rows; ++i)
          for (size_t j = 0; j < c.cols; ++j) c.data[i * c.ld + j] = beta == 0.0 ? 0.0f : c.data[i * c.ld + j];
      } else {
        qsdpa_dequant_gemm_f32s8__neon(a.rows, b.cols, a.cols, a.data, a.ld, qmatrix(b, bs, bz), c.data, c.ld, beta != 0.0);
      }
    }
    return c_;
  }, py::arg("a"), py::arg("b"), py::arg("b_scales"), py::arg("b_zero_points"), py::arg("c"), py::arg("beta") = 0.0,
  "C[m,n] = beta*C + A[m,k] @ dequant(B[k,n]); fp32 A, per-row (per-token) int8 B.\n\na: float32 [m, k]; b: int8 [k, n]; b_scales: float32 [k]; b_zero_points: int8 [k];\n"
  "c: float32 [m, n], written in place (read only when beta == 1). Returns c.");
  mod.def("qk_gemm", [](py::handle a_, py::handle as_, py::handle az_, py::handle b_, py::handle bs_, py::handle bz_,
                        py::handle c_, double alpha) {
    auto a = qsdpa::matrix<int8_t>(a_, "a", false);
    auto b = qsdpa::matrix<int8_t>(b_, "b", false);
    QSDPA_REQUIRE(b.cols == a.cols, "b must have a.shape[1] = " + std::to_string(a.cols) + " columns, got " + std::to_string(b.cols));
    QSDPA_REQUIRE(a.cols <= qsdpa::kMaxDotK, "k = a.shape[1] must be at most " + std::to_string(qsdpa::kMaxDotK) + " (int32 exactness)");
    auto as = qsdpa::vector<float>(as_, "a_scales", a.rows);
    auto az = qsdpa::vector<int8_t>(az_, "a_zero_points", a.rows);
    auto bs = qsdpa::vector<float>(bs_, "b_scales", b.rows);
    auto bz = qsdpa::vector<int8_t>(bz_, "b_zero_points", b.rows);
    auto c = qsdpa::matrix<float>(c_, "c", true);
    check_output(c, a.rows, b.rows, {qsdpa::extent(a), qsdpa::extent(b),
                 qsdpa::extent(as), qsdpa::extent(az),
                 qsdpa::extent(bs), qsdpa::extent(bz)});
    if (c.rows > 0 && c.cols > 0) {
      py::gil_scoped_release nogil;
      qsdpa_qk_gemm_s8s8__neon(a.rows, b.rows, a.cols, qmatrix(a, as, az), qmatrix(b, bs, bz), static_cast<float>(alpha), c.data, c.ld);
    }
    return c_;
  }, py::arg("a"), py::arg("a_scales"), py::arg("a_zero_points"), py::arg("b"), py::arg("b_scales"),
  py::arg("b_zero_points"), py::arg("c"), py::arg("alpha") = 1.0,
  "C[m,n] = alpha * dequant(A[m,k]) @ dequant(B[n,k]).T; exact int32 dot products.\n\na: int8 [m, k]; a_scales: float32 [m]; a_zero_points: int8 [m]; b: int8 [n, k]; b_scales: float32 [n];\n"
  "b_zero_points: int8 [n]; c: float32 [m, n], written in place. c[i, j] = float32(d) * (float32(a_scales[i] * alpha) * b_scales[j])\n"
  "where d = sum_k (a[i,k] - a_zp[i]) * (b[j,k] - b_zp[j]) is exact (int32, k <= MAX_DOT_K). Returns c.");
  mod.def("qk_gemm_f32a", [](py::handle a_, py::handle b_, py::handle bs_, py::handle bz_, py::handle c_, double alpha) {
    auto a = qsdpa::matrix<float>(a_, "a", false);
    auto b = qsdpa::matrix<int8_t>(b_, "b", false);
    QSDPA_REQUIRE(b.cols == a.cols, "b must have a.shape[1] = " + std::to_string(a.cols) + " columns, got " + std::to_string(b.cols));
    auto bs = qsdpa::vector<float>(bs_, "b_scales", b.rows);
    auto bz = qsdpa::vector<int8_t>(bz_, "b_zero_points", b.rows);
    auto c = qsdpa::matrix<float>(c_, "c", true);
    check_output(c, a.rows, b.rows, {qsdpa::extent(a), qsdpa::extent(b),
                 qsdpa::extent(bs), qsdpa::extent(bz)});
    if (c.rows > 0 && c.cols > 0) {
      py::gil_scoped_release nogil;
      qsdpa_qk_gemm_f32s8__neon(a.rows, b.rows, a.cols, a.data, a.ld, qmatrix(b, bs, bz), static_cast<float>(alpha), c.data, c.ld);
    }
    return c_;
  }, py::arg("a"), py::arg("b"), py::arg("b_scales"), py::arg("b_zero_points"), py::arg("c"), py::arg("alpha") = 1.0,
  "C[m,n] = alpha * A[m,k] @ dequant(B[n,k]).T; fp32 A.\n\na: float32 [m, k]; b: int8 [n, k]; b_scales: float32 [n]; b_zero_points: int8 [n];\n"
  "c: float32 [m, n], written in place. Returns c.");
#ifdef QSDPA_TRACE
  // tools/call_timeline.py: the last call's stamps (0: not reached), and the clock they count.
  mod.def("_trace", []() {
    py::list stamps;
    for (uint64_t t : qsdpa::g_trace) stamps.append(t);
    return stamps;
  });
  mod.def("_trace_clock", []() { return qsdpa::trace_clock(); });
#endif
  // quantized_sdpa is a plain CPython function (METH_FASTCALL), not a pybind11 one: it is called
  // once per layer and token, and after other work has emptied the caches pybind11's dispatcher
  // (overload records, argument loaders, a tuple of the arguments) cost ~10 us a call on the Zen 4
  // VM of docs/benchmarks-history.md against ~3 for this entry. Positional only, no allocation.
  static PyMethodDef quantized_sdpa_def = {
      "quantized_sdpa", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&quantized_sdpa_entry)),
      METH_FASTCALL,
      "quantized_sdpa(query, q_scales, q_zero_points, key, k_scales, k_zero_points, value, v_scales, v_zero_points, "
      "attn_mask, start_pos, is_causal, scale, is_seq_at_dim_2, out, threads, force_splits=0)\n\nsoftmax(scale * Q.K^T + mask) . V over an int8 K/V cache, int8 or fp32 Q.\n\n"
      "Low-level entry, positional arguments only: all arrays C-contiguous, scale already resolved, out preallocated. "
      "Use qsdpa.quantized_sdpa, which checks and prepares the arguments."};
  {
    PyObject* fn = PyCFunction_NewEx(&quantized_sdpa_def, nullptr, mod.attr("__name__").ptr());
    if (fn == nullptr) throw py::error_already_set();
    mod.add_object("quantized_sdpa", py::reinterpret_steal<py::object>(fn));
  }

  mod.def("attention_plan", [](py::handle q, py::handle q_scales, py::handle q_zp, py::handle key, py::handle k_scales,
                               py::handle k_zp, py::handle value, py::handle v_scales, py::handle v_zp, py::handle mask,
                               long long start_pos, bool is_causal, double scale, bool seq_dim2, py::handle out,
                               int threads, int force_splits) {
    QSDPA_REQUIRE(threads >= 1, "threads must be >= 1");
    // The plan depends on shapes only: the K/V scale values are left to the call.
    const qsdpa::ParsedAttention parsed = qsdpa::parse_attention(q, q_scales, q_zp, key, k_scales, k_zp, value, v_scales,
                                                                 v_zp, mask, start_pos, is_causal, scale, seq_dim2, out, true);
    const qsdpa::AttentionArgs& A = parsed.args;
    const qsdpa::AttentionPlan plan = attention_plan_for(A, threads, force_splits);
    py::dict d = qsdpa::plan_dict(plan);
    d["kernel_checks_kv_scales"] = qsdpa::kernel_checks_kv_scales(A, plan);
    d["scratch"] = qsdpa::layout_dict(qsdpa::plan_scratch_layout(plan, A));
    // Each KV split's first key, and the end, for a query block that attends all n_keys keys.
    py::list firsts;
    for (size_t s = 0; s <= plan.kv_splits; ++s)
      firsts.append(qsdpa::split_first_key(A.n_keys, plan.kv_splits, plan.threads, s));
    d["split_first_keys"] = firsts;
    return d;
  }, "The work decomposition and scratch layout quantized_sdpa would use for these arguments (same signature).");
  // Machine probe for the benchmark's cold decode targets: the least-work decode step (flash
  // attention's step_thread) over a decode call's int8 inputs, GIL released. Returns its totals
  // (sum of its dots, of the key sums, of P.V with weights exp(0) * V scale) and whether the dots
  // are the u8 scheme's (q + 128) or the s16 scheme's (q - zq): what the tests check it by.
  mod.def("_decode_step_probe", [](py::handle q, py::handle q_scales, py::handle q_zp, py::handle key,
                                   py::handle k_scales, py::handle k_zp, py::handle value, py::handle v_scales,
                                   py::handle v_zp, long long start_pos, py::handle out, int threads, bool to_l1) {
    QSDPA_REQUIRE(threads >= 1, "threads must be >= 1");
    const qsdpa::ParsedAttention parsed = qsdpa::parse_attention(q, q_scales, q_zp, key, k_scales, k_zp, value, v_scales,
                                                                 v_zp, py::none(), start_pos, false, 1.0, false, out,
                                                                 true);  // scales unchecked: see below
    const qsdpa::AttentionArgs& A = parsed.args;
    // The K/V scales are left unchecked, work the step need not do: it writes nothing, and a bad
    // scale only makes its P.V total not finite.
    if (parsed.empty) throw py::value_error("the step probe needs a query row and a key");
    const std::string refusal = qsdpa_decode_step_probe_refusal__neon(A);
    if (!refusal.empty()) throw py::value_error(refusal);
    long long dots = 0, key_sums = 0;
    double pv = 0.0;
    {
      py::gil_scoped_release nogil;
      qsdpa_decode_step_probe__neon(A, threads, to_l1, &dots, &key_sums, &pv);
    }
    return py::make_tuple(dots, key_sums, pv, qsdpa::neon::kQkU8 ? "u8" : "s16");
  }, py::arg("query"), py::arg("q_scales"), py::arg("q_zero_points"), py::arg("key"), py::arg("k_scales"),
     py::arg("k_zero_points"), py::arg("value"), py::arg("v_scales"), py::arg("v_zero_points"), py::arg("start_pos"),
     py::arg("out"), py::arg("threads") = 1, py::arg("to_l1") = true);
  mod.def("quantize_rows", [](py::handle x_, py::handle q_, py::handle s_, py::handle z_, int threads, bool check_only) {
    QSDPA_REQUIRE(threads >= 1, "threads must be >= 1");
    const auto x = qsdpa::rows3<float>(x_, "x", false);
    qsdpa::QuantizeRows r{x.shape[0], x.shape[1], x.shape[2], x.data, x.stride[0], x.stride[1],
                          nullptr, 0, 0, nullptr, 0, 0, nullptr, 0, 0};
    if (!check_only) {
      const auto q = qsdpa::rows3<int8_t>(q_, "q8", true);
      const auto s = qsdpa::rows3<float>(s_, "scales", true);
      const auto z = qsdpa::rows3<int8_t>(z_, "zero_points", true);
      for (int d = 0; d < 3; ++d) {
        QSDPA_REQUIRE(q.shape[d] == x.shape[d], "q8 must have the shape of x");
        QSDPA_REQUIRE(s.shape[d] == (d < 2 ? x.shape[d] : 1), "scales must have shape x.shape[:2] + (1,)");
        QSDPA_REQUIRE(z.shape[d] == (d < 2 ? x.shape[d] : 1), "zero_points must have shape x.shape[:2] + (1,)");
      }
      const std::pair<const void*, size_t> spans[4] = {qsdpa::extent(x), qsdpa::extent(q), qsdpa::extent(s), qsdpa::extent(z)};
      const char* names[4] = {"x", "q8", "scales", "zero_points"};
      for (int i = 1; i < 4; ++i)
        for (int j = 0; j < i; ++j)
          QSDPA_REQUIRE(!qsdpa::ranges_overlap(spans[i].first, spans[i].second, spans[j].first, spans[j].second),
                        std::string(names[i]) + " must not overlap " + names[j]);
      r.q = q.data, r.qo = q.stride[0], r.qi = q.stride[1];
      r.scale = s.data, r.so = s.stride[0], r.si = s.stride[1];
      r.zp = z.data, r.zo = z.stride[0], r.zi = z.stride[1];
    }
    long long bad;
    {
      py::gil_scoped_release nogil;
      bad = qsdpa_quantize_f32s8__neon(r, threads, check_only);
    }
    if (bad <= -2) {  // a row of finite values whose range overflows float32: its scale would be inf
      const size_t row = static_cast<size_t>(-2 - bad);
      qsdpa::throw_row_range_error(x.data + (row / x.shape[1]) * x.stride[0] + (row % x.shape[1]) * x.stride[1],
                                   x.shape[2], row);
    }
    return bad;
  }, py::arg("x"), py::arg("q8"), py::arg("scales"), py::arg("zero_points"), py::arg("threads") = 1,
  py::arg("check_only") = false,
  "per-token asymmetric int8 quantization of fp32 rows, bit-identical to PyTorch's choose_qparams_per_token_asymmetric + quantize_per_token.\n\nx: float32 [outer, inner, d], rows contiguous, any other strides; q8: int8 like x; scales: float32\n"
  "[outer, inner, 1]; zero_points: int8 [outer, inner, 1] (outputs may be strided views, e.g. a cache slice).\n"
  "Every row is checked first: returns the flat index of the first row holding a NaN or an infinity, with\n"
  "nothing written, or -1 with every row quantized (check_only: -1, nothing written; the outputs may be None).\n"
  "A first bad row of finite values whose range (max - min) exceeds float32 raises ValueError naming x,\n"
  "nothing written (callers rename x to their own argument; a 7th argument would make pybind11 allocate).");

  // How decode blocks prefetch the next one on this CPU (flash_attention's prefetch_tuning): what
  // qsdpa.show_runtime() reports, and what tests and A/B timing set. Results never depend on it.
  mod.def("_prefetch_tuning", []() {
    bool to_l1 = false, walk_pages = false;
    unsigned k_during_qk = 0;
    qsdpa_prefetch_tuning_get__neon(&to_l1, &walk_pages, &k_during_qk);
    py::dict d;
    d["to_l1"] = to_l1;
    d["walk_pages"] = walk_pages;
    d["k_during_qk_eighths"] = k_during_qk;
    return d;
  });
  mod.def("_set_prefetch_tuning", [](bool to_l1, bool walk_pages, int k_during_qk_eighths) {
    if (k_during_qk_eighths < 0 || k_during_qk_eighths > 8)
      throw py::value_error("k_during_qk_eighths must be in [0, 8], got " + std::to_string(k_during_qk_eighths));
    qsdpa_prefetch_tuning_set__neon(to_l1, walk_pages, static_cast<unsigned>(k_during_qk_eighths));
  }, py::arg("to_l1"), py::arg("walk_pages"), py::arg("k_during_qk_eighths"));
  // Test hook: the vectorised exp the softmax uses, applied to a float32 array in place.
  mod.def("_vexp", [](py::handle x_) {
    auto x = qsdpa::matrix<float>(x_, "x", true);
    using namespace qsdpa::neon;
    for (size_t i = 0; i < x.rows; ++i) {
      float* row = x.data + i * x.ld;
      size_t j = 0;
      for (; j + NF <= x.cols; j += NF) vstore(row + j, vexp(vload(row + j)));
      for (; j < x.cols; ++j) vstore_n(row + j, vexp(vload_n(row + j, 1)), 1);
    }
    return x_;
  }, py::arg("x"));
  // Machine probe for the benchmark: `steps` rounds of 8 independent vector FMA chains (this
  // variant's widest), GIL released so that Python threads run it side by side. Timed on 1 and on
  // N threads it tells how much compute the CPUs really add (vCPUs may share a physical core).
  mod.def("_fma_probe", [](size_t steps) {
    using namespace qsdpa::neon;
    // Eight named chains: an array of them ends up stored back to the stack on every step.
    vf a0 = vset1(1.0f), a1 = vset1(1.001f), a2 = vset1(1.002f), a3 = vset1(1.003f), a4 = vset1(1.004f),
       a5 = vset1(1.005f), a6 = vset1(1.006f), a7 = vset1(1.007f);
    const vf m = vset1(0.999999f), c = vset1(1e-7f);
    {
      py::gil_scoped_release nogil;
      for (size_t s = 0; s < steps; ++s) {
        a0 = vfma(a0, m, c), a1 = vfma(a1, m, c), a2 = vfma(a2, m, c), a3 = vfma(a3, m, c);
        a4 = vfma(a4, m, c), a5 = vfma(a5, m, c), a6 = vfma(a6, m, c), a7 = vfma(a7, m, c);
      }
    }
    // The result, so the chains are not optimised away.
    return vhsum(vadd(vadd(vadd(a0, a1), vadd(a2, a3)), vadd(vadd(a4, a5), vadd(a6, a7))));
  }, py::arg("steps"));
  // Machine probe for the benchmark's bandwidth floor: reads every byte of a contiguous int8 array
  // once, eight independent 64-bit sums per 64-byte line (the compiler widens them to this
  // variant's vectors), GIL released. threads > 1 splits the lines over an OpenMP team, the same
  // team the attention kernels run on, so a floor at N threads pays what an N-thread call pays to
  // start its team, and no Python thread pool's hand-off (tens of microseconds, as long as a
  // 2-thread floor of a few MB). A floor measured with a loop slower than the memory (numpy's
  // float32 sum is: ~1 element per cycle) would be too low a bar.
  mod.def("_read_probe", [](py::handle data_, int threads) {
    py::array data = qsdpa::as_array(data_, "data");
    qsdpa::check_dtype<int8_t>(data, "data");
    if (data.ndim() != 1 || !(data.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_))
      throw py::value_error("data must be a 1-D C-contiguous int8 array");
    if (threads < 1) throw py::value_error("threads must be >= 1, got " + std::to_string(threads));
    const unsigned char* p = static_cast<const unsigned char*>(data.data());
    const size_t n = static_cast<size_t>(data.size());
    const size_t lines = n / 64;
    uint64_t sum = 0;
    {
      py::gil_scoped_release nogil;
#pragma omp parallel num_threads(threads) reduction(+ : sum) if (threads > 1)
      {
#ifdef _OPENMP
        const size_t id = static_cast<size_t>(omp_get_thread_num()), nt = static_cast<size_t>(omp_get_num_threads());
#else
        const size_t id = 0, nt = 1;
#endif
        uint64_t acc[8] = {};
        for (size_t i = lines * id / nt * 64, end = lines * (id + 1) / nt * 64; i < end; i += 64)
          for (int j = 0; j < 8; ++j) {
            uint64_t w;
            std::memcpy(&w, p + i + 8 * j, 8);  // the defined way to read bytes as a word
            acc[j] += w;
          }
        for (int j = 0; j < 8; ++j) sum += acc[j];
      }
    }
    for (size_t i = lines * 64; i < n; ++i) sum += p[i];
    // The result, so the reads are not optimised away.
    return sum;
  }, py::arg("data"), py::arg("threads") = 1);
  attach_arena(mod);
}
