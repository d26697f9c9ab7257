// Would integer dots pay for decode's P.V? One 64-key block of one KV head (4 query rows, D 128,
// int8 V rows contiguous), hot in L1, computed five ways:
//   fma   the avx512 kernels' scheme: each V row widened to fp32 (vpmovsxbd, vcvtdq2ps) and 4 rows
//         of fp32 weights FMAed into it; 32 FMAs per key
//   u8x3  each row's weights as 24-bit integers relative to the row's largest (error under 2^-25
//         of it: far below fp32 P.V's own rounding over thousands of keys), split into 3 byte
//         planes; V transposed per 4 keys so that a 32-bit lane holds 4 keys of one column; 3
//         vpdpbusd (u8 weight piece x s8 V, 4 keys a lane) per 4 keys, row and 16 columns: 24 per
//         key instead of 32 FMAs. Complete: the weights' split, the transpose, the dots and the
//         int32 -> fp32 epilogue; "dots" is the vpdpbusd loop alone (a lower bound)
//   u8x2  the same with 16-bit weights (16 vpdpbusd per key): a bound only, its error (2^-17 of
//         the row's largest weight per key, 1.8e-5 of the largest output in this peaked block,
//         growing with the keys) is beyond the fp32 result the kernels keep to
//   magic the fma scheme with V converted without vcvtdq2ps: zero-extended bytes xor 0x4B000080
//         are the floats 2^23 + 128 + v, one subtraction leaves v exactly (the same bits as fma)
//   f32v  the fma scheme on V stored as fp32 (a load, no widening or conversion): the bound of any
//         fp32 P.V on this block, not a scheme (V is int8)
// The integer dots are checked exactly against a scalar reference, the magic and f32v results bit
// for bit against fma's, and fma, u8x3 and u8x2 against a float64 one (error over the largest
// output, printed first).
//
//   g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni tools/pv_dot_probe.cpp -o /tmp/pv_dot
//   /tmp/pv_dot [blocks=200000]
//
// vpdpbusd goes through inline asm: with the intrinsic, GCC 12 copied and spilled the 24
// accumulators (the instruction overwrites its accumulator; ~40 stack moves in the loop), which
// made the dots alone twice as slow as fma.
//
// On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), where 512-bit vpdpbusd and FMA both run
// about one a cycle (3.2 and 3.4 G/s in a register-only loop), ns per key, three runs: fma
// 10.3-10.6; u8x3 10.9-11.1 complete (dots alone 7.9-8.0, the transpose 1.4-1.6; errors: fma
// 2.8e-7, u8x3 1.7e-7); u8x2 7.8-8.4 (error 1.8e-5). So with fp32 accuracy kept, integer dots
// are 5% slower than the FMAs for P.V on that core, and the kernels keep one P.V scheme. Three
// runs later that day (100000 blocks): fma 9.80-10.14, u8x3 9.87-10.04 (a tie), magic 10.84-10.95,
// f32v 8.96-9.25: widening and converting V costs the FMA loop 0.7-0.9 ns a key (~8%); doing it with
// integer operations and a subtraction instead costs more.
// On the Intel Xeon VM of 2026-12-07 (KVM family 6 model 167: 512-bit vpdpbusd and FMA both two a
// cycle, on the same two pipes: tools/dot_pipe_probe.cpp), three runs of 100000 blocks: fma
// 6.81-7.04, u8x3 6.08-6.31 complete (dots alone 3.82-3.99, the transpose 0.99-1.00), u8x2
// 4.53-4.66, magic 7.85-8.06, f32v 4.96-5.18. There u8x3 is 10% faster than fma; P.V being ~55%
// of a hot llama3-8b decode call (perf), that would be ~5% of the call, before the block's setup.
// In the kernel it was not: a build (not kept) running u8x3 for decode's 4-row heads on full
// 64-key blocks (V rows ldv apart transposed into a stack buffer, the columns put back by a 4 x 4
// transpose of 128-bit lanes; outputs within 2.6e-7 of max |out| of the FMA tiles'), paired B/A
// with tools/ab_decode.py: hot 1.060 (2048 keys, 1 thread), 1.094 (8192, 1), 1.021 (2048, 2,
// after the pause); cold 1.057 (2048, 1) and 1.053 (2048, 2).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kRows = 4, kDim = 128, kBlock = 64, kGroups = kBlock / 4;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// acc += u8(a) . s8(b) per 32-bit lane, in a register the compiler keeps (see the header).
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

