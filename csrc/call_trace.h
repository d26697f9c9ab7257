// Timestamps of one quantized_sdpa call's phases, for tools/call_timeline.py: where a call's time
// goes between Python and the threads' work (argument checks, the OpenMP team's start, each
// thread's items, the merge). Compiled in only with -DQSDPA_TRACE, in a timing build of its own
// (CMake -DQSDPA_AB_SUFFIX=_trace -DQSDPA_EXTRA_FLAGS=-DQSDPA_TRACE); otherwise every stamp is
// nothing and the module has no _trace functions.
#pragma once

#ifdef QSDPA_TRACE
#include <cstddef>
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace qsdpa {

// Slots: the binding's phases, then one per thread (up to kTraceThreads) for each thread's phases.
enum TraceSlot : size_t {
  kTraceEntry = 0,       // the binding, before its arguments are parsed
  kTraceReady = 1,       // checked, planned, arena leased: the kernel is called next
  kTraceKernelEnd = 2,   // the kernel returned
  kTraceThreadStart = 8,   // + thread: inside the parallel region
  kTraceItemsEnd = 16,     // + thread: its items done, before the barrier
  kTraceThreadEnd = 24,    // + thread: merge done, leaving the region
};
constexpr size_t kTraceThreads = 8;
constexpr size_t kTraceSlots = 32;

// One call's stamps (the last call's: the tool reads them after each call). Zeroed by the binding
// at entry, so a slot no thread reached reads 0.
inline uint64_t g_trace[kTraceSlots];

// A cycle counter every thread reads alike: the TSC (constant rate on the CPUs this is used on),
// the generic timer's virtual count on AArch64.
inline uint64_t trace_clock() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t t;
  __asm__ volatile("mrs %0, cntvct_el0" : "=r"(t));
  return t;
#else
  return 0;
#endif
}

inline void trace_stamp(size_t slot) { g_trace[slot] = trace_clock(); }
inline void trace_stamp_thread(size_t base, int thread) {
  if (thread >= 0 && static_cast<size_t>(thread) < kTraceThreads) g_trace[base + static_cast<size_t>(thread)] = trace_clock();
}

}  // namespace qsdpa

#define QSDPA_TRACE_STAMP(slot) ::qsdpa::trace_stamp(::qsdpa::slot)
#define QSDPA_TRACE_THREAD(base, thread) ::qsdpa::trace_stamp_thread(::qsdpa::base, thread)
#else
#define QSDPA_TRACE_STAMP(slot) ((void)0)
#define QSDPA_TRACE_THREAD(base, thread) ((void)0)
#endif
