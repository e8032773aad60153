#include "tools/io/module_spec.h"

#include <stdexcept>
#include <string>

namespace simdattn::io {

AttentionModule MakeModule(const ModuleSpec& s) {
  const std::string& m = s.module;
  if (m == "SimplifiedSelfAttention" || m == "simplified") {
    return SimplifiedSelfAttention(s.d_in);
  }
  if (m == "SelfAttention_v1" || m == "v1") {
    return SelfAttentionV1(s.d_in, s.d_out);
  }
  if (m == "SelfAttention_v2" || m == "v2") {
    return SelfAttentionV2(s.d_in, s.d_out, s.qkv_bias);
  }
  if (m == "CausalAttention" || m == "causal") {
    return CausalAttention(s.d_in, s.d_out, s.context_length, s.dropout,
                           s.qkv_bias);
  }
  if (m == "MultiHeadAttentionWrapper" || m == "wrapper") {
    return MultiHeadAttentionWrapper(s.d_in, s.d_out, s.context_length,
                                     s.dropout, s.num_heads, s.qkv_bias);
  }
  if (m == "MultiHeadAttention" || m == "mha") {
    return MultiHeadAttention(s.d_in, s.d_out, s.context_length, s.dropout,
                              s.num_heads, s.qkv_bias, 0, s.num_kv_heads);
  }
  throw std::invalid_argument("unknown module '" + m + "' (known: " +
                              ModuleNames() + ")");
}

StateDict StateDictOf(const SafeTensors& file) {
  StateDict state_dict;
  for (const std::string& name : file.Names()) {
    const Tensor& t = file.Get(name);
    state_dict[name] = TensorRef{t.data.data(), t.shape};
  }
  return state_dict;
}

ModuleSpec CompleteSpec(ModuleSpec spec, const SafeTensors& file) {
  const auto require = [&](const std::string& name, size_t rank) {
    const Tensor* t = file.Find(name);
    if (t == nullptr || t->shape.size() != rank) {
      throw std::runtime_error(file.path() + ": no " + std::to_string(rank) +
                               "-d tensor '" + name + "' for module " +
                               spec.module);
    }
    return t->shape;
  };
  const bool v1 = spec.module == "SelfAttention_v1" || spec.module == "v1";
  const bool wrapper =
      spec.module == "MultiHeadAttentionWrapper" || spec.module == "wrapper";
  const bool simplified =
      spec.module == "SimplifiedSelfAttention" || spec.module == "simplified";
  const std::string prefix = wrapper ? "heads.0." : "";
  if (simplified) return spec;
  if (v1) {
    spec.d_out = require("W_query", 2)[1];
    return spec;
  }
  spec.d_out = require(prefix + "W_query.weight", 2)[0];
  spec.qkv_bias = file.Find(prefix + "W_query.bias") != nullptr;
  if (const Tensor* mask = file.Find(prefix + "mask")) {
    if (!mask->shape.empty()) spec.context_length = mask->shape[0];
  }
  if (wrapper) {
    spec.num_heads = 0;
    while (file.Find("heads." + std::to_string(spec.num_heads) +
                     ".W_query.weight")) {
      ++spec.num_heads;
    }
  }
  return spec;
}

const char* ModuleNames() {
  return "SimplifiedSelfAttention|simplified, SelfAttention_v1|v1, "
         "SelfAttention_v2|v2, CausalAttention|causal, "
         "MultiHeadAttentionWrapper|wrapper, MultiHeadAttention|mha";
}

}  // namespace simdattn::io
