// Argument checking for the pybind11 bindings: every array a kernel will read or write is checked
// here (dtype, rank, shape, strides) so that a bad argument becomes a Python exception naming it,
// never an out-of-bounds access. Internal linkage: each variant module gets its own copy.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace qsdpa {
namespace {

namespace py = pybind11;

template <typename T>
struct DtypeName;
template <>
struct DtypeName<float> {
  static constexpr const char* name = "float32";
  static constexpr char kind = 'f';
};
template <>
struct DtypeName<bool> {
  static constexpr const char* name = "bool";
  static constexpr char kind = 'b';
};
template <>
struct DtypeName<int8_t> {
  static constexpr const char* name = "int8";
  static constexpr char kind = 'i';
};

inline bool native_byte_order(char bo) {
  // '=' native, '|' not applicable (1-byte types); '<' is native on every target we build.
  return bo == '=' || bo == '|' || bo == '<';
}

// numpy marks arrays at addresses that are not a multiple of their item size (a view of a byte
// buffer at an odd offset) as unaligned; reading one through a float* is undefined behaviour.
inline void check_aligned(const py::array& a, const char* name) {
  if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
    throw py::value_error(std::string(name) + " must be aligned to its item size");
}

inline py::array as_array(const py::handle& obj, const char* name) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(name) + " must be a numpy.ndarray, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  return py::reinterpret_borrow<py::array>(obj);
}

template <typename T>
void check_dtype(const py::array& a, const char* name) {
  py::dtype dt = a.dtype();
  if (dt.kind() != DtypeName<T>::kind || dt.itemsize() != static_cast<py::ssize_t>(sizeof(T)) ||
      !native_byte_order(dt.byteorder())) {
    throw py::type_error(std::string(name) + " must have dtype " + DtypeName<T>::name + ", got " +
                         std::string(py::str(dt)));
  }
}

template <typename T>
struct Matrix {
  T* data;
  size_t rows, cols, ld;  // ld: row stride in elements
};

// A 2-D array whose rows are contiguous and whose row stride is a positive multiple of the item
// size (numpy slices of a larger array qualify). Empty arrays are accepted with any strides.
template <typename T>
Matrix<T> matrix(const py::handle& obj, const char* name, bool writable) {
  py::array a = as_array(obj, name);
  check_dtype<T>(a, name);
  if (a.ndim() != 2) throw py::value_error(std::string(name) + " must be 2-D, got " + std::to_string(a.ndim()) + "-D");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + " must be writeable");
  check_aligned(a, name);
  const auto rows = static_cast<size_t>(a.shape(0)), cols = static_cast<size_t>(a.shape(1));
  const py::ssize_t s0 = a.strides(0), s1 = a.strides(1), item = sizeof(T);
  size_t ld = cols;
  if (rows > 0 && cols > 0) {
    if (cols > 1 && s1 != item)
      throw py::value_error(std::string(name) + " must have contiguous rows (inner stride " + std::to_string(s1) + ")");
    if (rows > 1 && (s0 <= 0 || s0 % item != 0 || static_cast<size_t>(s0 / item) < cols))
      throw py::value_error(std::string(name) + " has an unsupported row stride " + std::to_string(s0));
    if (rows > 1) ld = static_cast<size_t>(s0 / item);
  }
  T* data = writable ? static_cast<T*>(a.mutable_data()) : const_cast<T*>(static_cast<const T*>(a.data()));
  return Matrix<T>{data, rows, cols, ld};
}

template <typename T>
struct Vector {
  const T* data;
  size_t n, stride;  // stride in elements
};

template <typename T>
Vector<T> vector(const py::handle& obj, const char* name, size_t expected) {
  py::array a = as_array(obj, name);
  check_dtype<T>(a, name);
  if (a.ndim() != 1) throw py::value_error(std::string(name) + " must be 1-D, got " + std::to_string(a.ndim()) + "-D");
  const auto n = static_cast<size_t>(a.shape(0));
  if (n != expected)
    throw py::value_error(std::string(name) + " must have " + std::to_string(expected) + " elements, got " + std::to_string(n));
  check_aligned(a, name);
  const py::ssize_t s = a.strides(0), item = sizeof(T);
  size_t stride = 1;
  if (n > 1) {
    if (s <= 0 || s % item != 0) throw py::value_error(std::string(name) + " has an unsupported stride " + std::to_string(s));
    stride = static_cast<size_t>(s / item);
  }
  return Vector<T>{static_cast<const T*>(a.data()), n, stride};
}

// A C-contiguous array of rank `ndim` (any shape, including empty).
template <typename T>
struct Tensor {
  T* data;
  size_t shape[4];
  size_t size;
};

