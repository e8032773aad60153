// Which SIMD targets the library was compiled for, which this CPU runs, and
// which one the kernels dispatch to.
#ifndef SIMDATTN_TARGETS_H_
#define SIMDATTN_TARGETS_H_

#include <string>
#include <vector>

#include "simdattn/export.h"

namespace simdattn {

// Highway's names, best first (e.g. "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128"
// on x86; "SVE2", "SVE", "NEON" on Arm).
SIMDATTN_API std::vector<std::string> CompiledTargets();
// The compiled targets this CPU can run.
SIMDATTN_API std::vector<std::string> SupportedTargets();
// The target the kernels dispatch to now.
SIMDATTN_API std::string ActiveTarget();

// Restricts dispatch to one supported target (for benchmarks and tests that
// compare targets in one process); an empty name restores the default.
// Throws std::invalid_argument for a name not in SupportedTargets(). Not
// thread-safe: call it while no kernel runs.
SIMDATTN_API void UseTarget(const std::string& name);

// The CPU as the kernels' choices see it, one line: vendor, family and
// model, the features they choose by, the last-level cache, the cores.
SIMDATTN_API std::string CpuSummary();
// The policy's rules in force on this CPU, one line each: the choice and
// why. The table's (src/ops/policy.cc), then a loaded plan file's. None of
// them changes a result.
SIMDATTN_API std::vector<std::string> PolicyRules();

// Loads a plan file written by `simdattn tune` on this machine: its knobs
// replace the policy table's (what is not in it stays the table's); an
// empty path goes back to the table. The environment's SIMDATTN_PLANS is
// loaded the same way at the first call that consults the policy (one that
// fails is reported on stderr and the table kept). A plan changes speed,
// never results. Throws std::invalid_argument for an unreadable or
// malformed file (naming the line), or one made on another CPU or by
// another version of the library (naming both); the policy is as it was
// then. Not thread-safe: call it while no kernel runs.
SIMDATTN_API void LoadPlans(const std::string& path);

// How the calling thread's last attention call ran (ScaledDotProductAttention,
// VarlenAttention, a VarlenPlan's, a module's), one line per decision: the
// target, cache type and arithmetic; the tasks (query heads x tokens each)
// and how the keys were split; which products served tasks of few rows
// (decode: K and V read in place) and larger ones (packed tiles). The
// policy rules behind them are PolicyRules(). Empty before the first call.
// For reports (`simdattn info --plan`, the bench's JSON): a call records it
// at the cost of a few stores.
SIMDATTN_API std::vector<std::string> LastAttentionPlan();

// The library's version, "major.minor.patch".
SIMDATTN_API const char* Version();

}  // namespace simdattn

#endif  // SIMDATTN_TARGETS_H_
