# Cross toolchain for the aarch64 variants (CI only): Debian's aarch64-linux-gnu-g++ building against
# an arm64 rootfs unpacked by `mmdebstrap --variant=extract` (python3.11 headers + libs).
#
#   cmake -S . -B BUILD -G Ninja --toolchain .ci/aarch64-toolchain.cmake \
#         -DQSDPA_AARCH64_ROOT=/path/to/arm64root -DPython_EXECUTABLE=$(host python)
#
# The host Python is used only to run codegen (FindPython's Interpreter component); the module
# headers and the extension suffix are the target's, given below so FindPython and pybind11 never
# ask the host interpreter for them.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# try_compile() re-reads the toolchain file in a fresh project: forward the rootfs location.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES QSDPA_AARCH64_ROOT)
if(NOT QSDPA_AARCH64_ROOT AND DEFINED ENV{QSDPA_AARCH64_ROOT})
  set(QSDPA_AARCH64_ROOT "$ENV{QSDPA_AARCH64_ROOT}")
endif()
if(NOT QSDPA_AARCH64_ROOT OR NOT EXISTS "${QSDPA_AARCH64_ROOT}/usr/include")
  message(FATAL_ERROR "set QSDPA_AARCH64_ROOT to an arm64 rootfs with libpython3.11-dev (got '${QSDPA_AARCH64_ROOT}')")
endif()

set(QSDPA_ARCH aarch64 CACHE STRING "qsdpa variant set")

# Debian's <python3.11/pyconfig.h> includes <aarch64-linux-gnu/python3.11/pyconfig.h>: make the
# rootfs's /usr/include reachable, but after the cross toolchain's own glibc/libstdc++ headers.
set(CMAKE_CXX_FLAGS_INIT "-idirafter ${QSDPA_AARCH64_ROOT}/usr/include")
set(CMAKE_C_FLAGS_INIT "-idirafter ${QSDPA_AARCH64_ROOT}/usr/include")

# Libraries/headers are looked up only in the rootfs; programs (python, ninja) on the host.
set(CMAKE_FIND_ROOT_PATH "${QSDPA_AARCH64_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)  # pybind11's config package lives in the host site-packages

# FindPython (Development.Module): the target's headers and ABI tag.
set(Python_INCLUDE_DIR "${QSDPA_AARCH64_ROOT}/usr/include/python3.11" CACHE PATH "")
set(Python_SOABI "cpython-311-aarch64-linux-gnu" CACHE STRING "")
# pybind11 (cross mode, no emulator defined): the module suffix, not the host interpreter's.
set(PYTHON_MODULE_EXTENSION ".cpython-311-aarch64-linux-gnu.so" CACHE INTERNAL "")
set(PYTHON_MODULE_DEBUG_POSTFIX "" CACHE INTERNAL "")
set(PYTHON_IS_DEBUG OFF CACHE INTERNAL "")
