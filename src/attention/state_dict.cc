#include "src/attention/state_dict.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "simdattn/random.h"
#include "src/common/check.h"
#include "src/common/element.h"

namespace simdattn {
namespace internal {

void WeightMatrix::Changed() {
  const std::lock_guard<std::mutex> lock(packs_->mutex);
  packs_->list.clear();
}

std::shared_ptr<const PackedMatrix> WeightMatrix::Packed(
    size_t rows, size_t cols, ComputeType compute) const {
  const auto find = [&]() -> std::shared_ptr<const PackedMatrix> {
    for (const auto& packed : packs_->list) {
      if (packed->compute() == compute && packed->current()) return packed;
    }
    return nullptr;
  };
  {
    const std::lock_guard<std::mutex> lock(packs_->mutex);
    if (auto packed = find()) return packed;
  }
  // Packed outside the lock: packing runs parallel tasks, and a thread
  // waiting in them may take another task that comes here.
  MatMulOptions options;
  options.transpose_b = Transpose::kYes;
  options.compute = compute;
  auto packed = std::visit(
      [&](const auto& v) {
        using T = std::remove_cv_t<std::remove_reference_t<decltype(v[0])>>;
        return std::make_shared<const PackedMatrix>(
            MatrixView<const T>(v.data(), rows, cols), options);
      },
      storage_);
  const std::lock_guard<std::mutex> lock(packs_->mutex);
  if (auto raced = find()) return raced;  // Another thread packed it first.
  auto& list = packs_->list;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const auto& p) {
                              return p->compute() == compute && !p->current();
                            }),
             list.end());
  list.push_back(packed);
  return packed;
}

void WeightMatrix::Widen() {
  Changed();
  if (type() == ElementType::kF32) return;
  AlignedVector<float> widened;
  std::visit(
      [&](const auto& v) {
        widened.resize(v.size());
        for (size_t i = 0; i < v.size(); ++i) widened[i] = WidenAt(v.data(), i);
      },
      storage_);
  storage_ = std::move(widened);
}

void WeightMatrix::Narrow(ElementType type) {
  Changed();
  const AlignedVector<float>& from = std::get<AlignedVector<float>>(storage_);
  const auto narrowed = [&](auto convert) {
    AlignedVector<decltype(convert(0.0f))> to(from.size());
    for (size_t i = 0; i < from.size(); ++i) to[i] = convert(from[i]);
    return to;
  };
  if (type == ElementType::kBF16) {
    storage_ = narrowed(ToBFloat16);
  } else if (type == ElementType::kF16) {
    storage_ = narrowed(ToFloat16);
  }
}
namespace {

std::string ShapeToString(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

size_t Elements(const Slot& slot) {
  size_t n = 1;
  for (size_t d : slot.shape) n *= d;
  return n;
}

// Element i of a tensor, widened to float.
float Element(const TensorRef& t, size_t i) {
  return VisitElementType(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return WidenAt(static_cast<const T*>(t.data), i);
  });
}

void CheckCausalMask(const char* module, const std::string& name,
                     const TensorRef& t) {
  const size_t n = t.shape[0];
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const float expected = j > i ? 1.0f : 0.0f;
      const float value = Element(t, i * n + j);
      SIMDATTN_REQUIRE(value == expected, module, "buffer '", name,
                       "' is not the causal mask triu(ones, diagonal=1): (", i,
                       ", ", j, ") is ", value);
    }
  }
}

}  // namespace

