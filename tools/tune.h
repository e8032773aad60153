// `simdattn tune`: measures the policy's knobs (src/ops/policy.h) on the
// machine it runs on, over the shapes each knob changes, and writes a plan
// file (PlanFile) that LoadPlans or SIMDATTN_PLANS loads. Every knob leaves
// results bit-identical, so a plan changes speed only.
#ifndef SIMDATTN_TOOLS_TUNE_H_
#define SIMDATTN_TOOLS_TUNE_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace simdattn {
namespace tools {

struct TuneOptions {
  std::string out = "simdattn-plans.txt";
  std::vector<int> threads;         // Empty: 1 and TBB's default concurrency.
  std::vector<std::string> knobs;   // Empty: every speed knob.
  std::vector<std::string> shapes;  // op=SHAPE; empty: each knob's own.
  int repetitions = 5;              // Per candidate, interleaved.
  double min_time_ms = 20;
  // A value other than the table's is taken only where it is this much
  // faster over its shapes (geometric mean) and no shape runs slower than
  // the table's by more than this.
  double margin = 0.03;
};

// Measures, prints each knob's choice, writes options.out; returns the exit
// code. Throws std::invalid_argument for an unknown knob or a bad shape,
// std::runtime_error when the file cannot be written.
int Tune(const TuneOptions& options);

void AddTuneCommand(CLI::App& app, TuneOptions& options, int* exit_code);

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_TUNE_H_
