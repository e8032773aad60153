// How a module's PyTorch state_dict maps onto the engine's weights: the
// tensor names and shapes of each seed module, their initial distributions,
// and strict loading. The forward pipeline never sees names.
#ifndef SIMDATTN_SRC_ATTENTION_STATE_DICT_H_
#define SIMDATTN_SRC_ATTENTION_STATE_DICT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"
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
// f16 with LoadOptions::keep_dtype (MatMul widens it exactly as it reads),
// and packed for the products that use it (Packed).
class WeightMatrix {
 public:
  // Zeroed float storage for n elements.
  void Assign(size_t n) {
    storage_ = AlignedVector<float>(n, 0.0f);
    Changed();
  }
  ElementType type() const {
    return std::visit([](const auto& v) { return TypeOf(v.data()); }, storage_);
  }
  size_t bytes() const {
    return std::visit([](const auto& v) { return v.size() * sizeof(v[0]); },
                      storage_);
  }
  // The float storage (type() kF32: Widen first), to write the weights.
  float* floats() {
    Changed();
    return std::get<AlignedVector<float>>(storage_).data();
  }
  // Back to float (exact), or to `type` (kBF16, kF16: exact for weights that
  // came from that type).
  void Widen();
  void Narrow(ElementType type);
  // f(op(B)) for MatMul's B operand with op(B) = W^T, W (rows, cols): for
  // kBFloat16 arithmetic W packed for the active target (PackedMatrix: on
  // first use, allocating 2 bytes per weight, kept until the weights
  // change), else W where it lies (a MatrixView of its type): float32
  // products gain nothing from a copy, nor does the bf16 fallback over bf16
  // weights. Safe from many threads at once.
  template <typename F>
  void Product(size_t rows, size_t cols, ComputeType compute,
               const F& f) const {
    if (compute == ComputeType::kBFloat16 &&
        (NativeBFloat16Dot() || type() != ElementType::kBF16)) {
      return f(*Packed(rows, cols, compute));
    }
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

  // W packed for `compute` on the active target (see Product).
  std::shared_ptr<const PackedMatrix> Packed(size_t rows, size_t cols,
                                             ComputeType compute) const;
  // Drops the packed forms: the weights are about to change.
  void Changed();

  std::variant<AlignedVector<float>, AlignedVector<BFloat16>,
               AlignedVector<Float16>>
      storage_;
  // Packed forms, at most one per compute type that is current() (a
  // target change leaves stale ones, dropped as their replacements come).
  struct Packs {
    std::mutex mutex;
    std::vector<std::shared_ptr<const PackedMatrix>> list;
  };
  mutable std::unique_ptr<Packs> packs_ = std::make_unique<Packs>();
};

// The engine's weights: Q, K and V rows stacked, (q_dim + 2 kv_dim, d_in);
// the output projection (y_features, d_out); the sink logits (num_heads).
// Biases and sinks are empty when absent and always float; the two matrices
// share one element type.
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
