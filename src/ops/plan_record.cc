#include "src/ops/plan_record.h"

#include <string>
#include <vector>

#include "src/ops/policy.h"

namespace simdattn {
namespace internal {

std::vector<std::string> AttentionPlanRecord::Lines() const {
  if (target == nullptr) return {};
  using std::to_string;
  const std::string per_task = to_string(task_heads) + " query head" +
                               (task_heads == 1 ? "" : "s") + " x up to " +
                               to_string(task_tokens) + " token" +
                               (task_tokens == 1 ? "" : "s");
  std::vector<std::string> lines = {
      std::string("target ") + target + ", " + cache + " cache, " + arithmetic +
          " arithmetic",
      to_string(tasks) + " task" + (tasks == 1 ? "" : "s") + " of " + per_task +
          " (" + to_string(fewest_rows) + " to " + to_string(block_rows) +
          " rows), keys " +
          (splits == 1 ? std::string("in one walk")
                       : "split " + to_string(splits) + " ways, " +
                             to_string(chunk) + " each")};
  const bool decode = in_place && fewest_rows <= few_rows;
  if (decode) {
    lines.push_back("tasks of at most " + to_string(few_rows) +
                    " rows: K and V read in place, " + decode_backend +
                    (paced ? ", rows paced from memory" : ""));
  }
  if (!in_place || block_rows > few_rows) {
    lines.push_back(std::string(decode ? "larger tasks" : "tasks") +
                    ": tiles of K and V packed, " + tile_products);
  }
  lines.push_back("policy: " + ActivePolicySource());
  return lines;
}

AttentionPlanRecord& ThisThreadPlan() {
  thread_local AttentionPlanRecord record;
  return record;
}

}  // namespace internal
}  // namespace simdattn
