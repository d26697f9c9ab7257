// Test-only helpers shared by the SIMDe shims (simde_x86_shim.h, simde_neon_shim.h) and their
// self-tests: lane views of a vector and float bit casts.
#pragma once

#include <cstdint>
#include <cstring>

namespace qsdpa_simde {

// Lane views. memcpy between a vector and an array is the portable, aliasing-safe way to get at
// lanes whatever representation SIMDe picked for the vector types.
template <typename T, int N, typename V>
inline void to_lanes(T (&out)[N], const V& v) {
  static_assert(sizeof(out) == sizeof(V), "lane view size");
  std::memcpy(out, &v, sizeof(V));
}
template <typename V, typename T, int N>
inline V from_lanes(const T (&in)[N]) {
  static_assert(sizeof(in) == sizeof(V), "lane view size");
  V v;
  std::memcpy(&v, in, sizeof(V));
  return v;
}

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace qsdpa_simde
