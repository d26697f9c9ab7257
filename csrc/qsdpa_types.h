// Plain types shared by every variant's kernels and bindings. No ISA-specific code here: this header
// is compiled into modules built with different -m flags, so everything in it is header-only data.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qsdpa {

// A per-row asymmetric int8 matrix: row r holds (data[r*ld + c] - zero_point[r]) * scale[r].
// Strides are in elements. rowsum (optional) caches sum_c data[r*ld + c] for the dot-product kernels.
struct QMatrix {
  const int8_t* data;
  size_t ld;
  const float* scale;
  size_t scale_stride;
  const int8_t* zero_point;
  size_t zero_point_stride;
  const int32_t* rowsum;  // nullptr: the kernel computes row sums itself
};

// Longest k for which sum_k (a - za) * (b - zb) fits in int32: |a - za|, |b - zb| <= 255, and
// 32768 * 255 * 255 < 2^31. The int8 dot-product kernels are exact up to this length.
constexpr size_t kMaxDotK = 32768;

}  // namespace qsdpa
