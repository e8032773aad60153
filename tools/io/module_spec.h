// Builds the seed modules by their PyTorch class names and feeds them
// state_dicts read from safetensors files: what `simdattn run` and the golden
// tests share.
#ifndef SIMDATTN_TOOLS_IO_MODULE_SPEC_H_
#define SIMDATTN_TOOLS_IO_MODULE_SPEC_H_

#include <cstddef>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "tools/io/safetensors.h"

namespace simdattn::io {

// The seeds' constructor arguments; which ones a module reads depends on it.
struct ModuleSpec {
  // PyTorch class name ("SelfAttention_v1", "MultiHeadAttention", ...) or a
  // short alias ("simplified", "v1", "v2", "causal", "wrapper", "mha").
  std::string module;
  size_t d_in = 0;
  size_t d_out = 0;
  size_t context_length = 0;
  size_t num_heads = 1;
  size_t num_kv_heads = 0;  // 0: num_heads.
  float dropout = 0.0f;
  bool qkv_bias = false;
};

// The seed module classes.
enum class ModuleKind { kSimplified, kV1, kV2, kCausal, kWrapper, kMha };

// Resolves ModuleSpec::module; throws std::invalid_argument naming the known
// names for anything else. Cheap: callers validate a name with it before
// reading any file.
ModuleKind ParseModuleKind(const std::string& name);

// Throws std::invalid_argument for an unknown module name or bad arguments.
AttentionModule MakeModule(const ModuleSpec& spec);

// BF16 and F16 tensors of a file in their own type, rounded back (exactly)
// from the floats the file was read as.
struct KeptTensors {
  std::vector<std::vector<BFloat16>> bf16;
  std::vector<std::vector<Float16>> f16;
};

// References to the tensors of `file` (which must outlive the result), as
// floats; with `kept`, its BF16 and F16 tensors in their type, held there.
StateDict StateDictOf(const SafeTensors& file, KeptTensors* kept = nullptr);

// Fills in d_out, qkv_bias, context_length (from the mask buffer) and, for
// the wrapper, num_heads from a state_dict's names and shapes; `spec` brings
// module, d_in, and num_heads for MultiHeadAttention. Throws
// std::invalid_argument for an unknown module name, std::runtime_error naming
// the file when it lacks the module's tensors.
ModuleSpec CompleteSpec(ModuleSpec spec, const SafeTensors& file);

// Names accepted by ModuleSpec::module, for help texts.
const char* ModuleNames();

}  // namespace simdattn::io

#endif  // SIMDATTN_TOOLS_IO_MODULE_SPEC_H_
