// Self-test of the NEON emulation layer, built by build.py and run by test_shim.py: every NEON
// intrinsic the generated prelude uses (SIMDe's and simde_neon_shim.h's, called by their ARM names
// exactly as the prelude calls them) against a scalar definition of the A64 instruction, bit for bit.
//
// The A64 semantics are Linux's default FPCR: round to nearest even, no flush-to-zero, DN = 0.
// Floating-point results are compared bit for bit, except that where the scalar definition below
// is the host's own IEEE operation (add, sub, mul, fma, round), a NaN result only has to be a NaN:
// A64 and x86 pick different payloads for a NaN they generate (0x7fc00000 vs 0xffc00000) or when
// both operands are NaN. The kernels never feed NaN to these (their inputs are finite or -inf).
// The A64-defined reductions and FMAX/FMIN, which the shim implements, are compared bit for bit
// including NaN payloads. Integer results are compared exactly, with accumulators that wrap.
//
// Built with QSDPA_NEON_SELFTEST_RAW_SIMDE it checks SIMDe alone (no shim): that is how the shim's
// list was found, and how to re-check it against a newer SIMDe.
#if defined(QSDPA_NEON_SELFTEST_RAW_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/arm/neon.h>
#else
#include "simde_neon_shim.h"
#endif
#include "simde_lanes.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#ifndef QSDPA_SELFTEST_MAX_PRINT
#define QSDPA_SELFTEST_MAX_PRINT 40
#endif
static int failures = 0;
#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (!(cond)) {                                              \
      if (++failures <= QSDPA_SELFTEST_MAX_PRINT) {                                   \
        std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        std::fprintf(stderr, __VA_ARGS__);                      \
        std::fputc('\n', stderr);                               \
      }                                                         \
    }                                                           \
  } while (0)

using qsdpa_simde::to_lanes;
static uint32_t fbits(float x) { return qsdpa_simde::float_bits(x); }
static float ffrom(uint32_t u) { return qsdpa_simde::bits_float(u); }

// ---- Scalar definitions of the A64 instructions (ARM ARM pseudocode, FPCR = 0) ----------------

// FPProcessNaNs(op1, op2) with FPCR.DN = 0: SNaN before QNaN, op1 before op2, result quietened.
static bool process_nans(float op1, float op2, float* out) {
  const uint32_t a = fbits(op1), b = fbits(op2);
  auto nan = [](uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0; };
  auto snan = [&](uint32_t u) { return nan(u) && (u & 0x00400000u) == 0; };
  if (snan(a)) { *out = ffrom(a | 0x00400000u); return true; }
  if (snan(b)) { *out = ffrom(b | 0x00400000u); return true; }
  if (nan(a)) { *out = op1; return true; }
  if (nan(b)) { *out = op2; return true; }
  return false;
}
// FPMax / FPMin: after NaNs, compare the values; a tie between zeros takes +0 (max) / -0 (min),
// i.e. FPZero(sign1 AND sign2) / FPZero(sign1 OR sign2).
static float a64_fmax(float op1, float op2) {
  float r;
  if (process_nans(op1, op2, &r)) return r;
  if (op1 == 0.0f && op2 == 0.0f) return (std::signbit(op1) && std::signbit(op2)) ? -0.0f : 0.0f;
  return op1 > op2 ? op1 : op2;
}
static float a64_fmin(float op1, float op2) {
  float r;
  if (process_nans(op1, op2, &r)) return r;
  if (op1 == 0.0f && op2 == 0.0f) return (std::signbit(op1) || std::signbit(op2)) ? -0.0f : 0.0f;
  return op1 < op2 ? op1 : op2;
}
// FCVTZS (vector, single to int32): round toward zero, saturate, NaN -> 0.
static int32_t a64_fcvtzs(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
  if (x <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(x);  // in range: C++ truncates toward zero
}
// FRINTN: to integral, ties to even, exact; keeps the sign of zero (std::nearbyint under the
// default rounding mode is the IEEE roundToIntegralTiesToEven).
static float a64_frintn(float x) { return std::nearbyint(x); }
static int32_t wrap_add(int32_t a, int64_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(static_cast<uint64_t>(b)));
}

// ---- Inputs ------------------------------------------------------------------------------------
static const uint32_t kSNaN = 0x7fa00001u, kQNaNneg = 0xffc12345u;