alignas(64) int8_t g_v[kBlock][kDim];
alignas(64) float g_w[kRows][kBlock];
alignas(64) float g_out_fma[kRows][kDim];
alignas(64) float g_out_u8[kRows][kDim];
alignas(64) float g_acc_u8[kRows][kDim];  // g_out_u8 in the lanes' column order
alignas(64) int8_t g_vt[kGroups][kDim / 16][64];    // [group][16-column vector][lane: 4 keys]
alignas(64) uint32_t g_wp[3][kRows][kGroups];       // byte planes, 4 keys a dword
alignas(64) int32_t g_dots[3][kRows][kDim];         // per plane, column order of g_vt's lanes
float g_wscale[kRows];

alignas(64) float g_vf[kBlock][kDim];  // g_v as fp32: the f32v bound's V
alignas(64) float g_out_var[kRows][kDim];

// 16 V values of a row as fp32, three ways (kWiden: the kernels'; kMagic: zero-extended bytes with
// 0x4B000080 xored in are the floats 2^23 + 128 + v, and one subtraction leaves v exactly, so no
// int -> float conversion; kFloat: V stored as fp32, only a load: the FMA loop's bound).
enum Widen { kWiden, kMagic, kFloat };
template <Widen W>
inline __m512 v16(int k, int c) {
  if (W == kFloat) return _mm512_load_ps(&g_vf[k][c]);
  const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(&g_v[k][c]));
  if (W == kWiden) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  const __m512i u = _mm512_xor_si512(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(0x4B000080));
  return _mm512_sub_ps(_mm512_castsi512_ps(u), _mm512_set1_ps(8388736.0f));
}

template <Widen W>
__attribute__((noinline)) void pv_fma_with(float (*out)[kDim]) {
  for (int c0 = 0; c0 < kDim; c0 += 64) {
    __m512 t[kRows][4];
    for (auto& r : t)
      for (auto& x : r) x = _mm512_setzero_ps();
    for (int k = 0; k < kBlock; ++k) {
      __m512 v[4];
      for (int i = 0; i < 4; ++i) v[i] = v16<W>(k, c0 + 16 * i);
      for (int r = 0; r < kRows; ++r) {
        const __m512 w = _mm512_set1_ps(g_w[r][k]);
        for (int i = 0; i < 4; ++i) t[r][i] = _mm512_fmadd_ps(w, v[i], t[r][i]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int i = 0; i < 4; ++i) _mm512_store_ps(&out[r][c0 + 16 * i], t[r][i]);
  }
}

void pv_fma() { pv_fma_with<kWiden>(g_out_fma); }

// Weights -> `pieces` byte planes of round(w / max * (2^(8 pieces) - 1)), 4 keys a dword.
__attribute__((noinline)) void split_weights(int pieces) {
  const float full = pieces == 3 ? 16777215.0f : 65535.0f;
  for (int r = 0; r < kRows; ++r) {
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < kBlock; k += 16) m = _mm512_max_ps(m, _mm512_load_ps(&g_w[r][k]));
    const float mx = _mm512_reduce_max_ps(m);
    const __m512 s = _mm512_set1_ps(mx > 0 ? full / mx : 0.0f);
    g_wscale[r] = mx / full;
    for (int k = 0; k < kBlock; k += 16) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(&g_w[r][k]), s));
      for (int p = 0; p < pieces; ++p)
        _mm_store_si128(reinterpret_cast<__m128i*>(&g_wp[p][r][k / 4]), _mm512_cvtepi32_epi8(_mm512_srli_epi32(q, 8 * p)));
    }
  }
}

