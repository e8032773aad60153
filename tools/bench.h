// `simdattn bench`: every op at the issues' shapes (or the user's), on each
// requested SIMD target and thread count, beside oneDNN and OpenBLAS with
// --compare; or, with --check, every op against a float64 reference.
#ifndef SIMDATTN_TOOLS_BENCH_H_
#define SIMDATTN_TOOLS_BENCH_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace simdattn {
namespace tools {

struct BenchOptions {
  std::vector<std::string> ops = {"all"};
  // "SHAPE" (one op selected) or "op=SHAPE"; none: the op's standard shapes.
  std::vector<std::string> shapes;
  // "best" (the dispatched target), "all" (every supported one) or a list.
  std::string targets = "best";
  std::vector<int> threads;  // Empty: 1 and TBB's default concurrency.
  bool compare = false;
  std::string plans;             // A plan file to time beside the policy table.
  std::string format = "table";  // table, csv, json
  std::string out;               // File for --format; stdout gets the table.
  bool check = false;
  bool list = false;
  int repetitions = 5;
  double min_time_ms = 20;
};

// The thread counts to measure: `requested` without repeats, in order, or
// 1 and TBB's default concurrency.
std::vector<int> ThreadCounts(const std::vector<int>& requested);

// Runs the command; returns the exit code (1: a --check mismatch). Throws
// std::invalid_argument for bad shapes or targets, std::runtime_error when
// --out cannot be written.
int Bench(const BenchOptions& options);

// What simdattn runs for "op=SHAPE" (bench's shape syntax) on `threads`
// threads: one call, then LastAttentionPlan() (targets.h); empty for an op
// that calls no attention. Throws std::invalid_argument for a bad op or
// shape.
std::vector<std::string> PlanOf(const std::string& op_and_shape, int threads);

// Adds the `bench` subcommand and its flags; its callback stores the exit
// code of Bench in *exit_code.
void AddBenchCommand(CLI::App& app, BenchOptions& options, int* exit_code);

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_BENCH_H_