static float special_or_random(std::mt19937& rng) {
  static const float specials[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 126.0f, -126.0f, 1e-40f, -1e-40f,
                                   1.17549435e-38f, 3e9f, -3e9f, 2147483520.0f, -2147483648.0f, 2147483648.0f,
                                   8388608.5f, 16777217.0f, -87.33654475f, 88.0f, 3.4e38f, -3.4e38f,
                                   __builtin_inff(), -__builtin_inff(), __builtin_nanf("")};
  const unsigned r = rng() % 8;
  if (r == 0) return specials[rng() % (sizeof(specials) / sizeof(specials[0]))];
  if (r == 1) return ffrom(rng() % 3 == 0 ? kSNaN : kQNaNneg);
  if (r == 2) return ffrom(static_cast<uint32_t>(rng()));  // any bit pattern
  std::uniform_real_distribution<float> u(-200.0f, 200.0f);
  return r == 3 ? std::nearbyint(u(rng)) + 0.5f : u(rng);
}
static int32_t any_i32(std::mt19937& rng) {
  const unsigned r = rng() % 4;
  if (r == 0) return (rng() & 1) ? std::numeric_limits<int32_t>::max() - static_cast<int32_t>(rng() % 4)
                                 : std::numeric_limits<int32_t>::min() + static_cast<int32_t>(rng() % 4);
  if (r == 1) return static_cast<int32_t>(rng() % 512) - 256;
  return static_cast<int32_t>(rng());
}

static bool same(float got, float want) { return fbits(got) == fbits(want); }
// For host-IEEE definitions: bit for bit unless the definition gives a NaN, then any NaN.
static bool same_or_both_nan(float got, float want) { return same(got, want) || (got != got && want != want); }

