// Subcommands of the `simdattn` program.
#ifndef SIMDATTN_TOOLS_COMMANDS_H_
#define SIMDATTN_TOOLS_COMMANDS_H_

namespace simdattn {
namespace tools {

struct DemoOptions {
  bool skip_benchmark = false;
};
void Demo(const DemoOptions& options);

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_COMMANDS_H_
