// `simdattn bench`: the driver. For each op of the table (bench_ops.h), each
// shape, each thread count and each target, times simdattn (and, with
// --compare, oneDNN and OpenBLAS once per shape and thread count), relates
// every rate to this machine's measured peak and prints a table, CSV or the
// JSON records documented in README.md.
#include "tools/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "simdattn/targets.h"
#include "src/common/cpu.h"
#include "src/ops/policy.h"
#include "tbb/info.h"
#include "tbb/task_arena.h"
#include "tools/bench_ops.h"
#include "tools/join.h"
#include "tools/measure/peak.h"
#include "tools/measure/target_scope.h"
#include "tools/measure/timing.h"
#include "tools/measure/workloads.h"
#include "tools/progress.h"

namespace simdattn {
namespace tools {
namespace {

using measure::Library;

// --- What to run ----------------------------------------------------------

struct Selected {
  const OpSpec* op;
  std::vector<OpCase> cases;
};

std::vector<Selected> SelectOps(const BenchOptions& options) {
  std::vector<Selected> selected;
  const bool all = std::find(options.ops.begin(), options.ops.end(), "all") !=
                   options.ops.end();
  for (const OpSpec& op : Ops()) {
    if (all || std::find(options.ops.begin(), options.ops.end(), op.name) !=
                   options.ops.end()) {
      selected.push_back({&op, {}});
    }
  }
  // User shapes: "op=SHAPE", or "SHAPE" when a single op is selected.
  for (const std::string& item : options.shapes) {
    const size_t eq = item.find('=');
    Selected* target = nullptr;
    if (eq == std::string::npos) {
      if (selected.size() != 1) {
        throw std::invalid_argument("--shape " + item +
                                    ": name the op (e.g. matmul=" + item +
                                    ") when --op selects more than one");
      }
      target = &selected[0];
    } else {
      const std::string name = item.substr(0, eq);
      for (Selected& s : selected) {
        if (s.op->name == name) target = &s;
      }
      if (target == nullptr) {
        throw std::invalid_argument("--shape " + item + ": \"" + name +
                                    "\" is not an op that --op selects");
      }
    }
    target->cases.push_back(target->op->parse(
        eq == std::string::npos ? item : item.substr(eq + 1)));
  }
  for (Selected& s : selected) {
    // An op without user shapes keeps its own, even when others have some.
    if (!s.cases.empty()) continue;
    for (const std::string& shape :
         options.check ? s.op->check_shapes : s.op->standard_shapes) {
      s.cases.push_back(s.op->parse(shape));
    }
  }
  return selected;
}

// Whether an op's simdattn workload calls attention (LastAttentionPlan).
bool CallsAttention(const OpSpec& op) {
  return op.name == "attention" || op.name == "decode" || op.name == "serve" ||
         op.name == "mha";
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) {
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

std::string Upper(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return s;
}

// "best", "all" or names; unknown names are errors, names this CPU cannot
// run are skipped with a warning (so that one documented command runs on
// any machine), and an empty result is an error.
std::vector<std::string> SelectTargets(const std::string& spec) {
  const std::vector<std::string> supported = SupportedTargets();
  if (spec == "best") return {ActiveTarget()};
  if (spec == "all") return supported;
  const std::vector<std::string> compiled = CompiledTargets();
  std::vector<std::string> targets, skipped;
  std::stringstream list(spec);
  std::string name;
  while (std::getline(list, name, ',')) {
    name = Upper(name);
    if (std::find(compiled.begin(), compiled.end(), name) == compiled.end()) {
      throw std::invalid_argument("--targets: unknown target \"" + name +
                                  "\" (compiled: " + Join(compiled, ", ") +
                                  "; or best, all)");
    }
    if (std::find(supported.begin(), supported.end(), name) ==
        supported.end()) {
      skipped.push_back(name);
    } else if (std::find(targets.begin(), targets.end(), name) ==
               targets.end()) {
      targets.push_back(name);
    }
  }
  if (targets.empty()) {
    throw std::invalid_argument("--targets: this CPU supports none of " + spec +
                                " (supported: " + Join(supported, ", ") + ")");
  }
  if (!skipped.empty()) {
    std::fprintf(stderr,
                 "simdattn bench: skipping %s: not supported by this CPU "
                 "(supported: %s)\n",
                 Join(skipped, ", ").c_str(), Join(supported, ", ").c_str());
  }
  return targets;
}

// --- Records -----------------------------------------------------------------

struct Record {
  std::string op, shape, target, library;
  int threads = 0;
  Metric metric = Metric::kGflops;
  measure::Timing timing;
  double rate = 0;  // GFLOP/s or GB/s at the median.
  double peak = 0;  // The matching peak (FMA or copy loop).
  std::map<std::string, double> versus;  // Library name -> our rate / theirs.
  std::string plan;  // simdattn's LastAttentionPlan, lines joined by "; ".
};

struct CheckRecord {
  std::string op, shape, target;
  int threads = 0;
  double worst = 0;  // Worst |error| / bound.
  bool ok() const { return worst <= 1.0; }
};

nlohmann::ordered_json ToJson(const Record& r) {
  nlohmann::ordered_json j = {
      {"op", r.op},
      {"shape", r.shape},
      {"target", r.target},
      {"threads", r.threads},
      {"library", r.library},
      {"median_ms", r.timing.median_s * 1e3},
      {"min_ms", r.timing.min_s * 1e3},
      {"max_ms", r.timing.max_s * 1e3},
      {"spread", r.timing.Spread()},
      {"repetitions", r.timing.repetitions},
      {"calls_per_rep", r.timing.calls_per_rep},
      {"peak_fraction", r.peak > 0 ? r.rate / r.peak : 0.0}};
  if (r.metric == Metric::kGflops) {
    j["gflops"] = r.rate;
    j["peak_gflops"] = r.peak;
  } else {
    j["gb_per_s"] = r.rate;
    j["peak_gb_per_s"] = r.peak;
  }
  for (const auto& [library, ratio] : r.versus) j["vs_" + library] = ratio;
  if (!r.plan.empty()) j["plan"] = r.plan;
  return j;
}

nlohmann::ordered_json ToJson(const CheckRecord& r) {
  return {{"op", r.op},
          {"shape", r.shape},
          {"target", r.target},
          {"threads", r.threads},
          {"library", "simdattn"},
          {"check", true},
          {"error_ratio", r.worst},
          {"ok", r.ok()}};
}

std::string Fixed(double v, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, v);
  return buffer;
}

// 3 significant digits in ns, us, ms or s.
std::string Duration(double seconds) {
  const char* unit = "s";
  double v = seconds;
  if (seconds < 1e-6) {
    v = seconds * 1e9, unit = "ns";
  } else if (seconds < 1e-3) {
    v = seconds * 1e6, unit = "us";
  } else if (seconds < 1) {
    v = seconds * 1e3, unit = "ms";
  }
  return Fixed(v, v < 10 ? 2 : v < 100 ? 1 : 0) + " " + unit;
}

// Columns padded to their widest cell; the first `left` columns are
// left-aligned (names), the rest right-aligned (numbers).
std::string Columns(const std::vector<std::vector<std::string>>& rows,
                    size_t left) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (c < left ? row[c] + pad : pad + row[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

const char* Unit(Metric m) { return m == Metric::kGflops ? "GFLOP/s" : "GB/s"; }

std::string Table(const std::vector<Record>& records,
                  const std::vector<std::string>& compared) {
  std::vector<std::string> header = {"op",     "shape",  "threads", "library",
                                     "target", "median", "min",     "spread",
                                     "rate",   "of peak"};
  for (const std::string& name : compared) header.push_back("vs " + name);
  std::vector<std::vector<std::string>> rows = {header};
  for (const Record& r : records) {
    std::vector<std::string> row = {
        r.op,
        r.shape,
        std::to_string(r.threads),
        r.library,
        r.target,
        Duration(r.timing.median_s),
        Duration(r.timing.min_s),
        Fixed(100 * r.timing.Spread(), 1) + "%",
        Fixed(r.rate, r.rate < 10 ? 2 : 1) + " " + Unit(r.metric),
        r.peak > 0 ? Fixed(100 * r.rate / r.peak, 0) + "%" : "-"};
    for (const std::string& name : compared) {
      const auto it = r.versus.find(name);
      row.push_back(it == r.versus.end() ? "" : Fixed(it->second, 2) + "x");
    }
    rows.push_back(std::move(row));
  }
  return Columns(rows, 5);
}

std::string CheckTable(const std::vector<CheckRecord>& records) {
  std::vector<std::vector<std::string>> rows = {
      {"op", "shape", "target", "threads", "error/bound", "result"}};
  size_t failed = 0;
  for (const CheckRecord& r : records) {
    failed += !r.ok();
    rows.push_back({r.op, r.shape, r.target, std::to_string(r.threads),
                    Fixed(r.worst, 3), r.ok() ? "ok" : "MISMATCH"});
  }
  std::string out = Columns(rows, 4);
  out += failed == 0
             ? "all " + std::to_string(records.size()) + " checks passed\n"
             : std::to_string(failed) + " of " +
                   std::to_string(records.size()) + " checks FAILED\n";
  return out;
}

// The same keys as the JSON records; absent values are empty cells.
std::string Csv(const nlohmann::ordered_json& records) {
  std::vector<std::string> keys;
  for (const auto& r : records) {
    for (const auto& item : r.items()) {
      if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
        keys.push_back(item.key());
      }
    }
  }
  std::string out = Join(keys, ",") + "\n";
  for (const auto& r : records) {
    std::vector<std::string> cells;
    for (const std::string& k : keys) {
      if (!r.contains(k)) {
        cells.emplace_back();
      } else if (r[k].is_string()) {
        cells.push_back(r[k].get<std::string>());  // No commas in our names.
      } else {
        cells.push_back(r[k].dump());
      }
    }
    out += Join(cells, ",") + "\n";
  }
  return out;
}

// The chosen format to --out (or stdout); with --out, the table to stdout.
void Emit(const BenchOptions& options, const std::string& table,
          const nlohmann::ordered_json& records) {
  std::string formatted = table;
  if (options.format == "json") formatted = records.dump(2) + "\n";
  if (options.format == "csv") formatted = Csv(records);
  if (options.out.empty()) {
    std::fputs(formatted.c_str(), stdout);
    return;
  }
  std::ofstream file(options.out, std::ios::binary);
  file << formatted;
  file.close();
  if (!file) throw std::runtime_error(options.out + ": cannot write");
  std::fputs(table.c_str(), stdout);
}

// --- Running -----------------------------------------------------------------

int RunChecks(const BenchOptions& options, const std::vector<Selected>& ops,
              const std::vector<std::string>& targets,
              const std::vector<int>& threads) {
  size_t total = 0;
  for (const Selected& s : ops) total += s.cases.size();
  Progress progress(total * targets.size() * threads.size());
  std::vector<CheckRecord> records;
  for (const Selected& s : ops) {
    for (const OpCase& c : s.cases) {
      for (const std::string& target : targets) {
        const measure::TargetScope scope(target);
        for (int t : threads) {
          progress.Step(s.op->name + " " + c.shape + " " + target + " " +
                        std::to_string(t) + " threads");
          CheckRecord r{s.op->name, c.shape, target, t, 0};
          tbb::task_arena(t).execute([&] { r.worst = c.check(); });
          records.push_back(r);
        }
      }
    }
  }
  progress.Clear();
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const CheckRecord& r : records) json.push_back(ToJson(r));
  Emit(options, CheckTable(records), json);
  return std::all_of(records.begin(), records.end(),
                     [](const CheckRecord& r) { return r.ok(); })
             ? 0
             : 1;
}

int RunBenchmarks(const BenchOptions& options, const std::vector<Selected>& ops,
                  const std::vector<std::string>& targets,
                  const std::vector<int>& threads) {
  measure::TimingOptions timing;
  timing.repetitions = options.repetitions;
  timing.min_seconds = options.min_time_ms * 1e-3;
  timing.warmup_seconds = 2.5 * timing.min_seconds;

  std::vector<Library> compared;
  if (options.compare) {
    for (Library lib : {Library::kOneDnn, Library::kOpenBlas}) {
      if (measure::LibraryAvailable(lib)) {
        compared.push_back(lib);
      } else {
        std::fprintf(stderr,
                     "simdattn bench: %s was not found when simdattn was "
                     "built; not compared\n",
                     measure::LibraryName(lib));
      }
    }
  }
  // The machine peak (for the other libraries, which pick their own ISA) is
  // the best supported target's, requested or not.
  std::vector<std::string> peak_targets = targets;
  const std::string best = SupportedTargets().front();
  if (!compared.empty() &&
      std::find(targets.begin(), targets.end(), best) == targets.end()) {
    peak_targets.push_back(best);
  }

  size_t steps = 2 * peak_targets.size() * threads.size();
  for (const Selected& s : ops) {
    steps += s.cases.size() * threads.size();
  }
  Progress progress(steps);

  // (target, threads) -> GFLOP/s and GB/s.
  std::map<std::pair<std::string, int>, std::pair<double, double>> peaks;
  for (const std::string& target : peak_targets) {
    const measure::TargetScope scope(target);
    for (int t : threads) {
      progress.Step("peak FMA loop " + target + " " + std::to_string(t) +
                    " threads");
      const double gflops = measure::MeasureFmaGflops(t, timing);
      progress.Step("peak copy loop " + target + " " + std::to_string(t) +
                    " threads");
      peaks[{target, t}] = {gflops, measure::MeasureCopyGbPerSec(t, timing)};
    }
  }
  const auto peak_of = [&](const std::string& target, int t, Metric m) {
    const auto& p = peaks.at({target, t});
    return m == Metric::kGflops ? p.first : p.second;
  };

  // --plans: the table's policy and the plan file's, each simdattn cell
  // under both ("simdattn" and "simdattn+plans"), interleaved.
  std::optional<internal::Policy> table_policy, tuned_policy;
  if (!options.plans.empty()) {
    internal::ActivePolicy();  // SIMDATTN_PLANS, read once, goes first.
    table_policy = internal::PolicyFor(internal::ThisCpu());
    LoadPlans(options.plans);  // Throws for a file made elsewhere.
    tuned_policy = internal::ActivePolicy();
    LoadPlans("");
  }
  constexpr const char* kTuned = "simdattn+plans";
  std::vector<const internal::Policy*> policies = {nullptr};
  if (tuned_policy) policies = {&*table_policy, &*tuned_policy};

  std::vector<Record> records;
  for (const Selected& s : ops) {
    const Metric metric = s.op->metric;
    for (const OpCase& c : s.cases) {
      for (int t : threads) {
        progress.Step(s.op->name + " " + c.shape + " " + std::to_string(t) +
                      " threads");
        // Every implementation of the cell runs in one arena of t threads:
        // simdattn's kernels on it (a TBB build of oneDNN would too);
        // OpenMP's and OpenBLAS's thread counts are set by the workload on
        // this thread, which joins the arena in execute.
        tbb::task_arena arena(t);
        struct Entry {
          Library library;
          std::string target;  // simdattn's; empty for the libraries.
          std::unique_ptr<measure::Workload> workload;
          const internal::Policy* policy = nullptr;  // simdattn's, --plans.
        };
        std::vector<Entry> entries;
        for (const std::string& target : targets) {
          const measure::TargetScope scope(target);
          for (const internal::Policy* policy : policies) {
            entries.push_back({Library::kSimdattn, target, nullptr, policy});
            arena.execute([&] {
              entries.back().workload = c.make(Library::kSimdattn, t);
            });
          }
        }
        for (Library lib : compared) {
          std::unique_ptr<measure::Workload> w;
          arena.execute([&] { w = c.make(lib, t); });
          if (w) entries.push_back({lib, "", std::move(w)});
        }
        std::vector<measure::Contender> contenders;
        for (const Entry& e : entries) {
          measure::Contender contender;
          measure::Workload* w = e.workload.get();
          contender.run = [&arena, w](int64_t calls) {
            arena.execute([&] {
              for (int64_t i = 0; i < calls; ++i) w->Run();
            });
          };
          if (e.library == Library::kSimdattn) {
            // The target is pinned for each timed batch: from the untimed
            // before hook to the after hook.
            struct Scope {
              std::optional<measure::TargetScope> target;
              std::optional<internal::PolicyOverride> policy;
            };
            auto scope = std::make_shared<Scope>();
            contender.before = [scope, target = e.target, p = e.policy] {
              scope->target.emplace(target);
              if (p != nullptr) scope->policy.emplace(*p);
            };
            contender.after = [scope] {
              scope->policy.reset();
              scope->target.reset();
            };
          } else {
            // OpenBLAS's idle workers spin for tens of milliseconds after a
            // call (OpenMP's for less); on a 2-core machine they would
            // steal a core from the next contender.
            contender.after = [] {
              std::this_thread::sleep_for(std::chrono::milliseconds(100));
            };
          }
          contenders.push_back(std::move(contender));
        }
        const std::vector<measure::Timing> timings =
            measure::MeasureInterleaved(contenders, timing);

        const size_t first = records.size();
        for (size_t i = 0; i < entries.size(); ++i) {
          Record r;
          r.op = s.op->name;
          r.shape = c.shape;
          r.library = tuned_policy && entries[i].policy == &*tuned_policy
                          ? kTuned
                          : measure::LibraryName(entries[i].library);
          r.threads = t;
          r.metric = metric;
          r.timing = timings[i];
          r.rate = c.work / r.timing.median_s * 1e-9;
          const bool ours = entries[i].library == Library::kSimdattn;
          {
            const measure::TargetScope scope(entries[i].target);
            r.target = entries[i].workload->Impl();
          }
          r.peak = peak_of(ours ? entries[i].target : best, t, metric);
          if (ours && CallsAttention(*s.op)) {
            const measure::TargetScope scope(entries[i].target);
            std::optional<internal::PolicyOverride> policy;
            if (entries[i].policy != nullptr)
              policy.emplace(*entries[i].policy);
            arena.execute([&] {
              entries[i].workload->Run();
              r.plan = Joined(LastAttentionPlan());
            });
          }
          records.push_back(r);
        }
        for (size_t i = first; i < records.size(); ++i) {
          if (records[i].library != "simdattn") continue;
          for (size_t j = first; j < records.size(); ++j) {
            if (records[j].library == "simdattn") continue;
            records[i].versus[records[j].library] =
                records[i].rate / records[j].rate;
          }
        }
      }
    }
  }
  progress.Clear();

  std::string table = "simdattn " + std::string(Version()) +
                      " bench: " + std::to_string(options.repetitions) +
                      " repetitions of >= " + Fixed(options.min_time_ms, 0) +
                      " ms each; median per call, spread = (max - min) / "
                      "median\nrates: GFLOP/s of useful FLOPs (causal and "
                      "windowed attention: the visible pairs only, diagonal "
                      "included), "
                      "GB/s of bytes read + written\npeaks measured here (FMA "
                      "loop, copy loop):\n";
  std::vector<std::vector<std::string>> peak_rows;
  for (const auto& [key, value] : peaks) {
    peak_rows.push_back({"  " + key.first,
                         std::to_string(key.second) +
                             (key.second == 1 ? " thread" : " threads"),
                         Fixed(value.first, 1) + " GFLOP/s",
                         Fixed(value.second, 1) + " GB/s"});
  }
  std::vector<std::string> columns;
  for (Library lib : compared) columns.push_back(measure::LibraryName(lib));
  if (tuned_policy) columns.push_back(kTuned);
  table += Columns(peak_rows, 2) + "\n" + Table(records, columns);
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const Record& r : records) json.push_back(ToJson(r));
  Emit(options, table, json);
  return 0;
}

std::string ListOps() {
  std::string out;
  for (const OpSpec& op : Ops()) {
    out += op.name + " (" + Unit(op.metric) + "): " + op.shape_syntax +
           "\n  standard: " + Join(op.standard_shapes, " ") +
           "\n  --check:  " + Join(op.check_shapes, " ") + "\n";
  }
  return out;
}

}  // namespace

std::vector<int> ThreadCounts(const std::vector<int>& requested) {
  std::vector<int> threads = requested;
  if (threads.empty()) threads = {1, tbb::info::default_concurrency()};
  std::vector<int> unique;
  for (int t : threads) {
    if (std::find(unique.begin(), unique.end(), t) == unique.end()) {
      unique.push_back(t);
    }
  }
  return unique;
}

int Bench(const BenchOptions& options) {
  if (options.list) {
    std::fputs(ListOps().c_str(), stdout);
    return 0;
  }
  const std::vector<Selected> ops = SelectOps(options);
  const std::vector<std::string> targets = SelectTargets(options.targets);
  const std::vector<int> threads = ThreadCounts(options.threads);
  return options.check ? RunChecks(options, ops, targets, threads)
                       : RunBenchmarks(options, ops, targets, threads);
}

std::vector<std::string> PlanOf(const std::string& op_and_shape, int threads) {
  BenchOptions options;
  options.shapes = {op_and_shape};
  const size_t eq = op_and_shape.find('=');
  if (eq == std::string::npos) {
    throw std::invalid_argument(
        "--plan " + op_and_shape +
        ": expected op=SHAPE, e.g. decode=1x32x4096x128_kv8");
  }
  options.ops = {op_and_shape.substr(0, eq)};
  const std::vector<Selected> selected = SelectOps(options);
  if (selected.empty()) {
    throw std::invalid_argument("--plan " + op_and_shape + ": no op \"" +
                                options.ops[0] + "\"");
  }
  if (!CallsAttention(*selected[0].op)) return {};
  std::vector<std::string> plan;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    const std::unique_ptr<measure::Workload> w =
        selected[0].cases[0].make(Library::kSimdattn, threads);
    w->Run();
    plan = LastAttentionPlan();
  });
  return plan;
}

