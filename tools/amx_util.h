// Helpers shared by the AMX probes in tools/: the tile configuration's memory layout, the OS's
// permission for the tile state, and the probes' common command line (keys, calls).
#pragma once
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace amx_util {

// ldtilecfg's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Whether this CPU has AMX-INT8 and Linux lends this process the tile state (it does so only on
// request: arch_prctl ARCH_REQ_XCOMP_PERM); says so when not.
inline bool amx_available() {
  constexpr long kReqPerm = 0x1023, kXtileData = 18;
  if (__builtin_cpu_supports("amx-int8") && syscall(SYS_arch_prctl, kReqPerm, kXtileData) == 0) return true;
  std::printf("no AMX-INT8 here (CPU or OS permission)\n");
  return false;
}

// argv[1] keys (default 2048, a multiple of `block`), argv[2] calls; false (usage printed) when bad.
inline bool keys_and_calls(int argc, char** argv, size_t block, int default_calls, size_t& keys, int& calls) {
  keys = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 2048;
  calls = argc > 2 ? std::atoi(argv[2]) : default_calls;
  if (keys != 0 && keys % block == 0 && calls >= 1) return true;
  std::fprintf(stderr, "usage: %s [keys, a multiple of %zu] [calls]\n", argv[0], block);
  return false;
}

}  // namespace amx_util
