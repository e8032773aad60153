// The `simdattn` program: `info` describes the machine and the build, `demo`
// walks the seeds' attention ladder on their toy input, `run` runs a module
// on PyTorch files, `bench` measures and checks the kernels.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "simdattn/element.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tbb/info.h"
#include "tools/bench.h"
#include "tools/commands.h"
#include "tools/io/module_spec.h"
#include "tools/join.h"
#include "tools/tune.h"

namespace {

using simdattn::tools::Join;

// Messages (CLI11's included) as one line: newlines become spaces.
std::string OneLine(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!message.empty() && message.back() == ' ') message.pop_back();
  return message;
}

void Info() {
  std::printf("simdattn %s\n", simdattn::Version());
  std::printf("compiled targets:  %s\n",
              Join(simdattn::CompiledTargets(), " ").c_str());
  std::printf("supported on CPU:  %s\n",
              Join(simdattn::SupportedTargets(), " ").c_str());
  std::printf("dispatch picks:    %s\n", simdattn::ActiveTarget().c_str());
  std::printf(
      "bf16 arithmetic:   %s\n",
      simdattn::NativeBFloat16Dot()
          ? (std::string("native (") + simdattn::BFloat16DotKernel() + ")")
                .c_str()
          : "float32 kernel on bf16-rounded operands");
  // Types by their traits: every cache type, and those kInt8 reads.
  std::string cache_types, int8_scores;
  for (unsigned t = 1; t <= static_cast<unsigned>(simdattn::kLastElementType);
       ++t) {
    const simdattn::ElementTraits traits =
        simdattn::ElementTraitsOf(static_cast<simdattn::ElementType>(t));
    cache_types += std::string(cache_types.empty() ? "" : " ") + traits.name;
    if (traits.int8_scores) {
      int8_scores += std::string(int8_scores.empty() ? "" : " ") + traits.name;
    }
  }
  std::printf("cache types:       f32 %s\n", cache_types.c_str());
  std::printf("int8 scores:       %s\n", int8_scores.c_str());
  std::printf("TBB threads:       %d\n", tbb::info::default_concurrency());
  std::printf("CPU:               %s\n", simdattn::CpuSummary().c_str());
  const std::vector<std::string> rules = simdattn::PolicyRules();
  std::printf("policy rules:      %s\n", rules.empty() ? "none apply" : "");
  for (const std::string& rule : rules) std::printf("  %s\n", rule.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"simdattn: SIMD CPU kernels for transformer attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(simdattn::Version()));

  std::vector<std::string> plans;
  int plan_threads = 1;
  CLI::App* info_cmd = app.add_subcommand(
      "info", "SIMD targets compiled, supported and dispatched; threads");
  info_cmd->add_option(
      "--plan", plans,
      "op=SHAPE (bench's shapes): also run it once and print what ran: "
      "tasks, key splits, products (LastAttentionPlan)");
  info_cmd->add_option("--threads", plan_threads, "threads for --plan")
      ->check(CLI::PositiveNumber);
  info_cmd->callback([&] {
    Info();
    for (const std::string& plan : plans) {
      const std::vector<std::string> lines =
          simdattn::tools::PlanOf(plan, plan_threads);
      std::printf("plan of %s, %d thread%s:%s\n", plan.c_str(), plan_threads,
                  plan_threads == 1 ? "" : "s",
                  lines.empty() ? " no attention call" : "");
      for (const std::string& line : lines) std::printf("  %s\n", line.c_str());
    }
  });

  simdattn::tools::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo",
      "The seeds' attention ladder on their toy input, then a short benchmark");
  demo_cmd->add_flag("--no-bench", demo.skip_benchmark,
                     "Skip the MultiHeadAttention benchmark");
  demo_cmd->callback([&] { simdattn::tools::Demo(demo); });

  simdattn::tools::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Run a seed module on a PyTorch state_dict and a .npy input");
  run_cmd->add_option("--module", run.module, simdattn::io::ModuleNames())
      ->required();
  run_cmd->add_option("--weights", run.weights, "state_dict as .safetensors")
      ->required();
  run_cmd
      ->add_option("--input", run.input,
                   "float32 .npy, (T, d_in) or (b, T, d_in)")
      ->required();
  run_cmd->add_option("--output", run.output, ".npy to write")->required();
  run_cmd->add_option(
      "--attn-weights", run.attn_weights,
      ".npy to write the (b, heads, T, T) attention weights to");
  run_cmd->add_option("--heads", run.heads, "MultiHeadAttention's num_heads")
      ->check(CLI::PositiveNumber);
  run_cmd->add_option("--kv-heads", run.kv_heads,
                      "key/value heads (grouped-query attention)");
  run_cmd->add_option("--context-length", run.context_length,
                      "default: the mask buffer's size, else T");
  run_cmd->add_flag("--qkv-bias", run.qkv_bias, "require W_*.bias in the file");
  run_cmd->add_flag("--train", run.train, "training mode: dropout on");
  run_cmd->add_flag("--keep-dtype", run.keep_dtype,
                    "keep BF16/F16 projection weights in 16 bits (half the "
                    "memory; the same results as widened)");
  run_cmd
      ->add_option("--compute", run.compute,
                   "arithmetic: fp32 (PyTorch's), or bf16 (operands rounded "
                   "to bf16, float32 sums; fast where the CPU has bf16 "
                   "instructions, see `simdattn info`)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  run_cmd->add_option("--dropout", run.dropout, "dropout probability")
      ->check(CLI::Range(0.0f, 1.0f));
  run_cmd->add_option("--seed", run.seed, "dropout seed");
  run_cmd->callback([&] { simdattn::tools::Run(run); });

  simdattn::tools::BenchOptions bench;
  int exit_code = 0;
  simdattn::tools::AddBenchCommand(app, bench, &exit_code);
  simdattn::tools::TuneOptions tune;
  simdattn::tools::AddTuneCommand(app, tune, &exit_code);

  // Usage errors, bad files and bad shapes: one line on stderr, exit code 2
  // (not CLI11's own codes, which differ by kind of usage error).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" that succeed.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e);
    }
    std::fprintf(stderr, "simdattn: %s (see --help)\n",
                 OneLine(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simdattn: %s\n", OneLine(e.what()).c_str());
    return 2;
  }
  return exit_code;
}
