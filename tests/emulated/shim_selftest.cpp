// Self-test of the emulation layer, built by build.py and run by test_shim.py: the intrinsics the
// generated AVX-512 prelude uses -- the shim's and SIMDe's -- checked against scalar definitions of
// Intel's semantics and, where there is a 256-bit twin, against the native AVX2 instruction on each
// half, bit for bit (needs a host with AVX2/FMA, as build.py's flags; otherwise the twins are SIMDe's).
//
// Masked loads/stores are also run against a PROT_NONE guard page: a disabled lane that is touched
// faults, so "reads/writes only the enabled lanes" is checked without relying on a sanitizer.
#include "simde_x86_shim.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

static int failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      ++failures;                                         \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                  \
      std::fputc('\n', stderr);                           \
    }                                                     \
  } while (0)

// `bytes` writable bytes that end exactly at a PROT_NONE page.
static unsigned char* guarded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* base = static_cast<unsigned char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (base == MAP_FAILED || mprotect(base + page, page, PROT_NONE) != 0) { std::perror("mmap"); std::exit(2); }
  return base + page - bytes;
}

template <typename T, int N, typename V, typename M, typename F>
static void check_maskz_load(const char* name, F load) {
  // Lanes [0, n) sit just below the guard page; mask = low n bits, as the prelude's lanesN(n).
  for (int n = 0; n <= N; ++n) {
    T* p = reinterpret_cast<T*>(guarded(sizeof(T) * static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i) p[i] = static_cast<T>(i * 7 - 100);
    const M k = n >= static_cast<int>(8 * sizeof(M)) ? static_cast<M>(~M(0)) : static_cast<M>((M(1) << n) - 1);
    T got[N];
    qsdpa_simde::to_lanes(got, load(k, p));
    for (int i = 0; i < N; ++i)
      CHECK(got[i] == (i < n ? static_cast<T>(i * 7 - 100) : T(0)), "%s n=%d lane %d", name, n, i);
  }
  // A sparse mask: only the set lanes are read (each other lane is just below the guard page once).
  T buf[N];
  for (int i = 0; i < N; ++i) buf[i] = static_cast<T>(i + 1);
  const M k = static_cast<M>(0xA5A5A5A5A5A5A5A5ull);
  T got[N];
  qsdpa_simde::to_lanes(got, load(k, buf));
  for (int i = 0; i < N; ++i) CHECK(got[i] == (((k >> i) & 1) ? buf[i] : T(0)), "%s sparse lane %d", name, i);
}

// Floats that exercise the corner cases of the ops the kernels use: NaN, +-0, +-inf, ties at .5
// (rounding), values past int32 (cvtps overflow), denormals, and ordinary values.
static float special_or_random(std::mt19937& rng) {
  static const float specials[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 126.0f, -126.0f, 1e-40f, -1e-40f,
                                   3e9f, -3e9f, 2147483520.0f, __builtin_inff(), -__builtin_inff(),
                                   __builtin_nanf("")};
  const unsigned r = rng() % 4;
  if (r == 0) return specials[rng() % (sizeof(specials) / sizeof(specials[0]))];
  std::uniform_real_distribution<float> u(-200.0f, 200.0f);
  return r == 1 ? std::nearbyint(u(rng)) + 0.5f : u(rng);
}

static bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A 512-bit float op from SIMDe (or the shim) against the native AVX2 op on each 256-bit half:
// this checks SIMDe's emulation, and the aliasing of the Intel name, bit for bit.
template <typename F512, typename F256>
static void check_ps_vs_avx2(const char* name, std::mt19937& rng, F512 f512, F256 f256) {
  for (int rep = 0; rep < 500; ++rep) {
    float a[16], b[16], c[16], got[16], ref[16];
    for (int i = 0; i < 16; ++i) { a[i] = special_or_random(rng); b[i] = special_or_random(rng); c[i] = special_or_random(rng); }
    qsdpa_simde::to_lanes(got, f512(_mm512_loadu_ps(a), _mm512_loadu_ps(b), _mm512_loadu_ps(c)));
    for (int h = 0; h < 2; ++h)
      _mm256_storeu_ps(ref + 8 * h, f256(_mm256_loadu_ps(a + 8 * h), _mm256_loadu_ps(b + 8 * h), _mm256_loadu_ps(c + 8 * h)));
    for (int i = 0; i < 16; ++i)
      CHECK(same_bits(got[i], ref[i]) || (got[i] != got[i] && ref[i] != ref[i]), "%s lane %d: a=%g b=%g c=%g got %g want %g",
            name, i, a[i], b[i], c[i], got[i], ref[i]);
  }
}

int main() {
  std::mt19937 rng(12345);
  auto byte = [&] { return static_cast<int8_t>(rng() & 0xff); };

  check_maskz_load<int8_t, 16, __m128i, __mmask16>("_mm_maskz_loadu_epi8", [](__mmask16 k, const void* p) { return _mm_maskz_loadu_epi8(k, p); });
  check_maskz_load<int8_t, 32, __m256i, __mmask32>("_mm256_maskz_loadu_epi8", [](__mmask32 k, const void* p) { return _mm256_maskz_loadu_epi8(k, p); });
  check_maskz_load<int8_t, 64, __m512i, __mmask64>("_mm512_maskz_loadu_epi8", [](__mmask64 k, const void* p) { return _mm512_maskz_loadu_epi8(k, p); });
  check_maskz_load<float, 16, __m512, __mmask16>("_mm512_maskz_loadu_ps", [](__mmask16 k, const void* p) { return _mm512_maskz_loadu_ps(k, p); });

  // _mm512_mask_storeu_ps: enabled lanes written, the others untouched, nothing past n accessed.
  float src[16];
  for (int i = 0; i < 16; ++i) src[i] = 0.5f + static_cast<float>(i);
  const __m512 v = _mm512_loadu_ps(src);
  for (int n = 0; n <= 16; ++n) {
    float* p = reinterpret_cast<float*>(guarded(sizeof(float) * static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i) p[i] = -1.0f;
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
    for (int i = 0; i < n; ++i) CHECK(p[i] == src[i], "_mm512_mask_storeu_ps n=%d lane %d", n, i);
  }
  float dst[16];
  for (int i = 0; i < 16; ++i) dst[i] = -1.0f;
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>(0x5A5A), v);
  for (int i = 0; i < 16; ++i) CHECK(dst[i] == (((0x5A5A >> i) & 1) ? src[i] : -1.0f), "mask_storeu_ps sparse lane %d", i);

  for (int rep = 0; rep < 1000; ++rep) {
    // _mm512_cvtepi8_epi32 and _mm512_cvtepi32_ps against the AVX2 instructions on 8 lanes at a time.
    int8_t b16[16];
    for (auto& x : b16) x = byte();
    if (rep == 0) { b16[0] = -128; b16[1] = 127; }
    int32_t w[16];
    qsdpa_simde::to_lanes(w, _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b16))));
    for (int h = 0; h < 2; ++h) {
      int32_t ref[8];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ref), _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b16 + 8 * h))));
      for (int i = 0; i < 8; ++i) CHECK(w[8 * h + i] == ref[i], "cvtepi8_epi32 lane %d", 8 * h + i);
    }
    int32_t big[16];
    for (auto& x : big) x = static_cast<int32_t>(rng());  // full range: exercises rounding above 2^24
    float f[16];
    qsdpa_simde::to_lanes(f, _mm512_cvtepi32_ps(_mm512_loadu_si512(big)));
    for (int h = 0; h < 2; ++h) {
      float ref[8];
      _mm256_storeu_ps(ref, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(big + 8 * h))));
      for (int i = 0; i < 8; ++i) CHECK(f[8 * h + i] == ref[i], "cvtepi32_ps lane %d", 8 * h + i);
    }

    // _mm512_reduce_add_epi32: sum modulo 2^32.
    uint32_t s = 0;
    for (auto x : big) s += static_cast<uint32_t>(x);
    CHECK(_mm512_reduce_add_epi32(_mm512_loadu_si512(big)) == static_cast<int32_t>(s), "reduce_add_epi32");

    // _mm512_reduce_add_ps: GCC's pairwise order, written out independently.
    float xs[16];
    std::uniform_real_distribution<float> uf(-1e3f, 1e3f);
    for (auto& x : xs) x = uf(rng) * (rng() % 2 ? 1e-6f : 1.0f);
    float t[16];
    for (int i = 0; i < 16; ++i) t[i] = xs[i];
    for (int width = 8; width >= 1; width /= 2)
      for (int i = 0; i < width; ++i) t[i] = t[i + width] + t[i];
    // width 2 above pairs {0,2},{1,3} then width 1 pairs {0,1}: the same tree as GCC's shuffles.
    CHECK(_mm512_reduce_add_ps(_mm512_loadu_ps(xs)) == t[0], "reduce_add_ps order");

    // SIMDe's _mm512_dpbusd_epi32 (vpdpbusd): u8 x s8 in groups of 4, added to src, no saturation.
    uint8_t ua[64];
    int8_t sb[64];
    int32_t acc[16], got[16];
    for (auto& x : ua) x = static_cast<uint8_t>(byte());
    for (auto& x : sb) x = byte();
    for (auto& x : acc) x = static_cast<int32_t>(rng() % 2000001) - 1000000;
    if (rep == 0) for (int i = 0; i < 64; ++i) { ua[i] = 255; sb[i] = -128; }
    qsdpa_simde::to_lanes(got, _mm512_dpbusd_epi32(_mm512_loadu_si512(acc), _mm512_loadu_si512(ua), _mm512_loadu_si512(sb)));
    for (int i = 0; i < 16; ++i) {
      int32_t r = acc[i];
      for (int j = 0; j < 4; ++j) r += int32_t(ua[4 * i + j]) * int32_t(sb[4 * i + j]);
      CHECK(got[i] == r, "dpbusd lane %d", i);
    }

    // _mm512_madd_epi16 (vpmaddwd) through the shim's corrected alias, against AVX2 vpmaddwd.
    int16_t ha[32], hb[32];
    for (auto& x : ha) x = static_cast<int16_t>(rng());
    for (auto& x : hb) x = static_cast<int16_t>(rng());
    int32_t m[16];
    qsdpa_simde::to_lanes(m, _mm512_madd_epi16(_mm512_loadu_si512(ha), _mm512_loadu_si512(hb)));
    for (int h = 0; h < 2; ++h) {
      int32_t ref[8];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ref),
                          _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ha + 16 * h)),
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hb + 16 * h))));
      for (int i = 0; i < 8; ++i) CHECK(m[8 * h + i] == ref[i], "madd_epi16 lane %d", 8 * h + i);
    }
  }

  // The SIMDe intrinsics the prelude uses that have an AVX2 twin, against that twin.
  check_ps_vs_avx2("_mm512_add_ps", rng, [](__m512 a, __m512 b, __m512) { return _mm512_add_ps(a, b); },
                   [](__m256 a, __m256 b, __m256) { return _mm256_add_ps(a, b); });
  check_ps_vs_avx2("_mm512_sub_ps", rng, [](__m512 a, __m512 b, __m512) { return _mm512_sub_ps(a, b); },
                   [](__m256 a, __m256 b, __m256) { return _mm256_sub_ps(a, b); });
  check_ps_vs_avx2("_mm512_mul_ps", rng, [](__m512 a, __m512 b, __m512) { return _mm512_mul_ps(a, b); },
                   [](__m256 a, __m256 b, __m256) { return _mm256_mul_ps(a, b); });
