// C++ exceptions as Python ones, for entry points registered as plain CPython functions.
#pragma once
#include <pybind11/pybind11.h>

#include <new>
#include <stdexcept>

namespace qsdpa {
namespace {

namespace py = pybind11;

// pybind11 turns C++ exceptions into Python ones only inside its own dispatcher. Functions that
// bypass it call this inside `catch (...)`: the exception in flight becomes the Python error it
// would have become there (pybind11's mapping of the std types), and the function returns nullptr.
inline PyObject* raise_current_exception() {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::length_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::domain_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_IndexError, e.what());
  } catch (const std::range_error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::overflow_error& e) {
    PyErr_SetString(PyExc_OverflowError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "qsdpa: unknown C++ exception");
  }
  return nullptr;
}

}  // namespace
}  // namespace qsdpa
