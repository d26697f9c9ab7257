// Native CPU/OS feature check; see cpu_features.h for why it lives in the scalar module.
//
// This file must stay free of ISA flags and ISA intrinsics: it runs before dispatch has decided
// anything. Every feature is reported only when both the CPU (CPUID / HWCAP) and the OS (XCR0 /
// the kernel, which sets HWCAP bits only for what it enables) allow it: py-cpuinfo reads raw CPUID
// bits and a host's /proc/cpuinfo, and can claim AVX-512 that the OS or hypervisor has not enabled.
#include "cpu_features.h"

#include <cstdint>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define QSDPA_CPU_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define QSDPA_CPU_ARM_LINUX 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace qsdpa {
namespace {

#if defined(QSDPA_CPU_X86)

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
  bool ok = false;  // false when the leaf is above the CPU's maximum
};

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  r.ok = __get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d) != 0;
  return r;
}

bool bit(unsigned reg, int n) { return ((reg >> n) & 1u) != 0; }

// XGETBV(0) = XCR0, the register-state components the OS saves on context switch. Inline asm rather
// than _xgetbv(): the intrinsic needs -mxsave, and this file is built with no ISA flags. Only valid
// when CPUID.1:ECX.OSXSAVE is set (otherwise the instruction raises #UD), which the caller checks.
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

struct X86State {
  unsigned max_leaf = 0;
  std::string vendor;
  Regs leaf1, leaf7;
  bool osxsave = false;
  uint64_t xcr0 = 0;
  bool ymm_os = false;  // XCR0 bits 1-2: SSE and AVX (YMM upper) state
  bool zmm_os = false;  // XCR0 bits 1-2 and 5-7: + opmask, ZMM0-15 upper halves, ZMM16-31
};

X86State read_x86() {
  X86State s;
  Regs r0 = cpuid(0, 0);
  if (!r0.ok) return s;
  s.max_leaf = r0.a;
  char vendor[13] = {};
  for (int i = 0; i < 4; ++i) {  // the vendor string is EBX, EDX, ECX in that order
    vendor[i] = static_cast<char>(r0.b >> (8 * i));
    vendor[4 + i] = static_cast<char>(r0.d >> (8 * i));
    vendor[8 + i] = static_cast<char>(r0.c >> (8 * i));
  }
  s.vendor = vendor;
  if (s.max_leaf >= 1) s.leaf1 = cpuid(1, 0);
  if (s.max_leaf >= 7) s.leaf7 = cpuid(7, 0);
  s.osxsave = s.leaf1.ok && bit(s.leaf1.c, 27);
  if (s.osxsave) {
    s.xcr0 = xgetbv0();
    s.ymm_os = (s.xcr0 & 0x6) == 0x6;
    s.zmm_os = (s.xcr0 & 0xe6) == 0xe6;
  }
  return s;
}

std::string brand_string() {
  Regs ext = cpuid(0x80000000u, 0);
  if (!ext.ok || ext.a < 0x80000004u) return "";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    Regs r = cpuid(0x80000002u + i, 0);
    const unsigned regs[4] = {r.a, r.b, r.c, r.d};
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) brand[16 * i + 4 * j + k] = static_cast<char>(regs[j] >> (8 * k));
  }
  std::string s(brand);
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

#endif  // QSDPA_CPU_X86

#if defined(QSDPA_CPU_ARM_LINUX)
// <asm/hwcap.h> values; defined here because older libc headers lack HWCAP_ASIMDDP.
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapAsimddp = 1ul << 20;
#endif

// Canonical names match codegen/registry.py (X86_FEATURES, ARM_FEATURES); insertion order is kept
// so show_runtime prints them in a stable order.
py::dict cpu_features() {
  py::dict d;
#if defined(QSDPA_CPU_X86)
  const X86State s = read_x86();
  const unsigned c1 = s.leaf1.c, b7 = s.leaf7.b, c7 = s.leaf7.c;
  // VEX-encoded instructions (AVX, AVX2, FMA, F16C) need the OS to save YMM state.
  const bool ymm = s.ymm_os, zmm = s.zmm_os;
  d["avx"] = ymm && bit(c1, 28);
  d["avx2"] = ymm && bit(b7, 5);
  d["fma"] = ymm && bit(c1, 12);
  d["f16c"] = ymm && bit(c1, 29);
  d["avx512f"] = zmm && bit(b7, 16);
  d["avx512bw"] = zmm && bit(b7, 30);
  d["avx512dq"] = zmm && bit(b7, 17);
  d["avx512vl"] = zmm && bit(b7, 31);
  d["avx512_vnni"] = zmm && bit(c7, 11);
#elif defined(QSDPA_CPU_ARM_LINUX)
  // The kernel sets a HWCAP bit only for features it enables for user space.
  const unsigned long hw = getauxval(AT_HWCAP);
  d["asimd"] = (hw & kHwcapAsimd) != 0;
  d["asimddp"] = (hw & kHwcapAsimddp) != 0;
#endif
  // Other platforms: an empty dict, so only the scalar variant is considered supported.
  return d;
}

py::dict cpu_raw() {
  py::dict d;
#if defined(QSDPA_CPU_X86)
  const X86State s = read_x86();
  d["source"] = "cpuid+xgetbv";
  d["max_leaf"] = s.max_leaf;
  d["vendor"] = s.vendor;
  d["brand"] = brand_string();
  d["osxsave"] = s.osxsave;
  d["xcr0"] = s.osxsave ? py::object(py::int_(s.xcr0)) : py::object(py::none());
  d["ymm_state"] = s.ymm_os;
  d["zmm_state"] = s.zmm_os;
  d["leaf1_ecx"] = s.leaf1.c;
  d["leaf7_ebx"] = s.leaf7.b;
  d["leaf7_ecx"] = s.leaf7.c;
#elif defined(QSDPA_CPU_ARM_LINUX)
  d["source"] = "getauxval";
  d["hwcap"] = getauxval(AT_HWCAP);
#ifdef AT_HWCAP2
  d["hwcap2"] = getauxval(AT_HWCAP2);
#else
  d["hwcap2"] = py::none();
#endif
#else
  d["source"] = "none";
#endif
  return d;
}

int omp_max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

void register_cpu_features(py::module_& m) {
  m.def("cpu_features", &cpu_features,
        "Authoritative native check: {canonical feature name: bool}, True only when the CPU has the "
        "feature and the OS enables its register state (x86: CPUID + XGETBV; aarch64 Linux: AT_HWCAP).");
  m.def("cpu_raw", &cpu_raw, "Raw diagnostics behind cpu_features() (x86: CPUID leaves, XCR0; aarch64: HWCAP).");
  m.def("omp_max_threads", &omp_max_threads,
        "omp_get_max_threads() when the module was built with OpenMP, else 1.");
#ifdef _OPENMP
  m.attr("OPENMP") = _OPENMP;
#else
  m.attr("OPENMP") = 0;
#endif
}

}  // namespace qsdpa
