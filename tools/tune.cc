#include "tools/tune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "simdattn/targets.h"
#include "src/common/cpu.h"
#include "src/ops/policy.h"
#include "tbb/task_arena.h"
#include "tools/bench.h"
#include "tools/bench_ops.h"
#include "tools/join.h"
#include "tools/measure/timing.h"
#include "tools/measure/workloads.h"
#include "tools/progress.h"

namespace simdattn {
namespace tools {
namespace {

using internal::Policy;

// A knob, the values worth trying besides the table's, and the shapes
// (bench's op=SHAPE) whose speed it decides.
struct Question {
  const char* knob;
  std::vector<std::string> values;
  std::vector<std::string> shapes;
};

const std::vector<Question>& Questions() {
  static const std::vector<Question> questions = {
      {"matmul_task_tiles",
       {"4", "8", "16", "32"},
       {"matmul=256x256x256", "matmul=1024x1024x1024", "matmul=1024x768x2304",
        "matmul=1024x1024x64", "matmul=1024x768x768_bf16dot"}},
      {"matmul_panel_group",
       {"1", "2", "4"},
       {"matmul=256x256x256", "matmul=1024x1024x1024", "matmul=1024x768x2304",
        "matmul=1024x1024x64"}},
      {"pace_rows_from_memory",
       {"true", "false"},
       {"decode=8x12x4096x64_kvbf16_cold", "decode=8x12x4096x64_kvf16_cold",
        "decode=1x32x4096x128_kv8_kvq8_0_cold"}},
      {"direct_e4m3",
       {"true", "false"},
       {"decode=8x12x4096x64_kvfp8", "decode=8x12x4096x64_kvfp8_cold"}},
  };
  return questions;
}

OpCase CaseOf(const std::string& op_and_shape) {
  const size_t eq = op_and_shape.find('=');
  for (const OpSpec& op : Ops()) {
    if (eq != std::string::npos && op.name == op_and_shape.substr(0, eq)) {
      return op.parse(op_and_shape.substr(eq + 1));
    }
  }
  throw std::invalid_argument("tune --shape " + op_and_shape +
                              ": expected op=SHAPE, e.g. matmul=1024x768x768");
}

// The questions to ask: the named knobs' (all without names), on the given
// shapes where there are some.
std::vector<Question> Selected(const TuneOptions& options) {
  std::vector<Question> selected;
  for (const Question& q : Questions()) {
    if (options.knobs.empty() ||
        std::find(options.knobs.begin(), options.knobs.end(), q.knob) !=
            options.knobs.end()) {
      selected.push_back(q);
      if (!options.shapes.empty()) selected.back().shapes = options.shapes;
    }
  }
  for (const std::string& knob : options.knobs) {
    if (std::none_of(selected.begin(), selected.end(),
                     [&](const Question& q) { return knob == q.knob; })) {
      std::string names;
      for (const Question& q : Questions()) names += std::string(" ") + q.knob;
      throw std::invalid_argument("tune --knob " + knob +
                                  ": not a speed knob (they are:" + names +
                                  ")");
    }
  }
  for (const std::string& shape : options.shapes) CaseOf(shape);
  return selected;
}

// Each value's median time on one shape at `threads` threads, the values'
// batches interleaved (MeasureInterleaved), each under its policy.
std::vector<double> TimeValues(const Policy& table, const Question& q,
                               const std::vector<std::string>& values,
                               const std::string& shape, int threads,
                               const measure::TimingOptions& timing) {
  tbb::task_arena arena(threads);
  std::unique_ptr<measure::Workload> workload;
  arena.execute([&] {
    workload = CaseOf(shape).make(measure::Library::kSimdattn, threads);
  });
  std::vector<measure::Contender> contenders;
  for (const std::string& value : values) {
    Policy policy = table;
    internal::SetKnob(q.knob, value, &policy);
    auto scope = std::make_shared<std::optional<internal::PolicyOverride>>();
    measure::Contender c;
    c.run = [&arena, w = workload.get()](int64_t calls) {
      arena.execute([&] {
        for (int64_t i = 0; i < calls; ++i) w->Run();
      });
    };
    c.before = [scope, policy] { scope->emplace(policy); };
    c.after = [scope] { scope->reset(); };
    contenders.push_back(std::move(c));
  }
  std::vector<double> medians;
  for (const measure::Timing& t :
       measure::MeasureInterleaved(contenders, timing)) {
    medians.push_back(t.median_s);
  }
  return medians;
}

std::string Fixed(double x, int digits) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", digits, x);
  return text;
}

}  // namespace

int Tune(const TuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> threads = ThreadCounts(options.threads);
  measure::TimingOptions timing;
  timing.repetitions = options.repetitions;
  timing.min_seconds = options.min_time_ms / 1e3;

  const std::vector<Question> questions = Selected(options);
  // The table's policy, whatever SIMDATTN_PLANS holds: a tune starts over.
  const Policy table = internal::PolicyFor(internal::ThisCpu());
  size_t steps = 0;
  for (const Question& q : questions) steps += q.shapes.size();
  Progress progress(steps * threads.size());

  internal::PlanFile file;
  file.cpu = internal::ThisCpu().Summary();
  file.version = Version();
  std::printf(
      "tuning on %s, simdattn %s; per shape, each other value's speedup over "
      "the table's at %s threads\n",
      file.cpu.c_str(), file.version.c_str(), Join(threads, "/").c_str());
  for (const Question& q : questions) {
    // The table's value first, then the others.
    std::vector<std::string> values = {internal::KnobValue(table, q.knob)};
    for (const std::string& v : q.values) {
      if (v != values[0]) values.push_back(v);
    }
    // speedups[v]: the table's time over v's, per shape and thread count.
    std::vector<std::vector<double>> speedups(values.size());
    for (const std::string& shape : q.shapes) {
      for (int t : threads) {
        progress.Step(std::string(q.knob) + " " + shape + " " +
                      std::to_string(t) + " threads");
        const std::vector<double> s =
            TimeValues(table, q, values, shape, t, timing);
        for (size_t v = 0; v < values.size(); ++v) {
          speedups[v].push_back(s[0] / s[v]);
        }
      }
    }
    // The best value by geometric mean; another than the table's only
    // where it wins by the margin and loses nowhere by more.
    size_t best = 0;
    double best_mean = 1, best_worst = 1;
    for (size_t v = 1; v < values.size(); ++v) {
      double log_sum = 0;
      for (double x : speedups[v]) log_sum += std::log(x);
      const double mean = std::exp(log_sum / speedups[v].size());
      const double worst =
          *std::min_element(speedups[v].begin(), speedups[v].end());
      if (mean >= 1 + options.margin && worst >= 1 - options.margin &&
          mean > best_mean) {
        best = v, best_mean = mean, best_worst = worst;
      }
    }
    std::string evidence;
    if (best == 0) {
      std::string others;
      for (size_t v = 1; v < values.size(); ++v) {
        double log_sum = 0;
        for (double x : speedups[v]) log_sum += std::log(x);
        others += (v == 1 ? "" : ", ") + values[v] + " " +
                  Fixed(std::exp(log_sum / speedups[v].size()), 2) + "x";
      }
      evidence = "the table's; the others over it: " + others;
    } else {
      evidence = Fixed(best_mean, 2) + "x the table's " + values[0] +
                 " (geometric mean; worst " + Fixed(best_worst, 2) + "x)";
    }
    evidence += ", " + std::to_string(q.shapes.size()) + " shapes x " +
                std::to_string(threads.size()) + " thread counts";
    file.knobs.push_back({q.knob, values[best], evidence});
    progress.Clear();
    std::printf("  %-22s %-6s %s\n", q.knob, values[best].c_str(),
                evidence.c_str());
    // Each shape: the other values' speedups over the table's, by threads.
    for (size_t i = 0; i < q.shapes.size(); ++i) {
      std::string line = "      " + q.shapes[i] + ":";
      for (size_t v = 1; v < values.size(); ++v) {
        line += " " + values[v];
        for (size_t j = 0; j < threads.size(); ++j) {
          line += (j == 0 ? " " : "/") +
                  Fixed(speedups[v][i * threads.size() + j], 2);
        }
      }
      std::printf("%s\n", line.c_str());
    }
  }
  std::ofstream out(options.out, std::ios::binary);
  out << file.Format();
  if (!out.flush()) {
    throw std::runtime_error("tune: cannot write " + options.out);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("wrote %s in %.0f s: load it with SIMDATTN_PLANS=%s\n",
              options.out.c_str(), seconds, options.out.c_str());
  return 0;
}

void AddTuneCommand(CLI::App& app, TuneOptions& options, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Measure the policy's knobs on this machine and write a plan file "
      "(SIMDATTN_PLANS=file or simdattn::LoadPlans loads it)");
  cmd->add_option("--out", options.out, "plan file to write")
      ->capture_default_str();
  cmd->add_option("--threads", options.threads,
                  "thread counts, comma-separated (default: 1 and all)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--knob", options.knobs,
                  "speed knobs to tune, comma-separated (default: all)")
      ->delimiter(',');
  cmd->add_option("--shape", options.shapes,
                  "op=SHAPE (bench's shapes) to tune them on, comma-separated "
                  "(default: each knob's own)")
      ->delimiter(',');
  cmd->add_option("--reps", options.repetitions,
                  "timed repetitions per value, interleaved")
      ->check(CLI::Range(3, 100))
      ->capture_default_str();
  cmd->add_option("--min-time", options.min_time_ms,
                  "milliseconds per repetition")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([&options, exit_code] { *exit_code = Tune(options); });
}

}  // namespace tools
}  // namespace simdattn
