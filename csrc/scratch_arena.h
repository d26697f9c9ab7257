// The process-wide scratch arena. It lives in the scalar module (built on every architecture) and
// the other variant modules reach it through a capsule holding this table, so a process has one
// arena whichever variants it loads. A call holds the arena for its whole duration: concurrent
// calls from different Python threads take turns, so no slice is ever handed to two calls.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qsdpa {

struct ArenaApi {
  uint32_t abi_version;
  // Blocks until the arena is free, grows it (only ever grows) to at least `bytes`, and returns a
  // 64-byte aligned block; nullptr if the memory cannot be had (the arena is then not held).
  void* (*acquire)(size_t bytes);
  void (*release)();
  uint64_t (*growths)();   // how many times the arena has grown since the process started
  size_t (*capacity)();    // bytes currently owned
};

constexpr uint32_t kArenaAbiVersion = 1;
constexpr const char* kArenaCapsuleName = "qsdpa.ArenaApi";

// Holds the arena for a scope; ok() is false when the memory could not be had.
class ArenaLease {
 public:
  ArenaLease(const ArenaApi* api, size_t bytes) : api_(api), ptr_(bytes ? api->acquire(bytes) : nullptr), held_(ptr_ != nullptr) {}
  ~ArenaLease() {
    if (held_) api_->release();
  }
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;
  bool ok() const { return held_; }
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }

 private:
  const ArenaApi* api_;
  void* ptr_;
  bool held_;
};

}  // namespace qsdpa

#ifdef QSDPA_ARENA_OWNER
#include <pybind11/pybind11.h>
namespace qsdpa {
// Scalar module only: adds the `_arena_api` capsule and `arena_stats()`.
void register_scratch_arena(pybind11::module_& m);
}  // namespace qsdpa
#endif
