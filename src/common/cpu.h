// The one description of the CPU this process runs on, probed once: the
// only code in the library that reads cpuid, the auxiliary vector or sysfs.
// The policy table (src/ops/policy.h) maps it to the kernels' choices;
// `simdattn info` prints it.
#ifndef SIMDATTN_SRC_COMMON_CPU_H_
#define SIMDATTN_SRC_COMMON_CPU_H_

#include <cstddef>
#include <string>

namespace simdattn {
namespace internal {

enum class CpuVendor { kOther, kAmd, kIntel };

struct CpuDescription {
  CpuVendor vendor = CpuVendor::kOther;  // x86's cpuid vendor string.
  // cpuid leaf 1's display family and model (the extended fields added:
  // AMD's Zen 3 and 4 are family 0x19, Zen 5 0x1A); 0 off x86.
  unsigned family = 0, model = 0;
  bool avx512_bf16 = false;  // vdpbf16ps.
  bool avx512_vbmi = false;  // vpermb (decode's fp8 pairs).
  bool amx_bf16 = false;     // AMX-TILE and AMX-BF16 (the OS must still
                             // grant the tiles: AmxUsable).
  bool arm_bf16 = false;     // Armv8.6's BF16 (BFDOT), from HWCAP2.
  // The last-level cache the first CPU shares (per AMD CCD or Intel socket:
  // sysfs; a VM's sysconf may sum every CCD's); 32 MiB where unknown.
  size_t last_level_cache_bytes = 0;
  size_t cores = 0;  // Online logical CPUs.

  // One line: vendor, family and model, features, cache, cores.
  std::string Summary() const;
};

// This CPU, probed at the first call.
const CpuDescription& ThisCpu();

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_CPU_H_
