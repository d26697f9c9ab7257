// Helpers shared by the AVX-512 memory probes (tools/stream_mlp_probe.cpp,
// tools/prefetch_schedule_probe.cpp): a clock, the bench's busy pause, lane sums.
#pragma once
#include <immintrin.h>

#include <chrono>
#include <cstdint>

namespace probe {

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

}  // namespace probe
