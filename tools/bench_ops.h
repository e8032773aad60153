// The ops `simdattn bench` knows, as a table: a name, a unit, the standard
// shapes, and how to build a timed workload and a correctness check for a
// shape. Adding an op (fused attention, KV-cache decode) is one more row in
// Ops() with a parse function: the driver, the output formats and the tests
// pick it up from the table.
#ifndef SIMDATTN_TOOLS_BENCH_OPS_H_
#define SIMDATTN_TOOLS_BENCH_OPS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tools/measure/workloads.h"

namespace simdattn {
namespace tools {

// What the rate of an op counts: FLOPs (compute-bound ops) or bytes read +
// written (memory-bound ones).
enum class Metric { kGflops, kGbPerSec };

// One op at one shape.
struct OpCase {
  std::string shape;  // As the table prints it; the op's parse accepts it.
  double work = 0;    // FLOPs or bytes per call, per the op's Metric.
  // A library's workload at a thread count; nullptr when it lacks the op.
  std::function<std::unique_ptr<measure::Workload>(measure::Library, int)> make;
  // Runs simdattn's op on random data (current target, current task arena)
  // and returns the worst |error| / allowed error over all outputs against a
  // float64 reference: <= 1 passes.
  std::function<double()> check;
};

struct OpSpec {
  std::string name;
  Metric metric;
  std::string shape_syntax;
  std::vector<std::string> standard_shapes;
  // Small, odd sizes (tails, several tiles) for --check without --shape.
  std::vector<std::string> check_shapes;
  // Throws std::invalid_argument for a malformed shape.
  std::function<OpCase(const std::string&)> parse;
};

const std::vector<OpSpec>& Ops();

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_BENCH_OPS_H_
