// `simdattn run`: a seed module on a PyTorch state_dict (safetensors) and a
// NumPy input, output written as .npy.
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "simdattn/attention.h"
#include "tools/commands.h"
#include "tools/io/module_spec.h"
#include "tools/io/npy.h"
#include "tools/io/safetensors.h"

namespace simdattn {
namespace tools {

void Run(const RunOptions& o) {
  // An unknown name is the user's first mistake to report, before any file.
  io::ParseModuleKind(o.module);
  const io::SafeTensors weights = io::SafeTensors::Load(o.weights);
  const io::NpyArray x = io::ReadNpy(o.input);
  if (x.shape.size() != 2 && x.shape.size() != 3) {
    throw std::runtime_error(o.input +
                             ": expected a (tokens, d_in) or (batch, "
                             "tokens, d_in) array, got " +
                             std::to_string(x.shape.size()) + " dimensions");
  }
  const bool batched = x.shape.size() == 3;
  const size_t batch = batched ? x.shape[0] : 1;
  const size_t tokens = x.shape[batched ? 1 : 0];

  io::ModuleSpec spec;
  spec.module = o.module;
  spec.d_in = x.shape.back();
  spec.num_heads = o.heads;
  spec.num_kv_heads = o.kv_heads;
  spec.dropout = o.dropout;
  spec = io::CompleteSpec(spec, weights);
  if (o.context_length != 0) spec.context_length = o.context_length;
  if (spec.context_length == 0) spec.context_length = tokens;
  if (o.qkv_bias && !spec.qkv_bias) {
    throw std::runtime_error(o.weights +
                             ": --qkv-bias given but the file has "
                             "no W_query.bias");
  }
  AttentionModule module = io::MakeModule(spec);
  io::KeptTensors kept;
  LoadOptions load;
  load.keep_dtype = o.keep_dtype;
  module.LoadStateDict(io::StateDictOf(weights, o.keep_dtype ? &kept : nullptr),
                       load);

  const size_t d_out = module.config().d_out();
  const size_t heads = module.config().num_heads;
  std::vector<float> y(batch * tokens * d_out);
  std::vector<float> attention;
  ForwardOptions options;
  options.training = o.train;
  options.dropout_key = {o.seed, 0};
  if (o.compute == "bf16") options.compute = ComputeType::kBFloat16;
  if (!o.attn_weights.empty()) {
    attention.resize(batch * heads * tokens * tokens);
    options.attention_weights =
        Tensor4::Dense(attention.data(), batch, heads, tokens, tokens);
  }
  module.Forward(ConstTensor3(x.data.data(), batch, tokens, spec.d_in),
                 Tensor3(y.data(), batch, tokens, d_out), options);

  std::vector<size_t> out_shape = x.shape;
  out_shape.back() = d_out;
  io::WriteNpy(o.output, out_shape, y.data());
  if (!o.attn_weights.empty()) {
    io::WriteNpy(o.attn_weights, {batch, heads, tokens, tokens},
                 attention.data());
  }
  std::printf("%s: (%zu, %zu, %zu) -> %s (weights: %zu bytes)\n",
              o.module.c_str(), batch, tokens, spec.d_in, o.output.c_str(),
              module.weight_bytes());
}

}  // namespace tools
}  // namespace simdattn