#if defined(__FMA__)  // without host FMA, SIMDe's fmadd is a*b+c, rounded twice (noted in the README)
  check_ps_vs_avx2("_mm512_fmadd_ps", rng, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); },
                   [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); });
#endif
  // max/min: which operand is returned for NaN and +-0 is part of the semantics.
  check_ps_vs_avx2("_mm512_max_ps", rng, [](__m512 a, __m512 b, __m512) { return _mm512_max_ps(a, b); },
                   [](__m256 a, __m256 b, __m256) { return _mm256_max_ps(a, b); });
  check_ps_vs_avx2("_mm512_min_ps", rng, [](__m512 a, __m512 b, __m512) { return _mm512_min_ps(a, b); },
                   [](__m256 a, __m256 b, __m256) { return _mm256_min_ps(a, b); });
  check_ps_vs_avx2("_mm512_roundscale_ps(NEAREST)", rng,
                   [](__m512 a, __m512, __m512) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); },
                   [](__m256 a, __m256, __m256) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); });
  // vpow2i's chain: cvtps_epi32 (ties to even; NaN/overflow -> INT_MIN), +127, << 23, cast.
  check_ps_vs_avx2("_mm512_cvtps_epi32/slli/add/castsi512_ps", rng,
                   [](__m512 a, __m512, __m512) {
                     return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(a), _mm512_set1_epi32(127)), 23));
                   },
                   [](__m256 a, __m256, __m256) {
                     return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(a), _mm256_set1_epi32(127)), 23));
                   });
  // vzero_where_less: maskz_mov(cmp_mask(x, lo, NLT_UQ), y) == andnot(cmp(x, lo, LT_OQ), y), NaNs included.
  check_ps_vs_avx2("_mm512_maskz_mov_ps/_mm512_cmp_ps_mask(NLT_UQ)", rng,
                   [](__m512 x, __m512 lo, __m512 y) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y); },
                   [](__m256 x, __m256 lo, __m256 y) { return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y); });

  // Horizontal reductions against GCC's AVX-512 sequences, replayed with the same 256/128-bit
  // instructions natively (after the first extract, GCC's code for them is exactly this).
  for (int rep = 0; rep < 2000; ++rep) {
    float x[16];
    for (auto& v : x) v = special_or_random(rng);
    if (rep % 3 == 0) for (auto& v : x) if (v != v) v = 1.0f;  // also plenty of NaN-free vectors
    const __m256 lo = _mm256_loadu_ps(x), hi = _mm256_loadu_ps(x + 8);
    {
      __m256 t3 = _mm256_add_ps(hi, lo);
      __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
      __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
      const float want = _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
      const float got = _mm512_reduce_add_ps(_mm512_loadu_ps(x));
      CHECK(same_bits(got, want) || (got != got && want != want), "reduce_add_ps rep %d: got %g want %g", rep, got, want);
    }
    {
      __m256 t3 = _mm256_max_ps(hi, lo);
      __m128 t6 = _mm_max_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
      __m128 t8 = _mm_max_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
      __m128 t10 = _mm_max_ps(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));
      const float want = _mm_cvtss_f32(t10);
      const float got = _mm512_reduce_max_ps(_mm512_loadu_ps(x));
      CHECK(same_bits(got, want) || (got != got && want != want), "reduce_max_ps rep %d: got %g want %g", rep, got, want);
    }
  }

  // The int8 operand helpers: xor with set1_epi8(0x80) (the VNNI bias) and cvtepi8_epi16 (madd_s16).
  for (int rep = 0; rep < 200; ++rep) {
    int8_t b[64];
    for (auto& v : b) v = byte();
    uint8_t x[64];
    qsdpa_simde::to_lanes(x, _mm512_xor_si512(_mm512_loadu_si512(b), _mm512_set1_epi8(char(0x80))));
    for (int i = 0; i < 64; ++i) CHECK(x[i] == static_cast<uint8_t>(b[i] + 128), "xor 0x80 lane %d", i);
    int16_t w[32];
    qsdpa_simde::to_lanes(w, _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))));
    for (int i = 0; i < 32; ++i) CHECK(w[i] == b[i], "cvtepi8_epi16 lane %d", i);
  }

  if (failures) {
    std::fprintf(stderr, "shim self-test: %d failures\n", failures);
    return 1;
  }
  std::printf("shim self-test: ok\n");
  return 0;
}
