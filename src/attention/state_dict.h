// How a module's PyTorch state_dict maps onto the engine's weights: the
// tensor names and shapes of each seed module, their initial distributions,
// and strict loading. The forward pipeline never sees names.
#ifndef SIMDATTN_SRC_ATTENTION_STATE_DICT_H_
#define SIMDATTN_SRC_ATTENTION_STATE_DICT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "src/common/aligned_vector.h"

namespace simdattn {
namespace internal {

// The naming schemes of the seed modules' state_dicts.
enum class StateDictLayout : int {
  kNone,       // No tensors (SimplifiedSelfAttention).
  kParameter,  // W_query, W_key, W_value: (d_in, d_out) nn.Parameters.
  kLinear,     // W_query.weight, ... (+ .bias, out_proj.*, mask): nn.Linear.
  kHeads,      // heads.h.W_query.weight, ..., heads.h.mask: one per head.
};

// The engine's weights: Q, K and V rows stacked, (q_dim + 2 kv_dim, d_in);
// the output projection (d_out, d_out); the sink logits (num_heads). Biases
// and sinks are empty when absent.
struct ModuleWeights {
  AlignedVector<float> w_qkv, w_out;  // Read in place by MatMul: aligned.
  std::vector<float> b_qkv, b_out, sinks;
  // LoadOptions::keep_dtype: w_qkv and w_out held in 16 bits instead (the
  // float vectors then empty), in the vectors of `dtype`.
  DType dtype = DType::kF32;
  AlignedVector<BFloat16> w_qkv_bf16, w_out_bf16;
  AlignedVector<Float16> w_qkv_f16, w_out_f16;
};

// One tensor of the state_dict and where its values live in the weights.
struct Slot {
  enum class Kind { kWeight, kTransposedWeight, kBias, kCausalMask };
  std::string name;
  Kind kind;
  std::vector<size_t> shape;  // PyTorch's shape.
  float* destination;         // Row-major (out, in) weights; nullptr for masks.
  float init_low, init_high;  // PyTorch's initial distribution U(low, high).
  // A buffer (the causal mask): derived from the config, so optional.
  bool buffer() const { return kind == Kind::kCausalMask; }
};

// The state_dict of `config` in `layout`, in PyTorch's order, pointing into
// `weights` (float storage, sized for config); null: names and shapes only
// (no destinations).
std::vector<Slot> StateDictSlots(StateDictLayout layout,
                                 const AttentionConfig& config,
                                 ModuleWeights* weights);

// Copies `state_dict` into the slots' destinations, strictly: an unexpected,
// missing (buffers excepted), misshapen or null tensor, or a mask buffer
// other than triu(ones, 1), throws std::invalid_argument starting with
// `module`, and then no weight has changed.
void LoadSlots(const char* module, const std::vector<Slot>& slots,
               const StateDict& state_dict);

// PyTorch's initial distributions drawn from Philox with `seed`: element e
// of slot s takes word e % 4 of counter (e / 4, e >> 34, s, 0).
void InitializeSlots(const std::vector<Slot>& slots, uint64_t seed);

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_ATTENTION_STATE_DICT_H_
