// How a module's PyTorch state_dict maps onto the engine's weights: the
// tensor names and shapes of each seed module, their initial distributions,
// and strict loading. The forward pipeline never sees names.
#ifndef SIMDATTN_SRC_ATTENTION_STATE_DICT_H_
#define SIMDATTN_SRC_ATTENTION_STATE_DICT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
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
  kLlama,      // q_proj.weight, ... (+ .bias), o_proj.*: Hugging Face's.
};

// A weight matrix, row-major, held in one element type: float, or bf16 or
// f16 with LoadOptions::keep_dtype (MatMul widens it exactly as it reads).
// Aligned to a cache line: MatMul reads it in place.
class WeightMatrix {
 public:
  // Zeroed float storage for n elements.
  void Assign(size_t n) { storage_ = AlignedVector<float>(n, 0.0f); }
  ElementType type() const {
    return std::visit([](const auto& v) { return TypeOf(v.data()); }, storage_);
  }
  size_t bytes() const {
    return std::visit([](const auto& v) { return v.size() * sizeof(v[0]); },
                      storage_);
  }
  // The float storage (type() kF32: Widen first).
  float* floats() { return std::get<AlignedVector<float>>(storage_).data(); }
  // Back to float (exact), or to `type` (kBF16, kF16: exact for weights that
  // came from that type).
  void Widen();
  void Narrow(ElementType type);
  // f(MatrixView<const T>(rows, cols)) over the storage, whatever its T.
  template <typename F>
  void View(size_t rows, size_t cols, const F& f) const {
    std::visit(
        [&](const auto& v) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
          f(MatrixView<const T>(v.data(), rows, cols));
        },
        storage_);
  }

 private:
  static ElementType TypeOf(const float*) { return ElementType::kF32; }
  static ElementType TypeOf(const BFloat16*) { return ElementType::kBF16; }
  static ElementType TypeOf(const Float16*) { return ElementType::kF16; }

  std::variant<AlignedVector<float>, AlignedVector<BFloat16>,
               AlignedVector<Float16>>
      storage_;
};

// The engine's weights: Q, K and V rows stacked, (q_dim + 2 kv_dim, d_in);
// the output projection (y_features, d_out); the sink logits (num_heads). Biases
// and sinks are empty when absent and always float; the two matrices share
// one element type.
struct ModuleWeights {
  WeightMatrix w_qkv, w_out;
  std::vector<float> b_qkv, b_out, sinks;
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
