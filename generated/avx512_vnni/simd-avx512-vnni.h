// Generated from templates/simd_prelude.h.j2 for ISA 'avx512_vnni' by `python -m codegen` — do not edit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
#if defined(QSDPA_X86_VIA_SIMDE)
// Test builds only (tests/emulated/): this same source run on a CPU without the ISA, through
// SIMDe's portable implementations of the intrinsics. Never used by the package build.
#include "simde_x86_shim.h"
#else
#include <immintrin.h>
#endif
#include "qsdpa_types.h"

namespace qsdpa {
namespace avx512_vnni {
namespace {

using vf = __m512;   // 16 x f32
using vi = __m512i;   // int32 dot-product accumulator
using vd = __m512i;   // one prepared int8 dot-product operand
constexpr int NF = 16;        // f32 lanes
constexpr int KB = 64;       // int8 elements of k per dot step
constexpr int A_BIAS = 128;  // dot(A, B) sees A + A_BIAS; the kernel subtracts A_BIAS * sum(B)

inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vf x) { _mm512_storeu_ps(p, x); }
inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf vcvt_s8(const int8_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p)))); }
// The scores of NF keys of one query row, the same operations as the scalar epilogue in
// flash_attention: float(d) * (coef * ksc) with d = dots - kzp * qs in wrapping int32 arithmetic.
inline vf vscores(const int32_t* dots, const int32_t* kzp, int32_t qs, const float* ksc, vf coef) {
  const vi d = _mm512_sub_epi32(_mm512_loadu_si512(reinterpret_cast<const vi*>(dots)),
                                 _mm512_mullo_epi32(_mm512_loadu_si512(reinterpret_cast<const vi*>(kzp)),
                                                     _mm512_set1_epi32(qs)));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(coef, _mm512_loadu_ps(ksc)));
}
// AVX-512: masked loads never touch the lanes they leave out, so tails read nothing out of bounds.
inline __mmask16 lanes16(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline vf vload_n(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes16(n), p); }
inline void vstore_n(float* p, vf x, int n) { _mm512_mask_storeu_ps(p, lanes16(n), x); }
inline vf vcvt_s8_n(const int8_t* p, int n) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(lanes16(n), p)));
}
inline float vhsum(vf x) { return _mm512_reduce_add_ps(x); }
inline float vhmax(vf x) { return _mm512_reduce_max_ps(x); }
inline vf vround(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf vzero_where_less(vf x, vf lo, vf y) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y); }
// p * 2^n for integral n in [-126, 127]: one vscalefps, the same correctly rounded product as
// p * vpow2i(n) (subnormal results included) in one instruction instead of four.
inline vf vscale2n(vf p, vf n) { return _mm512_scalef_ps(p, n); }
inline vi dzero() { return _mm512_setzero_si512(); }
inline int32_t dhsum(vi x) { return _mm512_reduce_add_epi32(x); }
// vpdpbusd: u8 x s8 -> s32 in groups of 4, no saturation. A is fed as a + 128 (xor 0x80).
inline __mmask64 lanes64(int n) { return n >= 64 ? ~__mmask64(0) : ((__mmask64(1) << n) - 1); }
inline vd dload_a(const int8_t* p) { return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(char(0x80))); }
inline vd dload_b(const int8_t* p) { return _mm512_loadu_si512(p); }
// Lanes past n: A becomes 0x80 after the xor but B is 0 there, so they add nothing.
inline vd dload_a_n(const int8_t* p, int n) {
  return _mm512_xor_si512(_mm512_maskz_loadu_epi8(lanes64(n), p), _mm512_set1_epi8(char(0x80)));
}
inline vd dload_b_n(const int8_t* p, int n) { return _mm512_maskz_loadu_epi8(lanes64(n), p); }
inline vi ddot(vi acc, vd a, vd b) { return _mm512_dpbusd_epi32(acc, a, b); }
// Attention Q.K^T (u8 scheme, VNNI): query rows stored as u8 q + 128, K rows as the cache holds them,
// vpdpbusd on 64 of each a step (no widening, half the dot instructions of int16). sum (q + 128) k =
// sum q k + 128 sum k, so qk_tile also sums each key (vpdpbusd with a ones vector) and takes
// (128 + zq) * sum k off each dot: what is left is the s16 scheme's dot(q - zq, k), exactly.
constexpr bool kQkU8 = true;
using qelem = uint8_t;
constexpr int QKB = 64;
using vk = __m512i;
inline vk kload16(const int8_t* p) { return _mm512_loadu_si512(p); }
inline vk kload16_n(const int8_t* p, int n) { return _mm512_maskz_loadu_epi8(lanes64(n), p); }
inline vi qdot16(vi acc, vk k, const uint8_t* q) { return _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(q), k); }
inline vi qdot16_first(vk k, const uint8_t* q) {
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(q), k);
}
inline vi ksum_step(vi acc, vk k) { return _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), k); }
// Eight accumulators -> their eight sums (out[i] = sum of a[i]): fold to 256 bits, then a hadd tree.
inline void dreduce8(const vi* a, int32_t* out) {
  __m256i h[8];
  for (int i = 0; i < 8; ++i) h[i] = _mm256_add_epi32(_mm512_castsi512_si256(a[i]), _mm512_extracti64x4_epi64(a[i], 1));
  const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
  const __m256i y = _mm256_hadd_epi32(_mm256_hadd_epi32(h[4], h[5]), _mm256_hadd_epi32(h[6], h[7]));
  const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), s);
}
// Sixteen accumulators -> their sixteen sums in one vector (lane i = sum of a[i]): a transpose-and-add
// tree that halves the vector count at each level (32-bit, 64-bit, then two 128-bit-lane levels) and
// ends in order, 45 instructions where two dreduce8 take 50 with six 3-uop vphaddd each.
inline vi dreduce16_v(const vi* a) {
  vi b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i)
    c[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(b[2 * i], b[2 * i + 1]), _mm512_unpackhi_epi64(b[2 * i], b[2 * i + 1]));
  for (int i = 0; i < 2; ++i)  // c[i]: lane L holds lane L's partial sums of a[4i .. 4i + 3]
    d[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(c[2 * i], c[2 * i + 1], 0x88),
                            _mm512_shuffle_i32x4(c[2 * i], c[2 * i + 1], 0xDD));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(d[0], d[1], 0x88), _mm512_shuffle_i32x4(d[0], d[1], 0xDD));
}
inline void dreduce16(const vi* a, int32_t* out) { _mm512_storeu_si512(out, dreduce16_v(a)); }
// Lane L's dword j = the sum of v[j]'s four dwords in lane L.
inline vi lane_sums4(const vi* v) {
  const vi u0 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const vi u1 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
}
// Four keys' sums from their accumulators, the same 128-bit lane [sum k0, .., sum k3] four times.
inline vi key_sums4(const vi* ks) {
  const vi c = lane_sums4(ks);
  const vi t = _mm512_add_epi32(c, _mm512_shuffle_i32x4(c, c, 0x4E));
  return _mm512_add_epi32(t, _mm512_shuffle_i32x4(t, t, 0xB1));
}
// The first R of 4 rows' bias (128 + zq), row r's in every dword of lane r (R < 4: the lanes past R
// zero, and bias[R..3] not read).
template <int R = 4>
inline vi lane_bias4(const int32_t* bias) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const vi rows = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m128i b = R == 4 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bias))
                           : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << (4 * R)) - 1u), bias);
  return _mm512_permutexvar_epi32(rows, _mm512_castsi128_si512(b));
}
// A 4 x 4 tile of dots, lane r = row r's four: e - bias * ksum (wrapping int32), stored a row per
// lane for the first R rows.
template <int R = 4>
inline void store_u8_dots_4x4(vi e, vi bias, vi ksum, int32_t* out, size_t ldd) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const vi d = _mm512_sub_epi32(e, _mm512_mullo_epi32(bias, ksum));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_castsi512_si128(d));
  if constexpr (R > 1) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + ldd), _mm512_extracti32x4_epi32(d, 1));
  if constexpr (R > 2) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * ldd), _mm512_extracti32x4_epi32(d, 2));
  if constexpr (R > 3) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * ldd), _mm512_extracti32x4_epi32(d, 3));
}
// The u8 scheme's 4 x 4 tile: out[r * ldd + j] = sum(acc[4r + j]) - bias[r] * sum(ks[j]), in
// wrapping int32 (bias = 128 + zq of row r). The key sums reduce to one 128-bit lane repeated four
// times, which is the lane pattern lane 4r + j needs.
inline void qk_u8_finish_4x4(const vi* acc, const vi* ks, const int32_t* bias, int32_t* out, size_t ldd) {
  store_u8_dots_4x4(dreduce16_v(acc), lane_bias4(bias), key_sums4(ks), out, ldd);
}

