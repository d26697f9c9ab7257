// qsdpa._entry: qsdpa.quantized_sdpa's usual call handled at the C level.
//
// A decode step calls quantized_sdpa once per layer, each time after the layer's other work has
// emptied the caches. The Python function's fast path (qsdpa/_attention.py) is ~25 type checks; run
// by the interpreter with cold caches they took ~20 us of a call on the Zen 4 VM of
// docs/benchmarks-history.md (a 1-key call after the bench's pause: 75 us through them, 53 from a C
// function making the same checks, 51 calling the variant module directly). This function makes
// exactly the Python fast path's checks and, when they hold, calls the selected variant module
// itself. Every other call, and every call the variant module refuses with a ValueError or
// RuntimeError, goes to the Python code, which stays the one definition of what the complete path
// accepts and of every error message.
//
// Baseline flags only (no ISA flags): `import qsdpa` imports this module on any CPU.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstring>
#include <string>

namespace py = pybind11;

namespace {

// quantized_sdpa's parameters, in order: 15 positional-or-keyword, then `out`, keyword-only.
enum Param { kQuery, kKey, kValue, kStart, kMask, kDropout, kCausal, kScale, kQz, kQs, kKz, kKs, kVz, kVs, kSeqDim2, kOut,
             kParams };
constexpr Py_ssize_t kPositional = kOut;
constexpr const char* kNames[kParams] = {"query", "key", "value", "start_pos", "attn_mask", "dropout_p", "is_causal",
                                         "scale", "q_zero_points", "q_scales", "k_zero_points", "k_scales",
                                         "v_zero_points", "v_scales", "is_seq_at_dim_2", "out"};

struct EntryState {
  PyObject* python_impl = nullptr;  // _attention._quantized_sdpa_py: the whole function, for other calls
  PyObject* complete = nullptr;     // _attention._complete_path: after the variant module refused a call
  PyObject* dispatch = nullptr;     // qsdpa._dispatch (its _selection)
  PyObject* threads = nullptr;      // qsdpa._threads (its _num_threads)
  PyObject* names[kParams] = {};    // interned parameter names
  PyObject* s_selection = nullptr;
  PyObject* s_module = nullptr;
  PyObject* s_quantized_sdpa = nullptr;
  PyObject* s_num_threads = nullptr;
  PyObject* zero = nullptr;         // force_splits
  PyObject* zero_float = nullptr;   // dropout_p's default, for the complete path
  PyObject* default_scale = nullptr;  // 1/sqrt(default_scale_dim), the last default scale made
  Py_ssize_t default_scale_dim = -1;
  PyTypeObject* ndarray = nullptr;
  bool ready = false;
  // Calls so far (the GIL serialises them): run here, handed to the Python function, refused by
  // the variant module and sent down the complete path. For tests and show_runtime().
  unsigned long long fast = 0, delegated = 0, refused = 0;
};
EntryState g;

PyMethodDef g_def{};      // quantized_sdpa's method record (its doc is set once, by make_entry)
std::string g_doc;

bool is_array(PyObject* x) { return Py_TYPE(x) == g.ndarray; }
bool is_array_or_none(PyObject* x) { return x == nullptr || x == Py_None || is_array(x); }
bool is_bool_or_absent(PyObject* x) { return x == nullptr || x == Py_True || x == Py_False; }

PyObject* delegate(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  ++g.delegated;
  return PyObject_Vectorcall(g.python_impl, args, static_cast<size_t>(nargs), kwnames);
}

// The default scale object for this head dim: 1/sqrt(D), computed as Python's fast path computes
// it (both IEEE double: the same value); kept for the next call with the same head dim.
PyObject* default_scale(Py_ssize_t head_dim) {
  if (head_dim != g.default_scale_dim || g.default_scale == nullptr) {
    PyObject* s = PyFloat_FromDouble(head_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0);
    if (s == nullptr) return nullptr;
    Py_XDECREF(g.default_scale);
    g.default_scale = s;
    g.default_scale_dim = head_dim;
  }
  return g.default_scale;  // borrowed
}

PyObject* attribute(PyObject* obj, PyObject* name) {  // new reference, or nullptr with no error set
  PyObject* r = PyObject_GetAttr(obj, name);
  if (r == nullptr) PyErr_Clear();
  return r;
}

PyObject* quantized_sdpa(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (!g.ready || nargs > kPositional) return delegate(args, nargs, kwnames);
  // Bind the arguments; anything unusual (an unknown or repeated name) is the Python function's to report.
  PyObject* v[kParams] = {};
  for (Py_ssize_t i = 0; i < nargs; ++i) v[i] = args[i];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, j);
    int p = 0;
    while (p < kParams && g.names[p] != name) ++p;  // call sites' keyword names are interned
    if (p == kParams || v[p] != nullptr) return delegate(args, nargs, kwnames);
    v[p] = args[nargs + j];
  }
  // Python's fast-path conditions, one for one; out= given (the decode loop's call).
  PyObject* const scale = v[kScale];
  const bool fast = v[kQuery] != nullptr && v[kKey] != nullptr && v[kValue] != nullptr && v[kStart] != nullptr &&
                    (v[kMask] == nullptr || v[kMask] == Py_None) && is_array(v[kQuery]) && is_array(v[kKey]) &&
                    is_array(v[kValue]) && is_array_or_none(v[kQz]) && is_array_or_none(v[kQs]) &&
                    is_array_or_none(v[kKz]) && is_array_or_none(v[kKs]) && is_array_or_none(v[kVz]) &&
                    is_array_or_none(v[kVs]) && v[kOut] != nullptr && is_array(v[kOut]) && PyLong_CheckExact(v[kStart]) &&
                    (v[kDropout] == nullptr || (PyFloat_CheckExact(v[kDropout]) && PyFloat_AS_DOUBLE(v[kDropout]) == 0.0)) &&
                    is_bool_or_absent(v[kCausal]) && is_bool_or_absent(v[kSeqDim2]) &&
                    py::detail::array_proxy(v[kQuery])->nd == 4 &&
                    (scale == nullptr || scale == Py_None ||
                     (PyFloat_CheckExact(scale) && std::isfinite(PyFloat_AS_DOUBLE(scale))));
  if (!fast) return delegate(args, nargs, kwnames);
  PyObject* scale_value = (scale == nullptr || scale == Py_None)
                              ? default_scale(py::detail::array_proxy(v[kQuery])->dimensions[3])
                              : scale;
  if (scale_value == nullptr) return nullptr;
  // The selected variant and the thread count, as Python reads them; not resolved yet: Python's first call does it.
  PyObject* threads = attribute(g.threads, g.s_num_threads);
  PyObject* selection = attribute(g.dispatch, g.s_selection);
  PyObject* module = selection != nullptr && selection != Py_None ? attribute(selection, g.s_module) : nullptr;
  PyObject* fn = module != nullptr ? attribute(module, g.s_quantized_sdpa) : nullptr;
  Py_XDECREF(module);
  Py_XDECREF(selection);
  if (fn == nullptr || threads == nullptr || !PyLong_CheckExact(threads)) {
    Py_XDECREF(fn);
    Py_XDECREF(threads);
    return delegate(args, nargs, kwnames);
  }
  PyObject* const causal = v[kCausal] != nullptr ? v[kCausal] : Py_False;
  PyObject* const seq_dim2 = v[kSeqDim2] != nullptr ? v[kSeqDim2] : Py_False;
  const auto opt = [](PyObject* x) { return x != nullptr ? x : Py_None; };
  PyObject* call[17] = {v[kQuery], opt(v[kQs]), opt(v[kQz]), v[kKey], opt(v[kKs]), opt(v[kKz]), v[kValue],
                        opt(v[kVs]), opt(v[kVz]), Py_None, v[kStart], causal, scale_value, seq_dim2, v[kOut],
                        threads, g.zero};
  PyObject* result = PyObject_Vectorcall(fn, call, 17, nullptr);
  Py_DECREF(fn);
  Py_DECREF(threads);
  if (result != nullptr) ++g.fast;
  if (result != nullptr || !(PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_RuntimeError)))
    return result;
  // e.g. a non-contiguous input, or a start_pos beyond int64: nothing was written; the complete
  // path copies or raises its own error.
  PyErr_Clear();
  ++g.refused;
  PyObject* full[kParams];
  for (int p = 0; p < kParams; ++p) full[p] = v[p] != nullptr ? v[p] : Py_None;
  full[kDropout] = v[kDropout] != nullptr ? v[kDropout] : g.zero_float;
  full[kCausal] = causal;
  full[kSeqDim2] = seq_dim2;
  return PyObject_Vectorcall(g.complete, full, kParams, nullptr);
}

