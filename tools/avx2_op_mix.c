// How many AVX2 vector instructions per cycle this CPU sustains for the mixes the decode kernel is
// made of, register operands only, no dependency between instructions (ten chains, far more than
// any latency needs).
//
//   gcc -O1 -mavx2 -mfma tools/avx2_op_mix.c -o /tmp/avx2_op_mix && /tmp/avx2_op_mix
//
// The clock is calibrated from ten independent FMAs, taken to run at two per cycle (Zen 3 and
// every Intel core since Haswell). Each line then runs one mix of ten instructions and prints
// cycles per group and instructions per cycle. On the 2-vCPU AMD EPYC (Zen 3) VM of
// docs/benchmarks-history.md, an FMA beside any of the kernel's other vector instructions (vpmaddwd,
// vpaddd, vbroadcastss, vcvtdq2ps, vpmovsxbd) runs at 2.1-2.5 instructions per cycle, not the 4
// the FP unit has pipes for: the kernel's time per key is set by how many vector instructions it
// issues, which is what docs/benchmarks-history.md compares with the cold-cache budget.
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9"
// Ten instructions: A writes ymm0, 2, 4, 6, 8 and B writes ymm1, 3, 5, 7, 9, both reading ymm14/15.
#define MIX(A, B)                                                                                 \
  A(0) "\n" B(1) "\n" A(2) "\n" B(3) "\n" A(4) "\n" B(5) "\n" A(6) "\n" B(7) "\n" A(8) "\n" B(9) "\n"
#define FMA(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r
#define MADD(r) "vpmaddwd %%ymm14, %%ymm15, %%ymm" #r
#define ADD(r) "vpaddd %%ymm14, %%ymm15, %%ymm" #r
#define CVT(r) "vcvtdq2ps %%ymm14, %%ymm" #r
#define WIDEN(r) "vpmovsxbd 64(%%rsp), %%ymm" #r
#define BCAST(r) "vbroadcastss 64(%%rsp), %%ymm" #r

#define RUN(name, body)                                        \
  do {                                                         \
    double best = 1e9;                                         \
    for (int rep = 0; rep < 5; ++rep) {                        \
      const double t0 = now();                                 \
      for (long i = 0; i < n; ++i) __asm__ volatile(body ::: CLOBBER); \
      const double t = (now() - t0) / n;                       \
      if (t < best) best = t;                                  \
    }                                                          \
    report(name, best);                                        \
  } while (0)

static double ns_per_cycle;
static void report(const char* name, double seconds) {
  const double cycles = seconds * 1e9 / ns_per_cycle;
  printf("  %-28s %5.2f cycles per 10  %4.2f per cycle\n", name, cycles, 10.0 / cycles);
}

int main(void) {
  const long n = 20000000;
  __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15" ::: "xmm14", "xmm15");
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now();
    for (long i = 0; i < n; ++i) __asm__ volatile(MIX(FMA, FMA) ::: CLOBBER);
    const double t = (now() - t0) / n;
    if (t < best) best = t;
  }
  ns_per_cycle = best * 1e9 / 5.0;  // ten FMAs at two per cycle
  printf("clock from 10 FMAs at 2 per cycle: %.2f GHz\n", 1.0 / ns_per_cycle);
  RUN("10 vpmaddwd", MIX(MADD, MADD));
  RUN("5 vpmaddwd + 5 vpaddd", MIX(MADD, ADD));
  RUN("5 FMA + 5 vpmaddwd", MIX(FMA, MADD));
  RUN("5 FMA + 5 vpaddd", MIX(FMA, ADD));
  RUN("5 FMA + 5 vbroadcastss m32", MIX(FMA, BCAST));
  RUN("5 FMA + 5 vcvtdq2ps", MIX(FMA, CVT));
  RUN("5 FMA + 5 vpmovsxbd m64", MIX(FMA, WIDEN));
  RUN("10 vbroadcastss m32", MIX(BCAST, BCAST));
  return 0;
}
