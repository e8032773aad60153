#include "src/ops/policy.h"

#include <atomic>
#include <string>
#include <vector>

namespace simdattn {
namespace internal {
namespace {

// One rule of the table: where `applies`, the knob takes the value, for
// the reason given (bench/RESULTS.md, "Kept decisions", has the numbers).
struct Rule {
  const char* knob;
  bool (*applies)(const CpuDescription&);
  void (*set)(Policy&);
  const char* reason;
};

bool IsAmd(const CpuDescription& cpu) { return cpu.vendor == CpuVendor::kAmd; }

const Rule kRules[] = {
    {"pace_rows_from_memory = false",
     [](const CpuDescription& cpu) { return IsAmd(cpu) && cpu.family == 0x19; },
     [](Policy& p) { p.pace_rows_from_memory = false; },
     "AMD family 0x19 (Zen 3, Zen 4): the hardware prefetchers alone read "
     "bf16, f16 and q8_0 caches from memory 1.2-2.3x as fast as paced "
     "(Zen 4); Zen 5 and Intel keep the pacing (Zen 5: 1.05-1.4x faster "
     "paced)"},
    {"direct_e4m3 = true", IsAmd, [](Policy& p) { p.direct_e4m3 = true; },
     "AMD's cores take denormal operands at full speed (Zen 5 measured); "
     "Intel's take a microcode assist per such instruction"},
    {"decode_pairs = true", IsAmd, [](Policy& p) { p.decode_pairs = true; },
     "vdpbf16ps decode over fp8 and bf16 rows paid on Zen 4; on Intel's "
     "Xeons vdpbf16ps ran below the float32 FMAs"},
    {"dot_product_pairs = true", IsAmd,
     [](Policy& p) { p.dot_product_pairs = true; },
     "kBFloat16 MatMul and prefill on vdpbf16ps paid on Zen 4 and 5; on a "
     "Sapphire Rapids Xeon it ran below the float32 FMA rate, and AMX is the "
     "native path there"},
};

std::atomic<const Policy*> override_policy{nullptr};

}  // namespace

Policy PolicyFor(const CpuDescription& cpu, std::vector<std::string>* rules) {
  Policy policy;
  for (const Rule& rule : kRules) {
    if (!rule.applies(cpu)) continue;
    rule.set(policy);
    if (rules != nullptr) {
      rules->push_back(std::string(rule.knob) + ": " + rule.reason);
    }
  }
  return policy;
}

const Policy& ActivePolicy() {
  static const Policy table = PolicyFor(ThisCpu());
  const Policy* forced = override_policy.load(std::memory_order_acquire);
  return forced != nullptr ? *forced : table;
}

PolicyOverride::PolicyOverride(const Policy& policy)
    : policy_(policy),
      previous_(override_policy.exchange(&policy_, std::memory_order_acq_rel)) {
}

PolicyOverride::~PolicyOverride() {
  override_policy.store(previous_, std::memory_order_release);
}

}  // namespace internal
}  // namespace simdattn
