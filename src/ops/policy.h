// The one policy table: the kernels' hardware-dependent choices, from the
// CPU's description (src/common/cpu.h) by rules that each state their
// reason and the measurement behind it. No other code tests a vendor or a
// family. Every knob here leaves results bit-identical (tests run each
// setting and compare bytes): what changes the arithmetic stays with the
// caller's options. A PolicyOverride replaces it for a scope (tests,
// experiments).
#ifndef SIMDATTN_SRC_OPS_POLICY_H_
#define SIMDATTN_SRC_OPS_POLICY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "src/common/cpu.h"

namespace simdattn {
namespace internal {

// kBFloat16's dot-product kernel (matmul_bf16.h): kAuto the table's, kNative
// the same for every size, kDotProduct vdpbf16ps or BFDOT, kFallback float32
// panels of rounded values.
enum class BFloat16DotPolicy { kAuto, kNative, kDotProduct, kFallback };

struct Policy {
  // Decode paces its rows (attention_decode-inl.h's RowPacer) once the
  // call's K and V exceed from_memory_bytes (0: the last-level cache's
  // size): they come from memory then.
  bool pace_rows_from_memory = true;
  size_t from_memory_bytes = 0;
  // Decode reads E4M3 rows straight as float32 bits (denormal operands).
  bool direct_e4m3 = false;
  // Decode's fp8 and bf16 products under kBFloat16 on bf16 pairs
  // (decode_pairs.h), where the CPU has AVX512_BF16 and VBMI.
  bool decode_pairs = false;
  // kBFloat16's kernel: AMX where the OS grants the tiles; else vdpbf16ps
  // where dot_product_pairs, else float32 panels.
  BFloat16DotPolicy bf16_dot = BFloat16DotPolicy::kAuto;
  bool dot_product_pairs = false;
};

// The table's policy for `cpu`; `rules`, when given, receives one line per
// rule that applied: the knob, its value and why.
Policy PolicyFor(const CpuDescription& cpu,
                 std::vector<std::string>* rules = nullptr);

// The policy in force: PolicyFor(ThisCpu()), or the innermost live
// PolicyOverride's.
const Policy& ActivePolicy();

// Replaces the policy process-wide while it lives (not per thread: for
// tests and experiments, not for concurrent calls that want different
// policies); scopes nest.
class PolicyOverride {
 public:
  explicit PolicyOverride(const Policy& policy);
  ~PolicyOverride();
  PolicyOverride(const PolicyOverride&) = delete;
  PolicyOverride& operator=(const PolicyOverride&) = delete;

 private:
  Policy policy_;
  const Policy* previous_;
};

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_POLICY_H_
