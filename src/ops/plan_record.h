// What the calling thread's last attention call ran: AttendAll fills it (a
// few stores a call), LastAttentionPlan (targets.h) formats it on request,
// so that a report states what it measured. Internal.
#ifndef SIMDATTN_SRC_OPS_PLAN_RECORD_H_
#define SIMDATTN_SRC_OPS_PLAN_RECORD_H_

#include <cstddef>
#include <string>
#include <vector>

namespace simdattn {
namespace internal {

struct AttentionPlanRecord {
  const char* target = nullptr;  // Highway's name; null before any call.
  const char* cache = nullptr;   // The element type's name.
  const char* arithmetic = nullptr;
  // Tasks of at most few_rows query rows read K and V where they lie by
  // the decode backend (where in_place: no input is rounded first); others
  // pack tiles for the tile products.
  size_t few_rows = 0;
  bool in_place = false;
  const char* decode_backend = nullptr;
  const char* tile_products = nullptr;
  bool paced = false;  // Decode's rows from memory asked for at its pace.
  // PlanTasks': query heads x tokens per task, tasks, key splits of chunk
  // keys; the fewest and the most rows a task holds.
  size_t task_heads = 0, task_tokens = 0, tasks = 0, splits = 0, chunk = 0;
  size_t fewest_rows = 0, block_rows = 0;

  // One line per decision, empty before any call.
  std::vector<std::string> Lines() const;
};

// The calling thread's record.
AttentionPlanRecord& ThisThreadPlan();

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_OPS_PLAN_RECORD_H_
