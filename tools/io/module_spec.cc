#include "tools/io/module_spec.h"

#include <stdexcept>
#include <string>

namespace simdattn::io {

ModuleKind ParseModuleKind(const std::string& m) {
  if (m == "SimplifiedSelfAttention" || m == "simplified") {
    return ModuleKind::kSimplified;
  }
  if (m == "SelfAttention_v1" || m == "v1") return ModuleKind::kV1;
  if (m == "SelfAttention_v2" || m == "v2") return ModuleKind::kV2;
  if (m == "CausalAttention" || m == "causal") return ModuleKind::kCausal;
  if (m == "MultiHeadAttentionWrapper" || m == "wrapper") {
    return ModuleKind::kWrapper;
  }
  if (m == "MultiHeadAttention" || m == "mha") return ModuleKind::kMha;
  throw std::invalid_argument("unknown module '" + m +
                              "' (known: " + ModuleNames() + ")");
}

AttentionModule MakeModule(const ModuleSpec& s) {
  switch (ParseModuleKind(s.module)) {
    case ModuleKind::kSimplified:
      return SimplifiedSelfAttention(s.d_in);
    case ModuleKind::kV1:
      return SelfAttentionV1(s.d_in, s.d_out);
    case ModuleKind::kV2:
      return SelfAttentionV2(s.d_in, s.d_out, s.qkv_bias);
    case ModuleKind::kCausal:
      return CausalAttention(s.d_in, s.d_out, s.context_length, s.dropout,
                             s.qkv_bias);
    case ModuleKind::kWrapper:
      return MultiHeadAttentionWrapper(s.d_in, s.d_out, s.context_length,
                                       s.dropout, s.num_heads, s.qkv_bias);
    case ModuleKind::kMha: {
      MultiHeadAttentionConfig config;
      config.d_in = s.d_in;
      config.d_out = s.d_out;
      config.context_length = s.context_length;
      config.dropout = s.dropout;
      config.num_heads = s.num_heads;
      config.qkv_bias = s.qkv_bias;
      config.num_kv_heads = s.num_kv_heads;
      return MultiHeadAttention(config);
    }
  }
  throw std::logic_error("MakeModule: unhandled ModuleKind");
}

StateDict StateDictOf(const SafeTensors& file, KeptTensors* kept) {
  StateDict state_dict;
  for (const std::string& name : file.Names()) {
    const Tensor& t = file.Get(name);
    state_dict[name] = TensorRef{t.data.data(), t.shape};
    if (kept == nullptr) continue;
    if (t.dtype == "BF16") {
      std::vector<BFloat16>& bits = kept->bf16.emplace_back(t.data.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = ToBFloat16(t.data[i]);
      state_dict[name] = TensorRef{bits.data(), t.shape, DType::kBF16};
    } else if (t.dtype == "F16") {
      std::vector<Float16>& bits = kept->f16.emplace_back(t.data.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = ToFloat16(t.data[i]);
      state_dict[name] = TensorRef{bits.data(), t.shape, DType::kF16};
    }
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
  const ModuleKind kind = ParseModuleKind(spec.module);
  const bool wrapper = kind == ModuleKind::kWrapper;
  const std::string prefix = wrapper ? "heads.0." : "";
  if (kind == ModuleKind::kSimplified) return spec;
  if (kind == ModuleKind::kV1) {
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