// make_entry(doc, python_impl, complete_path, dispatch_module, threads_module): the C-level
// quantized_sdpa (a builtin whose doc is `doc`, text signature first), once per process.
PyObject* make_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "make_entry(doc: str, python_impl, complete_path, dispatch, threads)");
    return nullptr;
  }
  if (g.ready) {
    PyErr_SetString(PyExc_RuntimeError, "qsdpa._entry.make_entry: already made");
    return nullptr;
  }
  const char* doc = PyUnicode_AsUTF8(args[0]);
  if (doc == nullptr) return nullptr;
  try {
    py::detail::npy_api& np = py::detail::npy_api::get();  // imports numpy's C API table
    g.ndarray = np.PyArray_Type_;
  } catch (...) {
    PyErr_SetString(PyExc_ImportError, "qsdpa._entry: numpy's C API is not available");
    return nullptr;
  }
  for (int p = 0; p < kParams; ++p)
    if ((g.names[p] = PyUnicode_InternFromString(kNames[p])) == nullptr) return nullptr;
  if ((g.s_selection = PyUnicode_InternFromString("_selection")) == nullptr ||
      (g.s_module = PyUnicode_InternFromString("module")) == nullptr ||
      (g.s_quantized_sdpa = PyUnicode_InternFromString("quantized_sdpa")) == nullptr ||
      (g.s_num_threads = PyUnicode_InternFromString("_num_threads")) == nullptr ||
      (g.zero = PyLong_FromLong(0)) == nullptr || (g.zero_float = PyFloat_FromDouble(0.0)) == nullptr)
    return nullptr;
  for (Py_ssize_t i = 1; i < 5; ++i) Py_INCREF(args[i]);  // held for the process's life
  g.python_impl = args[1];
  g.complete = args[2];
  g.dispatch = args[3];
  g.threads = args[4];
  g_doc = doc;
  g_def.ml_name = "quantized_sdpa";
  g_def.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&quantized_sdpa));
  g_def.ml_flags = METH_FASTCALL | METH_KEYWORDS;
  g_def.ml_doc = g_doc.c_str();
  PyObject* module_name = PyUnicode_FromString("qsdpa");
  if (module_name == nullptr) return nullptr;
  PyObject* fn = PyCFunction_NewEx(&g_def, nullptr, module_name);
  Py_DECREF(module_name);
  if (fn != nullptr) g.ready = true;
  return fn;
}

PyObject* counts(PyObject*, PyObject*) {
  return Py_BuildValue("{sKsKsK}", "fast", g.fast, "delegated", g.delegated, "refused", g.refused);
}

PyMethodDef g_module_methods[] = {
    {"counts", &counts, METH_NOARGS,
     "counts(): {'fast', 'delegated', 'refused'}: quantized_sdpa calls run at the C level, handed to the Python "
     "function, and refused by the variant module (then run by the complete path), since import."},
    {"make_entry", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&make_entry)), METH_FASTCALL,
     "make_entry(doc, python_impl, complete_path, dispatch, threads): the C-level quantized_sdpa (once)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module{PyModuleDef_HEAD_INIT, "_entry",
                     "qsdpa.quantized_sdpa's usual call at the C level (see csrc/public_entry.cpp).", -1,
                     g_module_methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__entry() { return PyModule_Create(&g_module); }