// Decode's lane-tiled Q.K^T (u8 scheme, the 4 query rows of one KV head), in one of two forms by
// head dim; both give qk_u8_finish_4x4's dots exactly, and a 4-key tile's 16 dots come out of a
// transpose inside the lanes (lane_sums4: 9 instructions) rather than a 16-vector reduction tree (45).
// - Broadcast (D 64): qt[c] holds bytes [16c, 16c + 16) of every row, row r in 128-bit lane r, so
//   one key's 16 bytes broadcast to the four lanes meet all four rows in one vpdpbusd.
// - Rotated (D 128 and up): no broadcasts. A key's 64-byte pieces are loaded as they are (lane L =
//   bytes [16L, 16L + 16) of the piece) and qt[4h + rot] holds, in lane L, row (L + rot) % 4's bytes
//   of the same place; the four rotations' dots, their lanes turned back by rot and added, leave
//   lane r = row r's partial sums. Paired A/B on the Zen 4 VM (2026-12-04, llama3-8b decode, the
//   bench's 2 MiB pages, 5 ms pause; rotated / broadcast): 2048 keys hot 0.973-0.980, cold
//   0.999-1.008; 8192 keys hot 0.957-1.002, cold 0.972-0.999. The tile alone, from L1: 4.05-4.76
//   against 4.62-5.09 ns per key and KV head (tools/qk_lane_tile_probe.cpp). At D 64, one piece per key,
//   the three lane turns cost more than the four broadcasts save (1.003-1.021).
template <size_t HD>
constexpr bool kRotatedLaneTile = HD >= 128;
// Lane r of the result = lane (r - N) mod 4 of x.
template <int N>
inline vi rotate_lanes(vi x) {
  constexpr int s0 = (4 - N) % 4, s1 = (5 - N) % 4, s2 = (6 - N) % 4, s3 = (7 - N) % 4;
  return _mm512_shuffle_i32x4(x, x, s0 | (s1 << 2) | (s2 << 4) | (s3 << 6));
}
// ROT: the form (a parameter so that tools/qk_lane_tile_probe.cpp can time both at one head dim).
// R: the rows the head has (GQA 3 decode: 3); the missing rows' lanes are zero, their dots unused.
// Always inlined: outlined (as GCC 12 did once there were several row counts), GQA 4 at D 64 lost
// ~1%.
template <size_t HD, bool ROT = kRotatedLaneTile<HD>, int R = 4>
__attribute__((always_inline)) inline void qk_lane_tiles(const uint8_t* q, size_t ldq, vi* qt) {
  static_assert(HD % 64 == 0, "whole 64-byte steps");
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const vi zero = _mm512_setzero_si512();
  for (size_t h = 0; h < HD / 64; ++h) {
    const vi a0 = _mm512_loadu_si512(q + 64 * h);
    const vi a1 = R > 1 ? _mm512_loadu_si512(q + ldq + 64 * h) : zero;
    const vi a2 = R > 2 ? _mm512_loadu_si512(q + 2 * ldq + 64 * h) : zero;
    const vi a3 = R > 3 ? _mm512_loadu_si512(q + 3 * ldq + 64 * h) : zero;
    if constexpr (ROT) {  // lane L from row (L + rot) % 4: three qword blends
      const vi a[4] = {a0, a1, a2, a3};
      for (int rot = 0; rot < 4; ++rot) {
        const vi x = _mm512_mask_blend_epi64(0x0C, a[rot], a[(rot + 1) % 4]);
        const vi y = _mm512_mask_blend_epi64(0x30, x, a[(rot + 2) % 4]);
        qt[4 * h + rot] = _mm512_mask_blend_epi64(0xC0, y, a[(rot + 3) % 4]);
      }
    } else {  // a 4 x 4 transpose of 128-bit blocks
      const vi t0 = _mm512_shuffle_i32x4(a0, a1, 0x44), t1 = _mm512_shuffle_i32x4(a0, a1, 0xEE);
      const vi t2 = _mm512_shuffle_i32x4(a2, a3, 0x44), t3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
      qt[4 * h] = _mm512_shuffle_i32x4(t0, t2, 0x88);
      qt[4 * h + 1] = _mm512_shuffle_i32x4(t0, t2, 0xDD);
      qt[4 * h + 2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
      qt[4 * h + 3] = _mm512_shuffle_i32x4(t1, t3, 0xDD);
    }
  }
}
// Four keys against one head's lane tiles: out[r * ldd + j] = sum (q_r + 128) k_j - bias[r] * sum k_j,
// in wrapping int32: qk_u8_finish_4x4's dots, exactly.
// R: the rows stored (qk_lane_tiles' R). Always inlined, as qk_lane_tiles.
template <size_t HD, bool ROT = kRotatedLaneTile<HD>, int R = 4>
__attribute__((always_inline)) inline void qk_lane_tile_4x4(const vi* qt, vi bias, const int8_t* k, size_t ldk, int32_t* out, size_t ldd) {
  vi acc[4], ks[4];
  if constexpr (ROT) {
    const vi ones = _mm512_set1_epi8(1);
    vi r[4][4];
    for (int j = 0; j < 4; ++j) {
      ks[j] = _mm512_setzero_si512();
      for (int rot = 0; rot < 4; ++rot) r[j][rot] = _mm512_setzero_si512();
    }
    for (size_t h = 0; h < HD / 64; ++h) {  // the four keys' lines of a piece before the next piece's
      vi kv[4];
      for (int j = 0; j < 4; ++j) kv[j] = _mm512_loadu_si512(k + j * ldk + 64 * h);
      for (int j = 0; j < 4; ++j) {
        for (int rot = 0; rot < 4; ++rot) r[j][rot] = _mm512_dpbusd_epi32(r[j][rot], qt[4 * h + rot], kv[j]);
        ks[j] = _mm512_dpbusd_epi32(ks[j], ones, kv[j]);
      }
    }
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm512_add_epi32(_mm512_add_epi32(r[j][0], rotate_lanes<1>(r[j][1])),
                                _mm512_add_epi32(rotate_lanes<2>(r[j][2]), rotate_lanes<3>(r[j][3])));
  } else {
    for (int j = 0; j < 4; ++j) acc[j] = ks[j] = _mm512_setzero_si512();
    for (size_t c = 0; c < HD / 16; ++c)
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm512_dpbusd_epi32(acc[j], qt[c],
                                     _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + j * ldk + 16 * c))));
    for (size_t h = 0; h < HD / 64; ++h)
      for (int j = 0; j < 4; ++j) ks[j] = ksum_step(ks[j], _mm512_loadu_si512(k + j * ldk + 64 * h));
  }
  store_u8_dots_4x4<R>(lane_sums4(acc), bias, key_sums4(ks), out, ldd);  // lane r: row r's dots with keys 0..3
}
// 8 x 8 transposes for flash_attention's per-block qparam gather: 8 keys (rows, ld_in apart) x 8
// adjacent KV heads of a [B, S, H] qparam array -> 8 head rows of 8 keys (ldo apart). The values are
// moved, not computed, so the result is the scalar gather's. AVX2 instructions: the AVX-512
// variants are built with -mavx2 as well.
inline void transpose8_store(const __m256 (&r)[8], float* out, size_t ldo) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // u0-u3: columns c (low half) and c + 4 (high half) of rows 0-3, c = 0..3; u4-u7: of rows 4-7.
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * ldo, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * ldo, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * ldo, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * ldo, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * ldo, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * ldo, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * ldo, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * ldo, _mm256_permute2f128_ps(u3, u7, 0x31));
}
inline void transpose8_f32(const float* in, size_t ld_in, float* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ld_in);
  transpose8_store(r, out, ldo);
}
// int8 -> int32 (kept as their bits through the float shuffles).
inline void transpose8_s8_i32(const int8_t* in, size_t ld_in, int32_t* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i * ld_in))));
  transpose8_store(r, reinterpret_cast<float*>(out), ldo);
}
inline void transpose8_s8_f32(const int8_t* in, size_t ld_in, float* out, size_t ldo) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i * ld_in))));
  transpose8_store(r, out, ldo);
}