std::vector<Slot> StateDictSlots(StateDictLayout layout,
                                 const AttentionConfig& c,
                                 ModuleWeights* weights) {
  // Where a tensor goes: `offset` floats into one of the weights' vectors.
  const auto at = [weights](auto ModuleWeights::*member,
                            size_t offset) -> float* {
    if (weights == nullptr) return nullptr;
    if constexpr (std::is_same_v<decltype(weights->*member), WeightMatrix&>) {
      return (weights->*member).floats() + offset;
    } else {
      return (weights->*member).data() + offset;
    }
  };
  std::vector<Slot> slots;
  const size_t q_dim = c.num_heads * c.head_dim;
  const size_t kv_dim = c.num_kv_heads * c.head_dim;
  const float linear = 1.0f / std::sqrt(static_cast<float>(c.d_in));
  const char* const kProjections[3] = {"W_query", "W_key", "W_value"};
  const size_t rows[3] = {q_dim, kv_dim, kv_dim};
  const size_t first_row[3] = {0, q_dim, q_dim + kv_dim};
  const std::vector<size_t> mask_shape = {c.context_length, c.context_length};
  switch (layout) {
    case StateDictLayout::kNone:
      break;
    case StateDictLayout::kParameter:
      for (int p = 0; p < 3; ++p) {
        slots.push_back({kProjections[p],
                         Slot::Kind::kTransposedWeight,
                         {c.d_in, rows[p]},
                         at(&ModuleWeights::w_qkv, first_row[p] * c.d_in),
                         0.0f,
                         1.0f});
      }
      break;
    case StateDictLayout::kLinear:
    case StateDictLayout::kLlama: {
      // nn.Linear projections, named by the seed or by Hugging Face.
      const bool llama = layout == StateDictLayout::kLlama;
      const char* const kLlamaNames[3] = {"q_proj", "k_proj", "v_proj"};
      for (int p = 0; p < 3; ++p) {
        const std::string n = llama ? kLlamaNames[p] : kProjections[p];
        slots.push_back({n + ".weight",
                         Slot::Kind::kWeight,
                         {rows[p], c.d_in},
                         at(&ModuleWeights::w_qkv, first_row[p] * c.d_in),
                         -linear,
                         linear});
        if (c.qkv_bias) {
          slots.push_back({n + ".bias",
                           Slot::Kind::kBias,
                           {rows[p]},
                           at(&ModuleWeights::b_qkv, first_row[p]),
                           -linear,
                           linear});
        }
      }
      if (c.out_proj) {
        const std::string n = llama ? "o_proj" : "out_proj";
        const float out = 1.0f / std::sqrt(static_cast<float>(q_dim));
        slots.push_back({n + ".weight",
                         Slot::Kind::kWeight,
                         {c.y_features(), q_dim},
                         at(&ModuleWeights::w_out, 0),
                         -out,
                         out});
        if (c.out_bias) {
          slots.push_back({n + ".bias",
                           Slot::Kind::kBias,
                           {c.y_features()},
                           at(&ModuleWeights::b_out, 0),
                           -out,
                           out});
        }
      }
      if (c.variants.sinks) {
        slots.push_back({"sinks",
                         Slot::Kind::kBias,
                         {c.num_heads},
                         at(&ModuleWeights::sinks, 0),
                         0.0f,
                         0.0f});
      }
      if (!llama && c.causal && c.context_length != 0) {
        slots.push_back(
            {"mask", Slot::Kind::kCausalMask, mask_shape, nullptr, 0.0f, 0.0f});
      }
      break;
    }
    case StateDictLayout::kHeads:
      // heads.h.W_query is rows [h * head_dim, (h + 1) * head_dim) of the
      // stacked Q weights (likewise K and V): concatenating the heads'
      // outputs is then the engine's usual head layout.
      for (size_t h = 0; h < c.num_heads; ++h) {
        const std::string prefix = "heads." + std::to_string(h) + ".";
        for (int p = 0; p < 3; ++p) {
          const size_t row = first_row[p] + h * c.head_dim;
          slots.push_back({prefix + kProjections[p] + ".weight",
                           Slot::Kind::kWeight,
                           {c.head_dim, c.d_in},
                           at(&ModuleWeights::w_qkv, row * c.d_in),
                           -linear,
                           linear});
          if (c.qkv_bias) {
            slots.push_back({prefix + kProjections[p] + ".bias",
                             Slot::Kind::kBias,
                             {c.head_dim},
                             at(&ModuleWeights::b_qkv, row),
                             -linear,
                             linear});
          }
        }
        if (c.context_length != 0) {
          slots.push_back({prefix + "mask", Slot::Kind::kCausalMask, mask_shape,
                           nullptr, 0.0f, 0.0f});
        }
      }
      break;
  }
  return slots;
}

