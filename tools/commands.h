// Subcommands of the `simdattn` program.
#ifndef SIMDATTN_TOOLS_COMMANDS_H_
#define SIMDATTN_TOOLS_COMMANDS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace simdattn {
namespace tools {

struct DemoOptions {
  bool skip_benchmark = false;
};
void Demo(const DemoOptions& options);

struct RunOptions {
  std::string module;
  std::string weights;  // safetensors state_dict
  std::string input;    // .npy, float32 (tokens, d_in) or (b, tokens, d_in)
  std::string output;   // .npy
  std::string attn_weights;  // Optional .npy of (b, heads, tokens, tokens).
  size_t heads = 1;
  size_t kv_heads = 0;
  size_t context_length = 0;
  bool qkv_bias = false;
  bool train = false;
  bool keep_dtype = false;       // bf16/f16 projection weights stay 16-bit.
  std::string compute = "fp32";  // fp32, or bf16 (ForwardOptions::compute).
  float dropout = 0.0f;
  uint64_t seed = 0;
};
// Throws std::runtime_error (files) or std::invalid_argument (shapes).
void Run(const RunOptions& options);

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_COMMANDS_H_