int main() {
  std::mt19937 rng(20240607);
  const int reps = 20000;

  // ---- float32x4_t ----
  for (int rep = 0; rep < reps; ++rep) {
    float a[4], b[4], c[4], got[4];
    for (int i = 0; i < 4; ++i) { a[i] = special_or_random(rng); b[i] = special_or_random(rng); c[i] = special_or_random(rng); }
    if (rep % 4 == 0) for (int i = 0; i < 4; ++i) if (std::isnan(a[i])) a[i] = -0.0f;  // many NaN-free vectors
    const float32x4_t va = vld1q_f32(a), vb = vld1q_f32(b), vc = vld1q_f32(c);

    float st[4];
    vst1q_f32(st, va);
    CHECK(std::memcmp(st, a, sizeof a) == 0, "vld1q_f32/vst1q_f32 rep %d", rep);
    to_lanes(got, vdupq_n_f32(a[0]));
    for (int i = 0; i < 4; ++i) CHECK(same(got[i], a[0]), "vdupq_n_f32 lane %d", i);

    to_lanes(got, vaddq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(same_or_both_nan(got[i], a[i] + b[i]), "vaddq_f32 %a + %a: got %a", a[i], b[i], got[i]);
    to_lanes(got, vsubq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(same_or_both_nan(got[i], a[i] - b[i]), "vsubq_f32 %a - %a: got %a", a[i], b[i], got[i]);
    to_lanes(got, vmulq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(same_or_both_nan(got[i], a[i] * b[i]), "vmulq_f32 %a * %a: got %a", a[i], b[i], got[i]);
    // FMLA: c + a*b with one rounding. (std::fma is glibc's correctly rounded fmaf.)
    to_lanes(got, vfmaq_f32(vc, va, vb));
    for (int i = 0; i < 4; ++i)
      CHECK(same_or_both_nan(got[i], std::fma(a[i], b[i], c[i])), "vfmaq_f32 %a + %a * %a: got %a", c[i], a[i], b[i], got[i]);
    to_lanes(got, vmaxq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(same(got[i], a64_fmax(a[i], b[i])), "vmaxq_f32(%a, %a): got %a want %a", a[i], b[i], got[i], a64_fmax(a[i], b[i]));
    to_lanes(got, vminq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(same(got[i], a64_fmin(a[i], b[i])), "vminq_f32(%a, %a): got %a want %a", a[i], b[i], got[i], a64_fmin(a[i], b[i]));
    to_lanes(got, vrndnq_f32(va));
    for (int i = 0; i < 4; ++i) CHECK(same_or_both_nan(got[i], a64_frintn(a[i])), "vrndnq_f32(%a): got %a", a[i], got[i]);

    // Reductions.
    const float addv = vaddvq_f32(va);
    const float addv_want = (a[0] + a[1]) + (a[2] + a[3]);  // FADDP 4S, FADDP 2S
    CHECK(same_or_both_nan(addv, addv_want), "vaddvq_f32(%a %a %a %a): got %a want %a", a[0], a[1], a[2], a[3], addv, addv_want);
    const float maxv = vmaxvq_f32(va);
    const float maxv_want = a64_fmax(a64_fmax(a[0], a[1]), a64_fmax(a[2], a[3]));  // FMAXV: Reduce() halves
    CHECK(same(maxv, maxv_want), "vmaxvq_f32(%a %a %a %a): got %a want %a", a[0], a[1], a[2], a[3], maxv, maxv_want);

    // Conversions and bit operations.
    int32_t gi[4];
    to_lanes(gi, vcvtq_s32_f32(va));
    for (int i = 0; i < 4; ++i) CHECK(gi[i] == a64_fcvtzs(a[i]), "vcvtq_s32_f32(%a): got %d want %d", a[i], gi[i], a64_fcvtzs(a[i]));
    int32_t ii[4];
    for (int i = 0; i < 4; ++i) ii[i] = any_i32(rng);
    to_lanes(got, vcvtq_f32_s32(vld1q_s32(ii)));
    for (int i = 0; i < 4; ++i) CHECK(same(got[i], static_cast<float>(ii[i])), "vcvtq_f32_s32(%d): got %a", ii[i], got[i]);
    uint32_t mask[4];
    to_lanes(mask, vcltq_f32(va, vb));
    for (int i = 0; i < 4; ++i) CHECK(mask[i] == (a[i] < b[i] ? 0xffffffffu : 0u), "vcltq_f32(%a, %a): got %x", a[i], b[i], mask[i]);
    to_lanes(got, vbslq_f32(vcltq_f32(va, vb), vc, vdupq_n_f32(0.0f)));
    for (int i = 0; i < 4; ++i) CHECK(same(got[i], a[i] < b[i] ? c[i] : 0.0f), "vbslq_f32 lane %d", i);
    uint32_t sel[4];
    for (auto& s : sel) s = static_cast<uint32_t>(rng());
    to_lanes(got, vbslq_f32(vld1q_u32(sel), va, vb));
    for (int i = 0; i < 4; ++i)
      CHECK(fbits(got[i]) == ((sel[i] & fbits(a[i])) | (~sel[i] & fbits(b[i]))), "vbslq_f32 bits lane %d", i);
    // vpow2i's chain: FCVTZS, ADD, SHL #23, reinterpret.
    to_lanes(got, vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(va), vdupq_n_s32(127)), 23)));
    for (int i = 0; i < 4; ++i) {
      const uint32_t want = static_cast<uint32_t>(wrap_add(a64_fcvtzs(a[i]), 127)) << 23;
      CHECK(fbits(got[i]) == want, "vpow2i chain (%a): got %08x want %08x", a[i], fbits(got[i]), want);
    }
  }

  // ---- integers ----
  auto byte = [&rng]() { return static_cast<int8_t>(rng() % 5 == 0 ? ((rng() & 1) ? 127 : -128) : static_cast<int>(rng() % 256) - 128); };
  auto half = [&rng]() {
    const unsigned r = rng() % 4;
    return static_cast<int16_t>(r == 0 ? ((rng() & 1) ? 32767 : -32768) : r == 1 ? static_cast<int>(rng() % 511) - 255
                                                                                  : static_cast<int>(rng() % 65536) - 32768);
  };
  for (int rep = 0; rep < reps; ++rep) {
    int8_t a[16], b[16];
    int16_t h[8], g[8];
    int32_t acc[4], acc2[4], got[4];
    for (int i = 0; i < 16; ++i) { a[i] = byte(); b[i] = byte(); }
    for (int i = 0; i < 8; ++i) { h[i] = half(); g[i] = half(); }
    for (int i = 0; i < 4; ++i) { acc[i] = any_i32(rng); acc2[i] = any_i32(rng); }
    const int8x16_t va = vld1q_s8(a), vb = vld1q_s8(b);
    const int16x8_t vh = vld1q_s16(h), vg = vld1q_s16(g);
    const int32x4_t vacc = vld1q_s32(acc), vacc2 = vld1q_s32(acc2);

    int8_t a8[16];
    to_lanes(a8, va);
    CHECK(std::memcmp(a8, a, 16) == 0, "vld1q_s8");
    int8_t l8[8];
    to_lanes(l8, vld1_s8(a + 3));
    CHECK(std::memcmp(l8, a + 3, 8) == 0, "vld1_s8");
    to_lanes(l8, vget_low_s8(va));
    CHECK(std::memcmp(l8, a, 8) == 0, "vget_low_s8");
    int16_t w[8];
    to_lanes(w, vld1q_s16(h));
    CHECK(std::memcmp(w, h, sizeof h) == 0, "vld1q_s16");
    to_lanes(w, vmovl_s8(vld1_s8(a + 5)));
    for (int i = 0; i < 8; ++i) CHECK(w[i] == a[5 + i], "vmovl_s8 lane %d", i);
    int16_t w4[4];
    to_lanes(w4, vget_low_s16(vh));
    for (int i = 0; i < 4; ++i) CHECK(w4[i] == h[i], "vget_low_s16 lane %d", i);
    to_lanes(got, vmovl_s16(vget_low_s16(vh)));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == h[i], "vmovl_s16 lane %d", i);
    // vcvt_s8_n's load: 4 bytes through an int32 lane, reinterpreted as 8 x int8 (little-endian).
    int32_t t;
    std::memcpy(&t, a, 4);
    to_lanes(l8, vreinterpret_s8_s32(vdup_n_s32(t)));
    for (int i = 0; i < 8; ++i) CHECK(l8[i] == a[i % 4], "vreinterpret_s8_s32(vdup_n_s32) lane %d", i);
    to_lanes(got, vdupq_n_s32(acc[1]));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == acc[1], "vdupq_n_s32 lane %d", i);
    int32_t st[4];
    vst1q_s32(st, vacc);
    CHECK(std::memcmp(st, acc, sizeof acc) == 0, "vst1q_s32");

    to_lanes(got, vaddq_s32(vacc, vacc2));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == wrap_add(acc[i], acc2[i]), "vaddq_s32 lane %d", i);
    const int32_t sum = vaddvq_s32(vacc);
    int32_t sum_want = 0;
    for (int i = 0; i < 4; ++i) sum_want = wrap_add(sum_want, acc[i]);
    CHECK(sum == sum_want, "vaddvq_s32: got %d want %d", sum, sum_want);
    to_lanes(got, vpaddq_s32(vacc, vacc2));
    const int32_t padd_want[4] = {wrap_add(acc[0], acc[1]), wrap_add(acc[2], acc[3]), wrap_add(acc2[0], acc2[1]),
                                  wrap_add(acc2[2], acc2[3])};
    for (int i = 0; i < 4; ++i) CHECK(got[i] == padd_want[i], "vpaddq_s32 lane %d", i);

    // SDOT: acc[i] + sum_j a[4i+j] * b[4i+j].
    to_lanes(got, vdotq_s32(vacc, va, vb));
    for (int i = 0; i < 4; ++i) {
      int64_t d = 0;
      for (int j = 0; j < 4; ++j) d += a[4 * i + j] * b[4 * i + j];
      CHECK(got[i] == wrap_add(acc[i], d), "vdotq_s32 lane %d: got %d", i, got[i]);
    }
    // SMULL / SMULL2 (int8 -> int16 products, exact), SADALP (pairwise add-accumulate long).
    to_lanes(w, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
    for (int i = 0; i < 8; ++i) CHECK(w[i] == a[i] * b[i], "vmull_s8 lane %d", i);
    to_lanes(w, vmull_high_s8(va, vb));
    for (int i = 0; i < 8; ++i) CHECK(w[i] == a[8 + i] * b[8 + i], "vmull_high_s8 lane %d", i);
    to_lanes(got, vpadalq_s16(vacc, vh));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == wrap_add(acc[i], int64_t(h[2 * i]) + h[2 * i + 1]), "vpadalq_s16 lane %d", i);
    // SMULL / SMLAL / SMLAL2 (int16 -> int32).
    to_lanes(got, vmull_s16(vget_low_s16(vh), vget_low_s16(vg)));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == wrap_add(0, int64_t(h[i]) * g[i]), "vmull_s16 lane %d", i);
    to_lanes(got, vmlal_s16(vacc, vget_low_s16(vh), vget_low_s16(vg)));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == wrap_add(acc[i], int64_t(h[i]) * g[i]), "vmlal_s16 lane %d", i);
    to_lanes(got, vmlal_high_s16(vacc, vh, vg));
    for (int i = 0; i < 4; ++i) CHECK(got[i] == wrap_add(acc[i], int64_t(h[4 + i]) * g[4 + i]), "vmlal_high_s16 lane %d", i);
  }

  if (failures) {
    std::fprintf(stderr, "neon shim self-test: %d failures\n", failures);
    return 1;
  }
  std::printf("neon shim self-test: ok\n");
  return 0;
}
