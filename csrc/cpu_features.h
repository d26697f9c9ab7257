// Native CPU/OS feature check. Compiled only into qsdpa._kernels_scalar, which is built without ISA
// flags, so it is safe to import on every CPU of its architecture; the Python dispatcher asks it which
// other variant modules are safe to import (a module built with -mavx512f can SIGILL at import).
#pragma once

#include <pybind11/pybind11.h>

namespace qsdpa {

// Adds cpu_features(), cpu_raw() and omp_max_threads() to the scalar module.
void register_cpu_features(pybind11::module_& m);

}  // namespace qsdpa
