// Helpers shared by the AVX-512 probes in tools/: a clock, the bench's busy pause, lane sums, the
// median time of a step run many times, and (with OpenMP) a timed call on several threads.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace probe_util {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Lane sums through memory: GCC 12's _mm512_reduce_* trips -Wuninitialized.
inline float hsum(__m512 x) {
  alignas(64) float t[16];
  _mm512_store_ps(t, x);
  float s = 0;
  for (float v : t) s += v;
  return s;
}
inline float hsum(__m512i x) {
  alignas(64) int32_t t[16];
  _mm512_store_si512(t, x);
  float s = 0;
  for (int32_t v : t) s += static_cast<float>(v);
  return s;
}

// `s` seconds of FMAs on this core and nothing else, as the bench's pause keeps its cores busy.
inline void busy(double s) {
  __m512 a = _mm512_set1_ps(1.0f);
  const __m512 c = _mm512_set1_ps(0.5f);
  for (const double t = now(); now() - t < s;) a = _mm512_fmadd_ps(a, c, c);
  volatile float sink = hsum(a);
  (void)sink;
}

// Nanoseconds per unit of f() (f does `units` of work), the median of 7 runs of `reps` calls.
template <typename F>
double ns_per(F f, int reps, int units) {
  std::vector<double> t;
  for (int run = 0; run < 7; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      f();
      __asm__ volatile("" ::: "memory");
    }
    t.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / reps / units);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

#ifdef _OPENMP
// One timed call on `threads` threads: each keeps its core busy for `pause` seconds, then, after
// they all have, runs share(thread, threads), which returns a value to keep the work alive (added
// into *sink). Returns the microseconds from that start until every thread is done.
template <typename Share>
double timed_parallel(int threads, double pause, float* sink, Share share) {
  double t0 = 0, t1 = 0;
  float s = 0;
#pragma omp parallel num_threads(threads) reduction(+ : s)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num()), n = static_cast<size_t>(omp_get_num_threads());
    busy(pause);
#pragma omp barrier
#pragma omp master
    t0 = now();
    s += share(t, n);
#pragma omp barrier
#pragma omp master
    t1 = now();
  }
  *sink += s;
  return (t1 - t0) * 1e6;
}
#endif

}  // namespace probe_util