// V per 4 keys: 4 rows of 128 bytes -> 8 vectors whose 32-bit lanes hold one column's 4 keys.
// The unpacks leave the columns in a fixed order (column_of below), undone in the epilogue.
__attribute__((noinline)) void transpose_v() {
  for (int g = 0; g < kGroups; ++g)
    for (int h = 0; h < 2; ++h) {
      const __m512i r0 = _mm512_load_si512(&g_v[4 * g][64 * h]), r1 = _mm512_load_si512(&g_v[4 * g + 1][64 * h]);
      const __m512i r2 = _mm512_load_si512(&g_v[4 * g + 2][64 * h]), r3 = _mm512_load_si512(&g_v[4 * g + 3][64 * h]);
      const __m512i a = _mm512_unpacklo_epi8(r0, r1), b = _mm512_unpackhi_epi8(r0, r1);
      const __m512i c = _mm512_unpacklo_epi8(r2, r3), d = _mm512_unpackhi_epi8(r2, r3);
      _mm512_store_si512(g_vt[g][4 * h], _mm512_unpacklo_epi16(a, c));
      _mm512_store_si512(g_vt[g][4 * h + 1], _mm512_unpackhi_epi16(a, c));
      _mm512_store_si512(g_vt[g][4 * h + 2], _mm512_unpacklo_epi16(b, d));
      _mm512_store_si512(g_vt[g][4 * h + 3], _mm512_unpackhi_epi16(b, d));
    }
}

// The column of lane l of transposed vector j (the unpacks work within 128-bit lanes).
int column_of(int j, int l) {
  const int h = j / 4, kind = j % 4, lane128 = l / 4, e = l % 4;
  const int byte_lo = (kind >= 2 ? 8 : 0);   // unpackhi_epi8 takes bytes 8..15 of each 128-bit lane
  const int word_lo = (kind % 2) ? 4 : 0;    // unpackhi_epi16 takes words 4..7
  return 64 * h + 16 * lane128 + byte_lo + word_lo + e;
}

// Dots of `pieces` planes: 4 rows x 2 vectors x pieces accumulators per column tile.
template <int Pieces>
__attribute__((noinline)) void dots_u8() {
  for (int c0 = 0; c0 < kDim / 16; c0 += 2) {
    __m512i t[Pieces][kRows][2];
    for (auto& p : t)
      for (auto& r : p) r[0] = r[1] = _mm512_setzero_si512();
    for (int g = 0; g < kGroups; ++g) {
      const __m512i b0 = _mm512_load_si512(g_vt[g][c0]), b1 = _mm512_load_si512(g_vt[g][c0 + 1]);
      for (int p = 0; p < Pieces; ++p)
        for (int r = 0; r < kRows; ++r) {
          const __m512i w = _mm512_set1_epi32(static_cast<int>(g_wp[p][r][g]));
          t[p][r][0] = dpbusd(t[p][r][0], w, b0);
          t[p][r][1] = dpbusd(t[p][r][1], w, b1);
        }
    }
    for (int p = 0; p < Pieces; ++p)
      for (int r = 0; r < kRows; ++r) {
        _mm512_store_si512(&g_dots[p][r][16 * c0], t[p][r][0]);
        _mm512_store_si512(&g_dots[p][r][16 * c0 + 16], t[p][r][1]);
      }
  }
}

// The block's fp32 result per row, still in the lanes' column order: a kernel would accumulate
// blocks in that order and put the columns back once per call (unpermute below, not timed).
template <int Pieces>
__attribute__((noinline)) void epilogue() {
  for (int r = 0; r < kRows; ++r) {
    const __m512 ws = _mm512_set1_ps(g_wscale[r]);
    for (int j = 0; j < kDim / 16; ++j) {
      __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(&g_dots[Pieces - 1][r][16 * j]));
      for (int p = Pieces - 2; p >= 0; --p)
        f = _mm512_fmadd_ps(f, _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(_mm512_load_si512(&g_dots[p][r][16 * j])));
      _mm512_store_ps(&g_acc_u8[r][16 * j], _mm512_mul_ps(f, ws));
    }
  }
}

void unpermute() {
  for (int r = 0; r < kRows; ++r)
    for (int j = 0; j < kDim / 16; ++j)
      for (int l = 0; l < 16; ++l) g_out_u8[r][column_of(j, l)] = g_acc_u8[r][16 * j + l];
}

template <int Pieces>
void pv_u8() {
  split_weights(Pieces);
  transpose_v();
  dots_u8<Pieces>();
  epilogue<Pieces>();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Largest |out - ref| over the largest |ref|, ref in float64.
double rel_error(const float (*out)[kDim]) {
  double err = 0, mag = 0;
  for (int r = 0; r < kRows; ++r)
    for (int d = 0; d < kDim; ++d) {
      double ref = 0;
      for (int k = 0; k < kBlock; ++k) ref += static_cast<double>(g_w[r][k]) * g_v[k][d];
      err = std::max(err, std::fabs(out[r][d] - ref));
      mag = std::max(mag, std::fabs(ref));
    }
  return err / mag;
}

}  // namespace

