// Which SIMD target simdattn's kernels run on during a measurement.
#ifndef SIMDATTN_TOOLS_MEASURE_TARGET_SCOPE_H_
#define SIMDATTN_TOOLS_MEASURE_TARGET_SCOPE_H_

#include <string>

namespace simdattn {
namespace measure {

// Restricts the kernels' dispatch to one target while the scope lives and
// restores the default dispatch when it ends.
//
// Why a process-global switch (simdattn::UseTarget) and not a per-call
// choice: the library dispatches internally (HWY_DYNAMIC_DISPATCH over its
// own tables) and its public API takes no target per call; indexing
// Highway's exported tables from here would need per-target entry points in
// the public API. Every measurement that pins a target goes through this
// type, so the switch is set and undone in one place.
//
// Scopes do not nest (the end of any scope restores the default), and no
// kernel may run on another thread while one begins or ends.
class TargetScope {
 public:
  // An empty name keeps the default dispatch. Throws std::invalid_argument
  // for a name not in simdattn::SupportedTargets().
  explicit TargetScope(const std::string& target);
  ~TargetScope();
  TargetScope(const TargetScope&) = delete;
  TargetScope& operator=(const TargetScope&) = delete;
};

}  // namespace measure
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_MEASURE_TARGET_SCOPE_H_
