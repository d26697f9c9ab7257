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

// Rows of float32 to quantize per token, and where their int8 values, scales and zero points go.
// Row (o, i), o < outer, i < inner, is d contiguous floats at x + o*xo + i*xi; its values go to
// q + o*qo + i*qi, its scale to scale[o*so + i*si], its zero point to zp[o*zo + i*zi]. Two levels
// of strides so that a [B, S, H, D] or [B, H, S, D] cache slice is written in place. Strides in
// elements.
struct QuantizeRows {
  size_t outer, inner, d;
  const float* x;
  size_t xo, xi;
  int8_t* q;
  size_t qo, qi;
  float* scale;
  size_t so, si;
  int8_t* zp;
  size_t zo, zi;
};

// Longest k for which sum_k (a - za) * (b - zb) fits in int32: |a - za|, |b - zb| <= 255, and
// 32768 * 255 * 255 < 2^31. The int8 dot-product kernels are exact up to this length.
constexpr size_t kMaxDotK = 32768;

}  // namespace qsdpa
