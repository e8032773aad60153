// The one policy table: the kernels' hardware-dependent choices, from the
// CPU's description (src/common/cpu.h) by rules that each state their
// reason and the measurement behind it. No other code tests a vendor or a
// family. Two kinds of knob: speed knobs leave results bit-identical (tests
// run each setting and compare bytes), and plan files (`simdattn tune`) may
// set them; kernel choices under ComputeType::kBFloat16 pick between
// kernels whose results meet that arithmetic's bound but may differ in the
// last bits, and come from the table alone. What changes the arithmetic
// itself stays with the caller's options. A PolicyOverride replaces the
// policy for a scope (tests, experiments).
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
  // --- Speed knobs: the same bits whatever their values. ---
  // Decode paces its rows (attention_decode-inl.h's RowPacer) once the
  // call's K and V exceed from_memory_bytes (0: the last-level cache's
  // size): they come from memory then.
  bool pace_rows_from_memory = true;
  size_t from_memory_bytes = 0;
  // Decode reads E4M3 rows straight as float32 bits (denormal operands).
  bool direct_e4m3 = false;
  // The tiled MatMuls' tasks (matmul_plan.h): at most matmul_task_tiles
  // register tiles of rows each (1-64), and matmul_panel_group row blocks
  // per group walking the panels (0: the float32 kernel's rule by panel
  // width, matmul_plan.cc). Any grid sums each output over the whole of K
  // in one order.
  size_t matmul_task_tiles = 16;
  size_t matmul_panel_group = 0;

  // --- Kernel choices under kBFloat16: the table's alone. ---
  // Decode's bf16 and fp8 products on bf16 pairs (decode_pairs.h), where
  // the CPU has AVX512_BF16 and VBMI (bf16 rows: or Arm's BFDOT), in tasks
  // of at most decode_pair_rows query rows, or cached_decode_pair_rows where
  // K and V fit the last-level cache (1 to kMaxPairRows).
  bool bf16_decode_pairs = false;
  bool fp8_decode_pairs = false;
  size_t decode_pair_rows = 4;
  size_t cached_decode_pair_rows = 4;
  // kBFloat16's kernel: AMX where the OS grants the tiles; else vdpbf16ps
  // where dot_product_pairs, else float32 panels.
  BFloat16DotPolicy bf16_dot = BFloat16DotPolicy::kAuto;
  bool dot_product_pairs = false;
};

// The knobs a plan file may set, the speed knobs: by name, a value as text,
// and the value parsed into a policy. SetKnob throws
// std::invalid_argument naming the knob for an unknown name or a bad value.
std::vector<std::string> KnobNames();
std::string KnobValue(const Policy& policy, const std::string& name);
void SetKnob(const std::string& name, const std::string& value, Policy* policy);

// A plan file, as `simdattn tune` writes it: the CPU it measured
// (CpuDescription::Summary), the library's version, and the knobs it set,
// each with the measurement that chose it.
struct PlanFile {
  struct Knob {
    std::string name, value, evidence;
  };
  std::string cpu, version;
  std::vector<Knob> knobs;

  std::string Format() const;
  // Throws std::invalid_argument naming `source` and the line for text that
  // is not a plan file.
  static PlanFile Parse(const std::string& text, const std::string& source);
};

// Loads the plan file at `path` for this process: ActivePolicy becomes the
// table's policy with the file's knobs set. Empty: back to the table.
// Throws std::invalid_argument naming both sides for a file made on another
// CPU or by another version, and the line for a malformed one; nothing
// changes then. Not thread-safe: call it while no kernel runs.
void LoadPlanFile(const std::string& path);

// The table's rules on this CPU, then the loaded file's knobs, one line
// each: the knob, its value and why.
std::vector<std::string> ActiveRules();
// Where ActivePolicy's knobs come from, in words: the table, a plan file
// (its path) or an override.
std::string ActivePolicySource();

// The table's policy for `cpu`; `rules`, when given, receives one line per
// rule that applied: the knob, its value and why.
Policy PolicyFor(const CpuDescription& cpu,
                 std::vector<std::string>* rules = nullptr);

// The policy in force: the innermost live PolicyOverride's, else the loaded
// plan file's (LoadPlanFile; at the first call, the file SIMDATTN_PLANS
// names, where set: one that does not load is reported on stderr and the
// table kept), else PolicyFor(ThisCpu()).
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
