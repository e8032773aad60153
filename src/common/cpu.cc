#include "src/common/cpu.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace simdattn {
namespace internal {
namespace {

size_t LastLevelCacheBytes() {
  size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" +
                       std::to_string(index) + "/size");
    size_t size = 0;
    std::string unit;
    if (!(file >> size)) continue;
    file >> unit;
    if (unit == "K") size <<= 10;
    if (unit == "M") size <<= 20;
    largest = std::max(largest, size);
  }
  return largest != 0 ? largest : size_t{32} << 20;
}

CpuDescription Probe() {
  CpuDescription cpu;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) != 0) {
    char vendor[12];
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    cpu.vendor = std::memcmp(vendor, "AuthenticAMD", 12) == 0 ? CpuVendor::kAmd
                 : std::memcmp(vendor, "GenuineIntel", 12) == 0
                     ? CpuVendor::kIntel
                     : CpuVendor::kOther;
  }
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) {
    const unsigned base = (eax >> 8) & 0xF, model = (eax >> 4) & 0xF;
    cpu.family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    cpu.model =
        base == 0xF || base == 0x6 ? model + ((eax >> 12) & 0xF0) : model;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
    cpu.avx512_vbmi = (ecx >> 1) & 1;
    cpu.amx_bf16 = ((edx >> 24) & 1) && ((edx >> 22) & 1);
  }
  // AVX512_BF16 (leaf 7 subleaf 1, eax bit 5), and the OS's AVX-512 state:
  // the compiler's view agrees with both.
  cpu.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  cpu.avx512_vbmi = cpu.avx512_vbmi && __builtin_cpu_supports("avx512vbmi");
  cpu.amx_bf16 = cpu.amx_bf16 && cpu.avx512_bf16;
#endif
#if defined(__aarch64__) && defined(__linux__)
  constexpr unsigned long kHwcap2Bf16 = 1ul << 14;  // Linux's HWCAP2_BF16.
  cpu.arm_bf16 = (getauxval(AT_HWCAP2) & kHwcap2Bf16) != 0;
#endif
  cpu.last_level_cache_bytes = LastLevelCacheBytes();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu.cores = online > 0 ? static_cast<size_t>(online) : 1;
  return cpu;
}

}  // namespace

std::string CpuDescription::Summary() const {
  char ids[64];
  std::snprintf(ids, sizeof(ids), " family 0x%x model 0x%x", family, model);
  std::string s = vendor == CpuVendor::kAmd     ? "AMD"
                  : vendor == CpuVendor::kIntel ? "Intel"
                                                : "other";
  if (family != 0) s += ids;
  for (const auto& [on, name] :
       {std::pair<bool, const char*>{avx512_bf16, "AVX512_BF16"},
        {avx512_vbmi, "AVX512_VBMI"},
        {amx_bf16, "AMX-BF16"},
        {arm_bf16, "BF16"}}) {
    if (on) s += std::string(", ") + name;
  }
  return s + ", last-level cache " +
         std::to_string(last_level_cache_bytes >> 20) + " MiB, " +
         std::to_string(cores) + " cores";
}

const CpuDescription& ThisCpu() {
  static const CpuDescription cpu = Probe();
  return cpu;
}

}  // namespace internal
}  // namespace simdattn
