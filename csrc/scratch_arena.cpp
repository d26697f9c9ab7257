// The arena behind csrc/scratch_arena.h. Compiled into the scalar module only.
#define QSDPA_ARENA_OWNER 1
#include "scratch_arena.h"

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace qsdpa {
namespace {

std::mutex g_arena_mutex;       // held from acquire() to release()
void* g_block = nullptr;        // never shrunk: a decode loop of fixed shapes allocates once
size_t g_capacity = 0;
std::atomic<uint64_t> g_growths{0};

void* arena_acquire(size_t bytes) {
  g_arena_mutex.lock();
  if (bytes > g_capacity) {
    // Exactly what the layout asks for (aligned_alloc wants a multiple of the alignment).
    const size_t want = (bytes + 63) & ~size_t(63);
    void* block = std::aligned_alloc(64, want);
    if (block == nullptr) {
      g_arena_mutex.unlock();
      return nullptr;
    }
    std::free(g_block);
    g_block = block;
    g_capacity = want;
    g_growths.fetch_add(1, std::memory_order_relaxed);
  }
  return g_block;
}

void arena_release() { g_arena_mutex.unlock(); }
uint64_t arena_growths() { return g_growths.load(std::memory_order_relaxed); }
size_t arena_capacity() {
  std::lock_guard<std::mutex> lock(g_arena_mutex);
  return g_capacity;
}

const ArenaApi g_api{kArenaAbiVersion, arena_acquire, arena_release, arena_growths, arena_capacity};

}  // namespace

void register_scratch_arena(pybind11::module_& m) {
  namespace py = pybind11;
  m.attr("_arena_api") = py::capsule(static_cast<const void*>(&g_api), kArenaCapsuleName);
  m.def("arena_stats", []() {
    py::dict d;
    d["growths"] = arena_growths();
    size_t cap;
    {
      py::gil_scoped_release nogil;  // a running call holds the arena; wait without the GIL
      cap = arena_capacity();
    }
    d["capacity_bytes"] = cap;
    return d;
  }, "Scratch arena counters: how often it grew, and the bytes it owns.");
}

}  // namespace qsdpa
