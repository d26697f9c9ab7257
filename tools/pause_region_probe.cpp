// Does a 2-thread OpenMP region compute slower after the bench's pause? An FMA-only region (no
// memory traffic) timed per thread right after a pause like qsdpa._bench._settle's, against back to
// back: if the host gave the threads less than two cores after the pause, each thread's FMA work
// would take longer; if only the start is late, only the region's wall time grows.
//
//   g++ -O2 -fopenmp -mavx512f tools/pause_region_probe.cpp -o /tmp/pause_region
//   /tmp/pause_region [steps=100000] [rounds=60] [pause_s=0.005] [quiet_s=0.05]
//
// Each round: this thread alone busy for quiet_s (as _settle waits for the process's other
// threads to go quiet: libgomp's worker stops spinning and sleeps), then this thread and a helper
// std::thread busy for pause_s (_busy_cores), the helper joined; then the timed region, then the
// same region again back to back. Printed: median FMA time of each thread, how late the worker
// started after the master, and the region's wall time.
//
// On the Zen 4 VM of 2026-12-03 (docs/benchmarks-history.md), 100000 steps, 60 rounds, three runs: each
// thread's FMA work took 110-112 us after the pause and back to back alike; the worker started
// 17-34 us after the master after the pause (0.3 back to back) and the region's wall time was
// 144-189 us against 112-120. So after the pause both vCPUs compute at full speed; what a 2-thread
// decode call loses there beyond its start (tools/call_timeline.py) is in its memory traffic.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Eight independent FMA chains of `n` steps (register only).
__attribute__((noinline)) float fma_steps(long n) {
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < n; ++i) {
    a0 = _mm512_fmadd_ps(a0, m, c), a1 = _mm512_fmadd_ps(a1, m, c), a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c), a4 = _mm512_fmadd_ps(a4, m, c), a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c), a7 = _mm512_fmadd_ps(a7, m, c);
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return _mm512_reduce_add_ps(s);
}

volatile float g_sink;

void busy_until(double until) {
  while (now() < until) g_sink = fma_steps(2000);
}

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 100000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 60;
  const double pause = argc > 3 ? std::atof(argv[3]) : 5e-3;
  const double quiet = argc > 4 ? std::atof(argv[4]) : 0.05;
  double start[2], end[2];
  auto region = [&](double t0) {
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      start[t] = now() - t0;
      g_sink = fma_steps(steps);
      end[t] = now() - t0;
    }
  };
  region(now());
  region(now());
  std::vector<double> work[2][2], late[2], wall[2];  // [after pause, back to back]
  for (int r = 0; r < rounds; ++r) {
    busy_until(now() + quiet);
    const double until = now() + pause;
    std::thread helper([until] { busy_until(until); });
    busy_until(until);
    helper.join();
    for (int mode = 0; mode < 2; ++mode) {
      const double t0 = now();
      region(t0);
      wall[mode].push_back(now() - t0);
      for (int t = 0; t < 2; ++t) work[mode][t].push_back(end[t] - start[t]);
      late[mode].push_back(start[1] - start[0]);
    }
  }
  const char* names[2] = {"after the pause", "back to back"};
  for (int mode = 0; mode < 2; ++mode)
    std::printf("%-16s FMA work: thread 0 %.1f us, thread 1 %.1f us; worker started %.1f us after the master; "
                "region wall %.1f us\n",
                names[mode], median_us(work[mode][0]), median_us(work[mode][1]), median_us(late[mode]),
                median_us(wall[mode]));
  return 0;
}
