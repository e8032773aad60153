#include "simdattn/targets.h"

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/check.h"
#include "src/common/cpu.h"
#include "src/ops/plan_record.h"
#include "src/ops/policy.h"
#include "src/ops/target_family.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/ops/targets.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace simdattn {
namespace HWY_NAMESPACE {
// Tells which per-target copy the dispatcher picked.
int64_t CurrentTarget() { return HWY_TARGET; }
}  // namespace HWY_NAMESPACE
}  // namespace simdattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace simdattn {
HWY_EXPORT(CurrentTarget);

namespace {

std::vector<std::string> Names(int64_t targets) {
  std::vector<std::string> names;
  // Lower bits are better targets in Highway's numbering.
  for (; targets != 0; targets &= targets - 1) {
    names.emplace_back(hwy::TargetName(targets & -targets));
  }
  return names;
}

}  // namespace

std::vector<std::string> CompiledTargets() { return Names(HWY_TARGETS); }

std::vector<std::string> SupportedTargets() {
  return Names(hwy::SupportedTargets() & HWY_TARGETS);
}

std::string CpuSummary() { return internal::ThisCpu().Summary(); }

std::vector<std::string> LastAttentionPlan() {
  return internal::ThisThreadPlan().Lines();
}

std::vector<std::string> PolicyRules() { return internal::ActiveRules(); }

void LoadPlans(const std::string& path) { internal::LoadPlanFile(path); }

std::string ActiveTarget() {
  return hwy::TargetName(internal::ActiveTargetBit());
}

namespace internal {

int64_t ActiveTargetBit() { return HWY_DYNAMIC_DISPATCH(CurrentTarget)(); }

bool IsAvx512Target(int64_t target) { return (target & kAvx512Targets) != 0; }

bool IsArmSimdTarget(int64_t target) { return (target & kArmSimdTargets) != 0; }

}  // namespace internal

void UseTarget(const std::string& name) {
  if (name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    return;
  }
  hwy::SetSupportedTargetsForTest(0);
  for (int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1) {
    const int64_t target = t & -t;
    if (name == hwy::TargetName(target)) {
      hwy::SetSupportedTargetsForTest(target);
      return;
    }
  }
  std::string supported;
  for (const std::string& s : SupportedTargets()) {
    supported += (supported.empty() ? "" : ", ") + s;
  }
  // Leaves dispatch as UseTarget("") does: Highway 1.0.3 may otherwise keep
  // a lesser target chosen while its targets were listed (SVE2 for SVE_256).
  hwy::SetSupportedTargetsForTest(0);
  internal::ThrowInvalidArgument(
      "UseTarget", "target \"", name,
      "\" is not supported here (supported: ", supported, ")");
}

const char* Version() { return SIMDATTN_VERSION_STRING; }

}  // namespace simdattn
#endif  // HWY_ONCE