// exp(x) for x <= 88, in every variant with the same algorithm: x = n*ln2 + r with |r| <= ln2/2
// (ln2 split in two so n*ln2 is exact), e^r by Cephes' degree-6 polynomial, times 2^n (vscale2n).
// x < -87.3365 (including -inf) gives exactly 0. Max relative error: see
// tests/test_attention.py::test_vexp_accuracy (measured, under 2 ulp).
inline vf vexp(vf x) {
  const vf lo = vset1(-87.33654475f);
  const vf xc = vmin(vmax(x, lo), vset1(88.0f));
  const vf n = vround(vmul(xc, vset1(1.44269504088896341f)));
  vf r = vfma(n, vset1(-0.693359375f), xc);
  r = vfma(n, vset1(2.12194440e-4f), r);
  vf p = vset1(1.9875691500e-4f);
  p = vfma(p, r, vset1(1.3981999507e-3f));
  p = vfma(p, r, vset1(8.3334519073e-3f));
  p = vfma(p, r, vset1(4.1665795894e-2f));
  p = vfma(p, r, vset1(1.6666665459e-1f));
  p = vfma(p, r, vset1(5.0000001201e-1f));
  p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
  return vzero_where_less(x, lo, vscale2n(p, n));
}

// Software prefetch of one row into L2 (every 64-byte line of it): the K/V rows of one head are
// strided in the cache ([B, S, H, D]: H*D bytes apart), which the hardware prefetchers follow badly.
inline void prefetch_row(const int8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// Row sums of int8 rows, exact in int32 for k <= kMaxDotK.
inline int32_t row_sum_s8(const int8_t* p, size_t k) {
  int32_t s = 0;
  for (size_t i = 0; i < k; ++i) s += p[i];
  return s;
}

}  // namespace
}  // namespace avx512_vnni
}  // namespace qsdpa