void LoadSlots(const char* module, const std::vector<Slot>& slots,
               const StateDict& state_dict) {
  for (const auto& entry : state_dict) {
    bool known = false;
    for (const Slot& slot : slots) known |= slot.name == entry.first;
    SIMDATTN_REQUIRE(known, module, "unexpected tensor '", entry.first,
                     "' in the state_dict");
  }
  // Check every tensor before changing any weight: a failed load leaves the
  // module as it was.
  for (const Slot& slot : slots) {
    const auto it = state_dict.find(slot.name);
    if (it == state_dict.end() && slot.buffer()) continue;
    SIMDATTN_REQUIRE(it != state_dict.end(), module, "missing tensor '",
                     slot.name, "' of shape ", ShapeToString(slot.shape));
    const TensorRef& t = it->second;
    SIMDATTN_REQUIRE(t.shape == slot.shape, module, "tensor '", slot.name,
                     "' has shape ", ShapeToString(t.shape), ", expected ",
                     ShapeToString(slot.shape));
    SIMDATTN_REQUIRE(t.data != nullptr, module, "tensor '", slot.name,
                     "' is null");
    SIMDATTN_REQUIRE(t.dtype == DType::kF32 || t.dtype == DType::kBF16 ||
                         t.dtype == DType::kF16,
                     module, "tensor '", slot.name, "' has an unknown dtype (",
                     static_cast<int>(t.dtype), ")");
    if (slot.kind == Slot::Kind::kCausalMask) {
      CheckCausalMask(module, slot.name, t);
    }
  }
  for (const Slot& slot : slots) {
    if (slot.destination == nullptr) continue;
    const TensorRef& t = state_dict.at(slot.name);
    if (slot.kind == Slot::Kind::kTransposedWeight) {
      // (in, out) parameter into the engine's (out, in) rows.
      const size_t in = slot.shape[0], out = slot.shape[1];
      for (size_t i = 0; i < in; ++i) {
        for (size_t o = 0; o < out; ++o) {
          slot.destination[o * in + i] = Element(t, i * out + o);
        }
      }
    } else if (t.dtype == DType::kF32) {
      std::memcpy(slot.destination, t.data, Elements(slot) * sizeof(float));
    } else {
      for (size_t e = 0; e < Elements(slot); ++e) {
        slot.destination[e] = Element(t, e);
      }
    }
  }
}

void InitializeSlots(const std::vector<Slot>& slots, uint64_t seed) {
  const PhiloxKey key = {static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32)};
  for (size_t s = 0; s < slots.size(); ++s) {
    const Slot& slot = slots[s];
    if (slot.destination == nullptr) continue;
    const size_t n = Elements(slot);
    for (size_t e = 0; e < n; ++e) {
      const uint32_t bits = Philox4x32(
          {static_cast<uint32_t>(e / 4), static_cast<uint32_t>(e >> 34),
           static_cast<uint32_t>(s), 0},
          key)[e % 4];
      const float unit = static_cast<float>(bits >> 8) * 0x1.0p-24f;
      // Transposed parameters are drawn in PyTorch's element order.
      size_t index = e;
      if (slot.kind == Slot::Kind::kTransposedWeight) {
        index = (e % slot.shape[1]) * slot.shape[0] + e / slot.shape[1];
      }
      slot.destination[index] =
          slot.init_low + (slot.init_high - slot.init_low) * unit;
    }
  }
}

}  // namespace internal
}  // namespace simdattn
