// How much of what a thread last touched is still in its caches after it has computed, on
// registers alone, for a while? The bench's pause (5 ms of busy cores before each timed call)
// stands for a model's other work; on a machine of one's own that pause leaves a small working
// set where it was, but a VM's vCPU may share its core's caches with other tenants' work.
//
//   g++ -O2 tools/cache_decay.cpp -o /tmp/cache_decay
//   /tmp/cache_decay [reps=41]
//
// Per buffer size: a pointer chase through every 64-byte line of the buffer in a random order
// (each load waits for the previous one, so the time per line is where the lines are: ~1 ns in
// L1, a few in L2, tens in L3, the memory's latency beyond), run once to bring the buffer in,
// then again after a spin of `pause` on registers only (no load or store); median over `reps`.
// The last row is the memory's latency: the same chase over 256 MiB, nothing cached (4 KiB pages:
// TLB misses included).
//
// On the Zen 4 VM of 2026-12-06 (AMD EPYC family 25 model 17, KVM, 2 vCPUs; docs/benchmarks-history.md),
// five runs within ten minutes, ns per line read back after 0 / 1 / 5 / 10 ms of spinning (ranges
// over the runs): 16 KiB 1.1-1.2 / 1.2-12 / 10-71 / 12-121; 256 KiB 3.8-5.2 / 4.5-11 / 8.5-34 /
// 15-111; 4 MiB 16-149 / 20-134 / 82-116 / 98-112; the memory 166-297. How fast the lines go
// changes from minute to minute (other tenants' load; a sixth run read 16 KiB back at 8.9 ns after
// 5 ms), but within the bench's 5 ms pause an L1-sized working set is mostly out of L1 and L2:
// while this thread spins on registers, something else empties them (another tenant's work on
// the same core, or the vCPU moved). The larger buffers' rows also pay TLB misses after a pause
// (4 KiB pages), so they overstate what L3 loses. A 1-key qsdpa decode call (1 thread, a Python function
// calling the variant's entry) took 10 us after 1 ms of waiting, 20 after 3, 40 after 10, 2.5
// straight after the previous call, the same whether the wait spun in C, spun in Python or slept.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The buffer as one cycle through all its lines, in a random order.
char* make_chase(char* buf, size_t bytes, std::mt19937_64& rng) {
  const size_t n = bytes / 64;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i = 0; i < n; ++i) *reinterpret_cast<char**>(buf + order[i] * 64) = buf + order[(i + 1) % n] * 64;
  return buf + order[0] * 64;
}

__attribute__((noinline)) char* chase(char* p, size_t steps) {
  for (size_t i = 0; i < steps; ++i) p = *reinterpret_cast<char**>(p);
  return p;
}

// Busy on registers alone for `seconds`.
__attribute__((noinline)) double spin(double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  double x = 1.0;
  while (Clock::now() < end)
    for (int k = 0; k < 100; ++k) x = x * 1.0000001 + 1e-9;
  return x;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 41;
  const size_t sizes[] = {16u << 10, 256u << 10, 768u << 10, 4u << 20};
  const double pauses_ms[] = {0.0, 0.2, 1.0, 3.0, 5.0, 10.0};
  std::mt19937_64 rng(2);
  volatile double sink = 0;
  std::printf("ns per 64-byte line, read back after a register-only spin (median of %d)\n", reps);
  std::printf("%10s", "buffer");
  for (double ms : pauses_ms) std::printf("  %6.1f ms", ms);
  std::printf("\n");
  for (size_t bytes : sizes) {
    std::vector<char> storage(bytes + 64);
    char* buf = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
    char* start = make_chase(buf, bytes, rng);
    const size_t n = bytes / 64;
    std::printf("%7zu KiB", bytes >> 10);
    for (double ms : pauses_ms) {
      std::vector<double> ns(static_cast<size_t>(reps));
      for (double& t : ns) {
        char* p = chase(start, n);  // in the caches now
        if (ms > 0) sink = sink + spin(ms * 1e-3);
        const auto t0 = Clock::now();
        p = chase(p, n);
        t = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(n);
        sink = sink + static_cast<double>(reinterpret_cast<uintptr_t>(p) & 1);  // keep the chase
      }
      std::printf("  %9.1f", median(ns));
    }
    std::printf("\n");
  }
  // The memory's latency, for reference: 256 MiB, far beyond any cache.
  const size_t big = size_t{256} << 20;
  std::vector<char> storage(big + 64);
  char* buf = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
  char* p = make_chase(buf, big, rng);
  const size_t steps = 2000000;
  const auto t0 = Clock::now();
  p = chase(p, steps);
  const double lat = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(steps);
  sink = sink + static_cast<double>(reinterpret_cast<uintptr_t>(p) & 1);
  std::printf("memory latency (256 MiB chase): %.1f ns per line\n", lat);
  return 0;
}