void AddBenchCommand(CLI::App& app, BenchOptions& options, int* exit_code) {
  std::vector<std::string> names;
  for (const OpSpec& op : Ops()) names.push_back(op.name);
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time every op on each SIMD target and thread count (beside oneDNN and "
      "OpenBLAS with --compare), or --check them against float64");
  names.push_back("all");
  cmd->add_option("--op", options.ops,
                  "Ops to run, comma-separated: " + Join(names, ", "))
      ->delimiter(',')
      ->check(CLI::IsMember(names));
  cmd->add_option("--shape", options.shapes,
                  "SHAPE, or op=SHAPE with several ops (see --list); "
                  "replaces that op's standard shapes")
      ->delimiter(',');
  cmd->add_option("--targets", options.targets,
                  "best (the dispatched one), all (every supported one) or "
                  "names, e.g. AVX2,AVX3; unsupported ones are skipped")
      ->capture_default_str();
  cmd->add_option("--threads", options.threads,
                  "Thread counts, e.g. 1,2 (default: 1 and all cores)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--compare", options.compare,
                "Also run oneDNN and OpenBLAS (when built with them)");
  cmd->add_option("--plans", options.plans,
                  "Also run simdattn under this plan file (simdattn tune) "
                  "beside the policy table's, interleaved: \"vs "
                  "simdattn+plans\" is the table's rate over the plan's");
  cmd->add_option("--format", options.format, "table, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json"}));
  cmd->add_option("--out", options.out,
                  "Write the --format output to FILE; the table still goes "
                  "to stdout");
  cmd->add_flag("--check", options.check,
                "Compare every op with a float64 reference on each target "
                "and thread count; exit 1 on a mismatch");
  cmd->add_flag("--list", options.list, "List the ops and their shapes");
  cmd->add_option("--reps", options.repetitions,
                  "Timed repetitions per measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--min-time", options.min_time_ms,
                  "Milliseconds each repetition lasts at least (small shapes "
                  "repeat calls)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60000.0));
  cmd->callback([&options, exit_code] { *exit_code = Bench(options); });
}

}  // namespace tools
}  // namespace simdattn
