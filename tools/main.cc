// The `simdattn` program: `info` describes the machine and the build, `demo`
// walks the seeds' attention ladder on their toy input.
#include <cstdio>
#include <exception>
#include <string>

#include "CLI/CLI.hpp"
#include "simdattn/targets.h"
#include "tbb/info.h"
#include "tools/commands.h"

namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : " ") + s;
  return out;
}

void Info() {
  std::printf("simdattn %s\n", simdattn::Version());
  std::printf("compiled targets:  %s\n", Join(simdattn::CompiledTargets()).c_str());
  std::printf("supported on CPU:  %s\n", Join(simdattn::SupportedTargets()).c_str());
  std::printf("dispatch picks:    %s\n", simdattn::ActiveTarget().c_str());
  std::printf("TBB threads:       %d\n", tbb::info::default_concurrency());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"simdattn: SIMD CPU kernels for transformer attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(simdattn::Version()));

  app.add_subcommand("info", "SIMD targets compiled, supported and dispatched; threads")
      ->callback(Info);

  simdattn::tools::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo", "The seeds' attention ladder on their toy input, then a short benchmark");
  demo_cmd->add_flag("--no-bench", demo.skip_benchmark,
                     "Skip the MultiHeadAttention benchmark");
  demo_cmd->callback([&] { simdattn::tools::Demo(demo); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simdattn: %s\n", e.what());
    return 1;
  }
  return 0;
}
