/* How late does an OpenMP team start after its threads have slept? The bench keeps every core busy
 * for 5 ms before each timed call (as a model's other layers would); the kernels' OpenMP worker
 * sleeps meanwhile, and a 2-thread call pays its wake-up. This times, for a 2-thread parallel
 * region with 50 us of work per thread, when each thread enters it, after:
 *   0  another region (back to back: the worker is still spinning),
 *   1  5 ms with both cores busy in threads of their own (the bench's pause),
 *   2  a 5 ms sleep.
 *
 *   gcc -O2 -fopenmp tools/omp_wake.c -o /tmp/omp_wake -lpthread && for m in 0 1 2; do /tmp/omp_wake $m; done
 *
 * On the Intel Xeon VM of 2026-12-02 (docs/benchmarks-history.md), medians of 200, two runs: back to back,
 * both threads in within 0.5 us and the region 50.7-50.8 us; after the busy pause, the master
 * enters 10.7-10.8 us late (its futex wake of the worker) and the worker 20.5-22 us late (p90
 * 26-877 us), region 71-73 us; after a sleep 12.0-12.2 and 38.6-39.7 us, region 89-91 us.
 * On the Zen 4 VM of 2026-12-03: back to back 0.4 / 0.2 us, region 50.8; after the busy pause
 * 2.3 / 2.9 us (p90 9.2), region 54.0; after a sleep 4.2 / 6.6 us, region 58.5. That VM halts an
 * idle vCPU at once (Firecracker, cpuidle haltpoll with guest_halt_poll_ns=0), and a 1-key qsdpa
 * call at 2 threads with OMP_WAIT_POLICY=passive (a futex wake every region) took 60 us against
 * 5-8 us with the default spin: a worker asleep on a halted vCPU is expensive to wake there. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile double sink;

static void* spin_until(void* end) {
  const double e = *(const double*)end;
  double x = 1.0;
  while (now() < e) x = x * 1.0000001 + 1e-9;
  sink = x;
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

enum { kRuns = 200 };

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 1;
  if (mode < 0 || mode > 2) {
    fprintf(stderr, "usage: %s [0 back to back | 1 busy pause | 2 sleep]\n", argv[0]);
    return 2;
  }
  static double worker[kRuns], master[kRuns], region[kRuns];
#pragma omp parallel num_threads(2)
  sink = omp_get_thread_num();  /* the team exists before the first timed region */
  for (int r = 0; r < kRuns; ++r) {
    double end = now() + 0.005;
    if (mode == 1) {
      pthread_t helper;
      pthread_create(&helper, NULL, spin_until, &end);
      spin_until(&end);
      pthread_join(helper, NULL);
    } else if (mode == 2) {
      const struct timespec pause = {0, 5000000};
      nanosleep(&pause, NULL);
    }
    const double t0 = now();
    double in0 = 0.0, in1 = 0.0;
#pragma omp parallel num_threads(2)
    {
      const double in = now() - t0;
      if (omp_get_thread_num() == 0) in0 = in; else in1 = in;
      const double stop = now() + 50e-6;
      double x = 1.0;
      while (now() < stop) x = x * 1.0000001 + 1e-9;
      sink = x;
    }
    region[r] = now() - t0, master[r] = in0, worker[r] = in1;
  }
  qsort(worker, kRuns, sizeof(double), by_value);
  qsort(master, kRuns, sizeof(double), by_value);
  qsort(region, kRuns, sizeof(double), by_value);
  printf("mode %d: master in after %.1f us, worker after %.1f us (p90 %.1f); region (50 us of work each) %.1f us\n",
         mode, master[kRuns / 2] * 1e6, worker[kRuns / 2] * 1e6, worker[kRuns * 9 / 10] * 1e6, region[kRuns / 2] * 1e6);
  return 0;
}
