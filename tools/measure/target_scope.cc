#include "tools/measure/target_scope.h"

#include <string>

#include "simdattn/targets.h"

namespace simdattn {
namespace measure {

TargetScope::TargetScope(const std::string& target) { UseTarget(target); }

TargetScope::~TargetScope() { UseTarget(""); }

}  // namespace measure
}  // namespace simdattn