int main(int argc, char** argv) {
  const long blocks = argc > 1 ? std::atol(argv[1]) : 200000;
  std::srand(1);
  for (auto& row : g_v)
    for (auto& x : row) x = static_cast<int8_t>(std::rand() % 256 - 128);
  for (int k = 0; k < kBlock; ++k)
    for (int d = 0; d < kDim; ++d) g_vf[k][d] = g_v[k][d];
  for (auto& row : g_w)  // a peaked row: one large weight, the rest small (softmax-like)
    for (int k = 0; k < kBlock; ++k) row[k] = k == 7 ? 1.0f : std::exp(-8.0f * std::rand() / RAND_MAX);

  // The integer dots, exactly.
  split_weights(3);
  transpose_v();
  dots_u8<3>();
  for (int p = 0; p < 3; ++p)
    for (int r = 0; r < kRows; ++r)
      for (int j = 0; j < kDim / 16; ++j)
        for (int l = 0; l < 16; ++l) {
          int32_t want = 0;
          for (int k = 0; k < kBlock; ++k)
            want += static_cast<int32_t>((g_wp[p][r][k / 4] >> (8 * (k % 4))) & 0xFF) * g_v[k][column_of(j, l)];
          if (g_dots[p][r][16 * j + l] != want) {
            std::printf("u8 dots differ at piece %d row %d vector %d lane %d\n", p, r, j, l);
            return 1;
          }
        }
  pv_fma();
  for (Widen w : {kMagic, kFloat}) {  // the same values in the same order: the same bits
    if (w == kMagic) pv_fma_with<kMagic>(g_out_var);
    else pv_fma_with<kFloat>(g_out_var);
    if (std::memcmp(g_out_var, g_out_fma, sizeof g_out_var) != 0) {
      std::printf("%s P.V differs from fma\n", w == kMagic ? "magic" : "f32v");
      return 1;
    }
  }
  epilogue<3>();
  unpermute();
  std::printf("error / largest |ref|: fma %.2e, u8x3 %.2e", rel_error(g_out_fma), rel_error(g_out_u8));
  pv_u8<2>();
  unpermute();
  std::printf(", u8x2 %.2e\n", rel_error(g_out_u8));

  const int reps = 7;
  std::vector<double> t_fma, t_u8x3, t_dots3, t_tr, t_u8x2, t_magic, t_f32v;
  auto per_key = [&](double seconds) { return seconds / (static_cast<double>(blocks) * kBlock) * 1e9; };
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
    for (long i = 0; i < blocks; ++i) pv_fma();
    double t1 = now();
    for (long i = 0; i < blocks; ++i) pv_u8<3>();
    double t2 = now();
    for (long i = 0; i < blocks; ++i) dots_u8<3>();
    double t3 = now();
    for (long i = 0; i < blocks; ++i) transpose_v();
    double t4 = now();
    for (long i = 0; i < blocks; ++i) pv_u8<2>();
    double t5 = now();
    for (long i = 0; i < blocks; ++i) pv_fma_with<kMagic>(g_out_var);
    double t6 = now();
    for (long i = 0; i < blocks; ++i) pv_fma_with<kFloat>(g_out_var);
    double t7 = now();
    t_magic.push_back(per_key(t6 - t5));
    t_f32v.push_back(per_key(t7 - t6));
    t_fma.push_back(per_key(t1 - t0));
    t_u8x3.push_back(per_key(t2 - t1));
    t_dots3.push_back(per_key(t3 - t2));
    t_tr.push_back(per_key(t4 - t3));
    t_u8x2.push_back(per_key(t5 - t4));
  }
  std::printf("ns per key (one KV head, %d rows, D %d), median of %d: fma %.2f | u8x3 %.2f (dots alone %.2f, "
              "transpose %.2f) | u8x2 %.2f | magic %.2f | f32v %.2f\n",
              kRows, kDim, reps, median(t_fma), median(t_u8x3), median(t_dots3), median(t_tr), median(t_u8x2),
              median(t_magic), median(t_f32v));
  return 0;
}