template <typename T>
Tensor<T> tensor(const py::handle& obj, const char* name, int ndim, bool writable) {
  py::array a = as_array(obj, name);
  check_dtype<T>(a, name);
  if (a.ndim() != ndim)
    throw py::value_error(std::string(name) + " must be " + std::to_string(ndim) + "-D, got " + std::to_string(a.ndim()) + "-D");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + " must be writeable");
  check_aligned(a, name);
  Tensor<T> t{};
  t.size = 1;
  for (int d = 0; d < ndim; ++d) {
    t.shape[d] = static_cast<size_t>(a.shape(d));
    t.size *= t.shape[d];
  }
  if (t.size > 0) {
    py::ssize_t expect = sizeof(T);
    for (int d = ndim - 1; d >= 0; --d) {
      if (t.shape[d] > 1 && a.strides(d) != expect)
        throw py::value_error(std::string(name) + " must be C-contiguous");
      expect *= static_cast<py::ssize_t>(t.shape[d]);
    }
  }
  t.data = writable ? static_cast<T*>(a.mutable_data()) : const_cast<T*>(static_cast<const T*>(a.data()));
  return t;
}

template <typename T>
size_t span_bytes(const Tensor<T>& t) {
  return t.size * sizeof(T);
}

inline bool is_dtype(const py::handle& obj, char kind, size_t itemsize) {
  if (!py::isinstance<py::array>(obj)) return false;
  py::dtype dt = py::reinterpret_borrow<py::array>(obj).dtype();
  return dt.kind() == kind && dt.itemsize() == static_cast<py::ssize_t>(itemsize);
}

// A 3-D array of rows: contiguous along the last axis, any non-negative element strides along the
// first two (writable ones: no two rows at the same place). Slices of a KV cache qualify.
template <typename T>
struct Rows3 {
  T* data;
  size_t shape[3];
  size_t stride[3];  // elements
};

template <typename T>
Rows3<T> rows3(const py::handle& obj, const char* name, bool writable) {
  py::array a = as_array(obj, name);
  check_dtype<T>(a, name);
  if (a.ndim() != 3) throw py::value_error(std::string(name) + " must be 3-D, got " + std::to_string(a.ndim()) + "-D");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + " must be writeable");
  check_aligned(a, name);
  Rows3<T> t{};
  size_t size = 1;
  for (int d = 0; d < 3; ++d) {
    t.shape[d] = static_cast<size_t>(a.shape(d));
    size *= t.shape[d];
  }
  const py::ssize_t item = sizeof(T);
  for (int d = 0; d < 3; ++d) {
    const py::ssize_t s = a.strides(d);
    t.stride[d] = 0;
    if (size == 0 || t.shape[d] == 1) continue;
    if (d == 2 && s != item)
      throw py::value_error(std::string(name) + " must have contiguous rows (inner stride " + std::to_string(s) + ")");
    if (s < 0 || s % item != 0 || (writable && s == 0))
      throw py::value_error(std::string(name) + " has an unsupported stride " + std::to_string(s));
    t.stride[d] = static_cast<size_t>(s / item);
  }
  t.data = writable ? static_cast<T*>(a.mutable_data()) : const_cast<T*>(static_cast<const T*>(a.data()));
  return t;
}

template <typename T>
size_t span_bytes(const Rows3<T>& t) {
  if (t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0) return 0;
  size_t last = 0;
  for (int d = 0; d < 3; ++d) last += (t.shape[d] - 1) * t.stride[d];
  return (last + 1) * sizeof(T);
}

// Whether the byte ranges [p, p + n) and [q, q + m) share a byte.
inline bool ranges_overlap(const void* p, size_t n, const void* q, size_t m) {
  if (n == 0 || m == 0) return false;
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + m && b < a + n;
}

// Argument check: the message (often built with std::to_string) is only evaluated when the check
// fails, so a valid call allocates nothing here.
#define QSDPA_REQUIRE(ok, message)                          \
  do {                                                      \
    if (!(ok)) throw ::pybind11::value_error(message);      \
  } while (0)

inline std::string dims(size_t a, size_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

// Byte range [lo, hi) covered by a matrix, for overlap checks between inputs and the output.
template <typename T>
bool overlaps(const Matrix<T>& out, const void* p, size_t bytes) {
  if (out.rows == 0 || out.cols == 0 || bytes == 0) return false;
  auto lo = reinterpret_cast<uintptr_t>(out.data);
  auto hi = lo + ((out.rows - 1) * out.ld + out.cols) * sizeof(T);
  auto plo = reinterpret_cast<uintptr_t>(p);
  return plo < hi && lo < plo + bytes;
}

template <typename T>
size_t span_bytes(const Matrix<T>& m) {
  return (m.rows == 0 || m.cols == 0) ? 0 : ((m.rows - 1) * m.ld + m.cols) * sizeof(T);
}

template <typename T>
size_t span_bytes(const Vector<T>& v) {
  return v.n == 0 ? 0 : ((v.n - 1) * v.stride + 1) * sizeof(T);
}

// (start, bytes) of an input, for check_output's overlap test.
template <typename A>
std::pair<const void*, size_t> extent(const A& x) {
  return {static_cast<const void*>(x.data), span_bytes(x)};
}

}  // namespace
}  // namespace qsdpa
