// The C API over the C++ API: conversions of plain C structs into the C++
// views, and the exception barrier (guard.h). All validation of shapes,
// strides and overlaps is the C++ API's; this layer checks only what C adds:
// null handles and output pointers, flags that are not 0 or 1, enum values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "simdattn/simdattn_c.h"
#include "simdattn/targets.h"
#include "simdattn/tensor.h"
#include "src/c_api/guard.h"
#include "src/common/check.h"
#include "tbb/global_control.h"
#include "tbb/task_arena.h"

// The handle: the module plus its state_dict's names and shapes, kept so that
// simdattn_module_weight_info can hand out pointers that live as long as it.
struct simdattn_module {
  explicit simdattn_module(simdattn::AttentionModule m) : module(std::move(m)) {
    const std::vector<std::string> buffers = module.StateDictBuffers();
    for (auto& [name, shape] : module.StateDictShapes()) {
      weight_names.push_back(name);
      weight_shapes.push_back(std::move(shape));
      weight_is_buffer.push_back(
          std::find(buffers.begin(), buffers.end(), name) != buffers.end());
    }
  }

  simdattn::AttentionModule module;
  std::vector<std::string> weight_names;  // Sorted, as StateDictShapes gives.
  std::vector<std::vector<size_t>> weight_shapes;
  std::vector<bool> weight_is_buffer;
};

struct simdattn_kv_cache {
  simdattn::KVCache cache;
};

struct simdattn_packed_matrix {
  simdattn::PackedMatrix matrix;
};

struct simdattn_varlen_plan {
  simdattn::VarlenPlan plan;
};

namespace simdattn {
namespace internal {
namespace {

// Long enough for any message the library writes (shapes of four 20-digit
// numbers included); longer ones are cut, never overrun.
constexpr size_t kMaxMessage = 1024;
thread_local char t_last_error[kMaxMessage];

}  // namespace

void SetLastError(const char* prefix, const char* message) noexcept {
  if (prefix != nullptr) {
    std::snprintf(t_last_error, kMaxMessage, "%s: %s", prefix, message);
  } else {
    std::snprintf(t_last_error, kMaxMessage, "%s", message);
  }
}

void ClearLastError() noexcept { t_last_error[0] = '\0'; }

}  // namespace internal

namespace {

// Throws naming `function` and `what` unless `pointer` is set.
void RequireNonNull(const void* pointer, const char* function,
                    const char* what) {
  SIMDATTN_REQUIRE(pointer != nullptr, function, what, " is null");
}

// C's 0-or-1 flags: anything else is more likely a garbled struct (a field
// order or size mismatch across an FFI) than a deliberate "true".
bool Flag(int32_t value, const char* function, const char* what) {
  SIMDATTN_REQUIRE(value == 0 || value == 1, function, what, " (", value,
                   ") is neither 0 nor 1");
  return value == 1;
}

// The end of field f of struct S.
#define SIMDATTN_FIELD_END_(S, f) \
  (offsetof(S, f) + sizeof(static_cast<S*>(nullptr)->f))

// What each growable struct was in its first version (0.2.0): its name, the
// macro that initializes it, and the end of its last field then
// (first_last); appended fields leave kFirstSize as it is. No struct has
// tail padding after its last field now (last): a field appended into it
// would not change the size callers pass.
template <typename S>
struct Growable;
#define SIMDATTN_GROWABLE(S, macro, first_last, last)                        \
  template <>                                                                \
  struct Growable<S> {                                                       \
    static constexpr const char* kName = #S;                                 \
    static constexpr const char* kMacro = #macro;                            \
    static constexpr size_t kFirstSize = SIMDATTN_FIELD_END_(S, first_last); \
  };                                                                         \
  static_assert(SIMDATTN_FIELD_END_(S, last) == sizeof(S),                   \
                #S " has tail padding, or " #last " is not last");
SIMDATTN_GROWABLE(simdattn_matmul_options, SIMDATTN_MATMUL_OPTIONS_INIT, bias,
                  bias)
SIMDATTN_GROWABLE(simdattn_mask, SIMDATTN_MASK_INIT, sinks, tree_offsets)
SIMDATTN_GROWABLE(simdattn_rope_options, SIMDATTN_ROPE_OPTIONS_INIT, positions,
                  rotary_offset)
SIMDATTN_GROWABLE(simdattn_attention_options, SIMDATTN_ATTENTION_OPTIONS_INIT,
                  log_sum_exp, log_sum_exp)
SIMDATTN_GROWABLE(simdattn_kv_cache_config, SIMDATTN_KV_CACHE_CONFIG_INIT, rope,
                  window)
SIMDATTN_GROWABLE(simdattn_module_config, SIMDATTN_MODULE_CONFIG_INIT, rope,
                  out_bias)
SIMDATTN_GROWABLE(simdattn_load_options, SIMDATTN_LOAD_OPTIONS_INIT, reserved,
                  reserved)
SIMDATTN_GROWABLE(simdattn_forward_options, SIMDATTN_FORWARD_OPTIONS_INIT,
                  attention_weights, attention_weights)
SIMDATTN_GROWABLE(simdattn_kv_pages, SIMDATTN_KV_PAGES_INIT, value_scale,
                  value_scale)
SIMDATTN_GROWABLE(simdattn_varlen_step, SIMDATTN_VARLEN_STEP_INIT, slot_mapping,
                  tree_offsets)
#undef SIMDATTN_GROWABLE
#undef SIMDATTN_FIELD_END_

// Larger than any struct of this API will grow to: a struct_size beyond it
// is garbage, not a newer header.
constexpr size_t kMaxStructSize = 4096;

// The caller's struct as this version knows it: its first struct_size bytes
// over a zeroed struct, so fields an older caller lacks take their defaults.
// Throws unless struct_size covers the first version's fields, or if the
// caller (compiled against a newer header) set a field this version lacks.
template <typename S>
S ReadGrowable(const S& caller, const char* function, const char* what) {
  const size_t size = caller.struct_size;
  SIMDATTN_REQUIRE(size >= Growable<S>::kFirstSize && size <= kMaxStructSize,
                   function, what, "->struct_size (", size,
                   ") is not the size of a ", Growable<S>::kName,
                   ": initialize it with ", Growable<S>::kMacro);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&caller);
  for (size_t i = sizeof(S); i < size; ++i) {
    SIMDATTN_REQUIRE(bytes[i] == 0, function, what, "->struct_size (", size,
                     ") covers a field this version (", Version(), ", ",
                     sizeof(S), " bytes) does not know, and it is set");
  }
  S known;
  std::memset(&known, 0, sizeof(S));
  std::memcpy(&known, &caller, std::min(size, sizeof(S)));
  return known;
}

// The C enumerators are ComputeType's values; which a function accepts, it
// checks itself.
static_assert(SIMDATTN_COMPUTE_FP32 ==
                      static_cast<int>(ComputeType::kFloat32) &&
                  SIMDATTN_COMPUTE_BF16 ==
                      static_cast<int>(ComputeType::kBFloat16) &&
                  SIMDATTN_COMPUTE_INT8 == static_cast<int>(ComputeType::kInt8),
              "one vocabulary");
ComputeType Compute(int32_t compute, const char* function, const char* what) {
  SIMDATTN_REQUIRE(
      compute >= SIMDATTN_COMPUTE_FP32 && compute <= SIMDATTN_COMPUTE_INT8,
      function, what, " (", compute,
      ") is not SIMDATTN_COMPUTE_FP32 (0), SIMDATTN_COMPUTE_BF16 "
      "(1) or SIMDATTN_COMPUTE_INT8 (2)");
  return static_cast<ComputeType>(compute);
}

ConstMatrix View(simdattn_const_matrix m) {
  return ConstMatrix(m.data, m.rows, m.cols, m.stride);
}
Matrix View(simdattn_matrix m) {
  return Matrix(m.data, m.rows, m.cols, m.stride);
}
template <typename T, typename CTensor>
Tensor4View<T> View4(const CTensor& t) {
  return Tensor4View<T>(t.data, t.dims[0], t.dims[1], t.dims[2], t.dims[3],
                        t.strides[0], t.strides[1], t.strides[2]);
}
ConstTensor3 View(simdattn_const_tensor3 t) {
  return ConstTensor3(t.data, t.batch, t.tokens, t.features, t.batch_stride,
                      t.token_stride);
}
simdattn_const_tensor4 CView(ConstTensor4 t) {
  simdattn_const_tensor4 c;
  c.data = t.data;
  for (int i = 0; i < 4; ++i) c.dims[i] = t.dims[i];
  for (int i = 0; i < 3; ++i) c.strides[i] = t.strides[i];
  return c;
}
Tensor3 View(simdattn_tensor3 t) {
  return Tensor3(t.data, t.batch, t.tokens, t.features, t.batch_stride,
                 t.token_stride);
}

AttentionMask ToMask(const simdattn_mask* caller, const char* function,
                     const char* what) {
  AttentionMask m;
  if (caller == nullptr) return m;
  const simdattn_mask mask = ReadGrowable(*caller, function, what);
  m.causal = Flag(mask.causal, function, "mask->causal");
  m.causal_offset = mask.causal_offset;
  m.boolean = View4<const uint8_t>(mask.boolean_mask);
  m.additive = View4<const float>(mask.additive_mask);
  m.key_lengths = mask.key_lengths;
  m.causal_offsets = mask.causal_offsets;
  m.window = mask.window;
  m.softcap = mask.softcap;
  m.alibi_slopes = mask.alibi_slopes;
  m.sinks = mask.sinks;
  m.tree_bits = mask.tree_bits;
  m.tree_offsets = mask.tree_offsets;
  return m;
}

ForwardOptions ToOptions(const simdattn_forward_options* caller,
                         const char* function) {
  ForwardOptions o;
  if (caller == nullptr) return o;
  const simdattn_forward_options options =
      ReadGrowable(*caller, function, "options");
  o.training = Flag(options.training, function, "options->training");
  o.dropout_key = {options.dropout_seed, options.dropout_offset};
  o.attention_weights = View4<float>(options.attention_weights);
  o.compute = Compute(options.compute, function, "options->compute");
  return o;
}

AttentionOptions ToOptions(const simdattn_attention_options* caller,
                           const char* kFn) {
  AttentionOptions o;
  if (caller == nullptr) return o;
  const simdattn_attention_options options =
      ReadGrowable(*caller, kFn, "options");
  if (Flag(options.has_scale, kFn, "options->has_scale")) {
    o.scale = options.scale;
  }
  o.mask = ToMask(options.mask, kFn, "options->mask");
  o.dropout = options.dropout;
  o.dropout_key = {options.dropout_seed, options.dropout_offset};
  o.log_sum_exp = options.log_sum_exp;
  o.compute = Compute(options.compute, kFn, "options->compute");
  return o;
}

RopeOptions ToRope(const simdattn_rope_options& caller, const char* function,
                   const char* what) {
  const simdattn_rope_options rope = ReadGrowable(caller, function, what);
  RopeOptions o;
  const std::string interleaved = std::string(what) + "->interleaved";
  o.pairing = Flag(rope.interleaved, function, interleaved.c_str())
                  ? RopePairing::kInterleaved
                  : RopePairing::kHalfSplit;
  if (rope.theta != 0.0f) o.theta = rope.theta;
  o.rotary_dim = rope.rotary_dim;
  o.positions = rope.positions;
  o.rotary_offset = rope.rotary_offset;
  return o;
}

simdattn_status LoadWeights(const char* kFn, simdattn_module* module,
                            const simdattn_named_tensor* tensors, size_t count,
                            const simdattn_load_options* options) {
  return internal::CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    SIMDATTN_REQUIRE(tensors != nullptr || count == 0, kFn,
                     "tensors is null but count is ", count);
    LoadOptions load;
    if (options != nullptr) {
      const simdattn_load_options o = ReadGrowable(*options, kFn, "options");
      load.keep_dtype = Flag(o.keep_dtype, kFn, "options->keep_dtype");
      SIMDATTN_REQUIRE(o.reserved == 0, kFn, "options->reserved (", o.reserved,
                       ") is not 0");
    }
    simdattn::StateDict state_dict;
    for (size_t i = 0; i < count; ++i) {
      const simdattn_named_tensor& t = tensors[i];
      SIMDATTN_REQUIRE(t.name != nullptr, kFn, "tensors[", i, "].name is null");
      SIMDATTN_REQUIRE(t.shape != nullptr || t.rank == 0, kFn, "tensors[", i,
                       "] ('", t.name, "') has rank ", t.rank,
                       " but a null shape");
      // A rank beyond any state_dict's would only make us copy a huge array.
      SIMDATTN_REQUIRE(t.rank <= 8, kFn, "tensors[", i, "] ('", t.name,
                       "') has rank ", t.rank, " (at most 8)");
      const int32_t dtype = t.dtype;
      SIMDATTN_REQUIRE(
          dtype == SIMDATTN_F32 || dtype == SIMDATTN_BF16 ||
              dtype == SIMDATTN_F16,
          kFn, "tensors[", i, "] ('", t.name, "') has dtype ", dtype,
          ", not a simdattn_element_type of weights (SIMDATTN_F32, "
          "SIMDATTN_BF16 or SIMDATTN_F16)");
      const bool inserted =
          state_dict
              .emplace(t.name,
                       TensorRef{t.data,
                                 std::vector<size_t>(t.shape, t.shape + t.rank),
                                 static_cast<DType>(dtype)})
              .second;
      SIMDATTN_REQUIRE(inserted, kFn, "tensors[", i, "] ('", t.name,
                       "') repeats the name of an earlier tensor");
    }
    module->module.LoadStateDict(state_dict, load);
  });
}

MatMulOptions ToOptions(const simdattn_matmul_options* caller,
                        const char* function) {
  MatMulOptions result;
  if (caller == nullptr) return result;
  const simdattn_matmul_options options =
      ReadGrowable(*caller, function, "options");
  result.transpose_b =
      Flag(options.transpose_b, function, "options->transpose_b")
          ? Transpose::kYes
          : Transpose::kNo;
  if (Flag(options.use_alpha, function, "options->use_alpha")) {
    result.alpha = options.alpha;
  } else {
    SIMDATTN_REQUIRE(options.alpha == 0.0f || options.alpha == 1.0f, function,
                     "options->alpha (", options.alpha,
                     ") is used only with options->use_alpha = 1");
  }
  result.beta = options.beta;
  result.bias = options.bias;
  result.compute = Compute(options.compute, function, "options->compute");
  return result;
}

// The C enumerators are ElementType's values: one vocabulary.
static_assert(SIMDATTN_F32 == static_cast<int>(ElementType::kF32) &&
                  SIMDATTN_BF16 == static_cast<int>(ElementType::kBF16) &&
                  SIMDATTN_F16 == static_cast<int>(ElementType::kF16) &&
                  SIMDATTN_INT8 == static_cast<int>(ElementType::kInt8) &&
                  SIMDATTN_FP8_E4M3 ==
                      static_cast<int>(ElementType::kFp8E4M3) &&
                  SIMDATTN_FP8_E5M2 ==
                      static_cast<int>(ElementType::kFp8E5M2) &&
                  SIMDATTN_Q8_0 == static_cast<int>(ElementType::kQ8_0) &&
                  SIMDATTN_Q4_0 == static_cast<int>(ElementType::kQ4_0) &&
                  SIMDATTN_Q4_1 == static_cast<int>(ElementType::kQ4_1) &&
                  SIMDATTN_IQ4_NL == static_cast<int>(kLastElementType),
              "simdattn_element_type and ElementType disagree");

// A C element type, named `what` in the error.
KVType ToElementType(int32_t type, const char* kFn, const char* what) {
  SIMDATTN_REQUIRE(type >= 0 && type <= UINT8_MAX &&
                       IsElementType(static_cast<KVType>(type)),
                   kFn, what, " (", type, ") is not a simdattn_element_type");
  return static_cast<KVType>(type);
}

KVCacheConfig ToConfig(const simdattn_kv_cache_config* caller,
                       const char* kFn) {
  KVCacheConfig c;
  if (caller == nullptr) return c;
  const simdattn_kv_cache_config config = ReadGrowable(*caller, kFn, "config");
  c.type = ToElementType(config.type, kFn, "config->type");
  c.window = config.window;
  c.block_size = config.block_size;
  c.num_blocks = config.num_blocks;
  c.value_dim = config.value_dim;
  c.latent = Flag(config.latent, kFn, "config->latent");
  SIMDATTN_REQUIRE(config.reserved == 0, kFn, "config->reserved (",
                   config.reserved, ") is not 0");
  // Zero: a caller that predates the scales (or leaves them unset).
  if (config.key_scale != 0.0f) c.key_scale = config.key_scale;
  if (config.value_scale != 0.0f) c.value_scale = config.value_scale;
  if (config.rope != nullptr)
    c.rope = ToRope(*config.rope, kFn, "config->rope");
  return c;
}

AttentionModule MakeModule(const simdattn_module_config& caller) {
  constexpr const char* kFn = "simdattn_module_create";
  const simdattn_module_config c = ReadGrowable(caller, kFn, "config");
  const bool bias = Flag(c.qkv_bias, kFn, "config->qkv_bias");
  SIMDATTN_REQUIRE(
      c.kind == SIMDATTN_MULTI_HEAD_ATTENTION ||
          (c.window == 0 && c.softcap == 0.0f && c.alibi == 0 && c.sinks == 0 &&
           c.rope == nullptr && c.weight_names == 0 && c.out_bias == 0),
      kFn,
      "config->window, softcap, alibi, sinks, rope, weight_names "
      "and out_bias apply to SIMDATTN_MULTI_HEAD_ATTENTION only");
  switch (c.kind) {
    case SIMDATTN_SIMPLIFIED_SELF_ATTENTION:
      return SimplifiedSelfAttention(c.d_in);
    case SIMDATTN_SELF_ATTENTION_V1:
      return SelfAttentionV1(c.d_in, c.d_out, c.seed);
    case SIMDATTN_SELF_ATTENTION_V2:
      return SelfAttentionV2(c.d_in, c.d_out, bias, c.seed);
    case SIMDATTN_CAUSAL_ATTENTION:
      return CausalAttention(c.d_in, c.d_out, c.context_length, c.dropout, bias,
                             c.seed);
    case SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER:
      return MultiHeadAttentionWrapper(c.d_in, c.d_out, c.context_length,
                                       c.dropout, c.num_heads, bias, c.seed);
    case SIMDATTN_MULTI_HEAD_ATTENTION: {
      AttentionVariants variants;
      variants.window = c.window;
      variants.softcap = c.softcap;
      variants.alibi = Flag(c.alibi, kFn, "config->alibi");
      variants.sinks = Flag(c.sinks, kFn, "config->sinks");
      MultiHeadAttentionConfig m;
      m.d_in = c.d_in;
      m.d_out = c.d_out;
      m.context_length = c.context_length;
      m.dropout = c.dropout;
      m.num_heads = c.num_heads;
      m.qkv_bias = bias;
      m.num_kv_heads = c.num_kv_heads;
      m.variants = variants;
      m.seed = c.seed;
      if (c.rope != nullptr) m.rope = ToRope(*c.rope, kFn, "config->rope");
      m.weight_names = static_cast<WeightNames>(c.weight_names);
      m.out_bias = Flag(c.out_bias, kFn, "config->out_bias");
      return MultiHeadAttention(m);
    }
  }
  internal::ThrowInvalidArgument(kFn, "config->kind (", c.kind,
                                 ") is not a simdattn_module_kind (0 to 5)");
}

// The library's own thread bound (simdattn_set_max_threads). A function
// static, destroyed at exit after every call has returned.
struct ThreadLimit {
  std::mutex mutex;
  std::unique_ptr<tbb::global_control> control;
};
ThreadLimit& GetThreadLimit() {
  static ThreadLimit limit;
  return limit;
}

// The step's metadata (slot_mapping null where the caller's header lacks it).
VarlenStep ToStep(const simdattn_varlen_step* caller, const char* kFn) {
  RequireNonNull(caller, kFn, "step");
  const simdattn_varlen_step s = ReadGrowable(*caller, kFn, "step");
  VarlenStep step;
  step.num_seqs = s.num_seqs;
  step.query_starts = s.query_starts;
  step.seq_lens = s.seq_lens;
  step.block_table = s.block_table;
  step.blocks_per_sequence = s.blocks_per_sequence;
  step.slot_mapping = s.slot_mapping;
  step.positions = s.positions;
  step.tree_bits = s.tree_bits;
  step.tree_offsets = s.tree_offsets;
  return step;
}

KVPages ToPages(const simdattn_kv_pages* caller, const char* kFn) {
  RequireNonNull(caller, kFn, "pages");
  const simdattn_kv_pages p = ReadGrowable(*caller, kFn, "pages");
  SIMDATTN_REQUIRE(p.reserved == 0, kFn, "pages->reserved (", p.reserved,
                   ") is not 0");
  KVPages pages;
  pages.type = ToElementType(p.type, kFn, "pages->type");
  pages.kv_heads = p.kv_heads;
  pages.head_dim = p.head_dim;
  pages.value_dim = p.value_dim;
  pages.keys = p.keys;
  pages.values = p.values;
  pages.block_stride = p.block_stride;
  pages.head_stride = p.head_stride;
  pages.row_stride = p.row_stride;
  pages.key_scales = p.key_scales;
  pages.value_scales = p.value_scales;
  pages.scale_block_stride = p.scale_block_stride;
  pages.scale_head_stride = p.scale_head_stride;
  pages.block_size = p.block_size;
  pages.num_blocks = p.num_blocks;
  if (p.key_scale != 0.0f) pages.key_scale = p.key_scale;
  if (p.value_scale != 0.0f) pages.value_scale = p.value_scale;
  return pages;
}

// Throws unless a buffer of buffer_bytes holds `count` exported tokens.
void CheckExportBuffer(const char* kFn, const KVCache& cache, size_t count,
                       size_t buffer_bytes) {
  const size_t needed = cache.ExportBytes(count);
  SIMDATTN_REQUIRE(buffer_bytes >= needed, kFn, "buffer_bytes (", buffer_bytes,
                   ") is less than the ", needed, " bytes of ", count,
                   " tokens");
}
}  // namespace
}  // namespace simdattn

using simdattn::internal::CallGuarded;

extern "C" {

const char* simdattn_last_error(void) {
  return simdattn::internal::t_last_error;
}

const char* simdattn_version(void) { return simdattn::Version(); }

const char* simdattn_active_target(void) {
  // A copy per thread: the C++ API returns a std::string, and UseTarget may
  // change the answer between calls.
  thread_local char name[64];
  name[0] = '\0';
  try {
    std::snprintf(name, sizeof(name), "%s", simdattn::ActiveTarget().c_str());
  } catch (...) {
    name[0] = '\0';  // Documented: "" when the name cannot be determined.
  }
  return name;
}

simdattn_status simdattn_use_target(const char* name) {
  return CallGuarded("simdattn_use_target", [&] {
    simdattn::UseTarget(name == nullptr ? std::string() : std::string(name));
  });
}

simdattn_status simdattn_load_plans(const char* path) {
  return CallGuarded("simdattn_load_plans", [&] {
    simdattn::LoadPlans(path == nullptr ? std::string() : std::string(path));
  });
}

simdattn_status simdattn_set_max_threads(size_t max_threads) {
  return CallGuarded("simdattn_set_max_threads", [&] {
    simdattn::ThreadLimit& limit = simdattn::GetThreadLimit();
    std::lock_guard<std::mutex> lock(limit.mutex);
    // Release the old bound first: TBB applies the minimum of all live ones,
    // so keeping it would prevent raising the bound.
    limit.control.reset();
    if (max_threads > 0) {
      limit.control = std::make_unique<tbb::global_control>(
          tbb::global_control::max_allowed_parallelism, max_threads);
    }
  });
}

simdattn_status simdattn_get_max_threads(size_t* max_threads) {
  return CallGuarded("simdattn_get_max_threads", [&] {
    simdattn::RequireNonNull(max_threads, "simdattn_get_max_threads",
                             "max_threads");
    // The calling context's arena may allow fewer threads than the process.
    *max_threads = std::min<size_t>(
        tbb::global_control::active_value(
            tbb::global_control::max_allowed_parallelism),
        static_cast<size_t>(tbb::this_task_arena::max_concurrency()));
  });
}

simdattn_status simdattn_matmul(simdattn_const_matrix a,
                                simdattn_const_matrix b, simdattn_matrix c,
                                const simdattn_matmul_options* options) {
  constexpr const char* kFn = "simdattn_matmul";
  return CallGuarded(kFn, [&] {
    simdattn::MatMul(simdattn::View(a), simdattn::View(b), simdattn::View(c),
                     simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_matmul_pack(simdattn_const_typed_matrix b,
                                     const simdattn_matmul_options* options,
                                     simdattn_packed_matrix** packed) {
  constexpr const char* kFn = "simdattn_matmul_pack";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(packed, kFn, "packed");
    SIMDATTN_REQUIRE(b.reserved == 0, kFn, "b.reserved (", b.reserved,
                     ") is not 0");
    const simdattn::MatMulOptions opt = simdattn::ToOptions(options, kFn);
    const auto pack = [&](auto element) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(element)>>;
      return new simdattn_packed_matrix{simdattn::PackedMatrix(
          simdattn::MatrixView<const T>(static_cast<const T*>(b.data), b.rows,
                                        b.cols, b.stride),
          opt)};
    };
    switch (b.type) {
      case SIMDATTN_F32:
        *packed = pack(static_cast<const float*>(nullptr));
        return;
      case SIMDATTN_BF16:
        *packed = pack(static_cast<const simdattn::BFloat16*>(nullptr));
        return;
      case SIMDATTN_F16:
        *packed = pack(static_cast<const simdattn::Float16*>(nullptr));
        return;
      default:
        SIMDATTN_REQUIRE(false, kFn, "b.type (", b.type,
                         ") is not SIMDATTN_F32, SIMDATTN_BF16 or "
                         "SIMDATTN_F16");
    }
  });
}

void simdattn_packed_matrix_destroy(simdattn_packed_matrix* b) { delete b; }

simdattn_status simdattn_matmul_packed(simdattn_const_typed_matrix a,
                                       const simdattn_packed_matrix* b,
                                       simdattn_typed_matrix c,
                                       const simdattn_matmul_options* options) {
  constexpr const char* kFn = "simdattn_matmul_packed";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(b, kFn, "b");
    SIMDATTN_REQUIRE(a.reserved == 0 && c.reserved == 0, kFn, "a.reserved (",
                     a.reserved, ") and c.reserved (", c.reserved,
                     ") must be 0");
    for (const auto& [name, type] :
         {std::pair{"a.type", a.type}, std::pair{"c.type", c.type}}) {
      SIMDATTN_REQUIRE(type == SIMDATTN_F32 || type == SIMDATTN_BF16, kFn, name,
                       " (", type,
                       ") is neither SIMDATTN_F32 nor SIMDATTN_BF16");
    }
    const simdattn::MatMulOptions opt = simdattn::ToOptions(options, kFn);
    const auto product = [&](auto a_view) {
      if (c.type == SIMDATTN_BF16) {
        return simdattn::MatMul(a_view, b->matrix,
                                simdattn::MatrixView<simdattn::BFloat16>(
                                    static_cast<simdattn::BFloat16*>(c.data),
                                    c.rows, c.cols, c.stride),
                                opt);
      }
      simdattn::MatMul(a_view, b->matrix,
                       simdattn::Matrix(static_cast<float*>(c.data), c.rows,
                                        c.cols, c.stride),
                       opt);
    };
    if (a.type == SIMDATTN_BF16) {
      return product(simdattn::MatrixView<const simdattn::BFloat16>(
          static_cast<const simdattn::BFloat16*>(a.data), a.rows, a.cols,
          a.stride));
    }
    product(simdattn::ConstMatrix(static_cast<const float*>(a.data), a.rows,
                                  a.cols, a.stride));
  });
}

const char* simdattn_bf16_dot_kernel(void) {
  return simdattn::BFloat16DotKernel();
}

simdattn_status simdattn_batched_matmul(
    simdattn_const_tensor4 a, simdattn_const_tensor4 b, simdattn_tensor4 c,
    const simdattn_matmul_options* options) {
  constexpr const char* kFn = "simdattn_batched_matmul";
  return CallGuarded(kFn, [&] {
    simdattn::BatchedMatMul(
        simdattn::View4<const float>(a), simdattn::View4<const float>(b),
        simdattn::View4<float>(c), simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_softmax(simdattn_const_tensor4 x, simdattn_tensor4 y,
                                 float scale, const simdattn_mask* mask) {
  constexpr const char* kFn = "simdattn_softmax";
  return CallGuarded(kFn, [&] {
    simdattn::Softmax(simdattn::View4<const float>(x),
                      simdattn::View4<float>(y), scale,
                      simdattn::ToMask(mask, kFn, "mask"));
  });
}

simdattn_status simdattn_alibi_slopes(size_t num_heads, float* slopes) {
  constexpr const char* kFn = "simdattn_alibi_slopes";
  return CallGuarded(kFn, [&] {
    SIMDATTN_REQUIRE(slopes != nullptr || num_heads == 0, kFn,
                     "slopes is null but num_heads is ", num_heads);
    const std::vector<float> s = simdattn::AlibiSlopes(num_heads);
    std::copy(s.begin(), s.end(), slopes);
  });
}

simdattn_status simdattn_apply_rope(simdattn_tensor4 x,
                                    const simdattn_rope_options* options) {
  constexpr const char* kFn = "simdattn_apply_rope";
  return CallGuarded(kFn, [&] {
    simdattn::ApplyRope(simdattn::View4<float>(x),
                        options == nullptr
                            ? simdattn::RopeOptions()
                            : simdattn::ToRope(*options, kFn, "options"));
  });
}

simdattn_status simdattn_dropout(simdattn_tensor4 x, float p, uint64_t seed,
                                 uint64_t offset) {
  return CallGuarded("simdattn_dropout", [&] {
    simdattn::Dropout(simdattn::View4<float>(x), p, {seed, offset});
  });
}

simdattn_status simdattn_scaled_dot_product_attention(
    simdattn_const_tensor4 q, simdattn_const_tensor4 k,
    simdattn_const_tensor4 v, simdattn_tensor4 out,
    const simdattn_attention_options* options) {
  constexpr const char* kFn = "simdattn_scaled_dot_product_attention";
  return CallGuarded(kFn, [&] {
    simdattn::ScaledDotProductAttention(
        simdattn::View4<const float>(q), simdattn::View4<const float>(k),
        simdattn::View4<const float>(v), simdattn::View4<float>(out),
        simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_kv_cache_create(size_t batch, size_t kv_heads,
                                         size_t capacity, size_t head_dim,
                                         const simdattn_kv_cache_config* config,
                                         simdattn_kv_cache** cache) {
  constexpr const char* kFn = "simdattn_kv_cache_create";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    *cache = new simdattn_kv_cache{simdattn::KVCache(
        batch, kv_heads, capacity, head_dim, simdattn::ToConfig(config, kFn))};
  });
}

simdattn_status simdattn_kv_cache_create_in(simdattn_tensor4 keys,
                                            simdattn_tensor4 values,
                                            simdattn_kv_cache** cache) {
  constexpr const char* kFn = "simdattn_kv_cache_create_in";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    *cache = new simdattn_kv_cache{simdattn::KVCache(
        simdattn::View4<float>(keys), simdattn::View4<float>(values))};
  });
}

void simdattn_kv_cache_destroy(simdattn_kv_cache* cache) { delete cache; }

simdattn_status simdattn_kv_cache_append(simdattn_kv_cache* cache,
                                         simdattn_const_tensor4 keys,
                                         simdattn_const_tensor4 values,
                                         const size_t* sequences) {
  constexpr const char* kFn = "simdattn_kv_cache_append";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    if (sequences == nullptr) {
      cache->cache.Append(simdattn::View4<const float>(keys),
                          simdattn::View4<const float>(values));
      return;
    }
    const size_t count = keys.dims[0];
    SIMDATTN_REQUIRE(count <= cache->cache.batch(), kFn, "keys.dims[0] (",
                     count, ") exceeds the batch (", cache->cache.batch(),
                     "): a sequence would repeat");
    cache->cache.Append(simdattn::View4<const float>(keys),
                        simdattn::View4<const float>(values),
                        std::vector<size_t>(sequences, sequences + count));
  });
}

simdattn_status simdattn_kv_cache_truncate(simdattn_kv_cache* cache,
                                           size_t sequence, size_t length) {
  constexpr const char* kFn = "simdattn_kv_cache_truncate";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    cache->cache.Truncate(sequence, length);
  });
}

simdattn_status simdattn_kv_cache_copy(simdattn_kv_cache* cache, size_t src,
                                       size_t dst) {
  constexpr const char* kFn = "simdattn_kv_cache_copy";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    cache->cache.Copy(src, dst);
  });
}

simdattn_status simdattn_kv_cache_reorder(simdattn_kv_cache* cache,
                                          const size_t* order) {
  constexpr const char* kFn = "simdattn_kv_cache_reorder";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    const size_t batch = cache->cache.batch();
    SIMDATTN_REQUIRE(order != nullptr || batch == 0, kFn, "order is null");
    cache->cache.Reorder(std::vector<size_t>(order, order + batch));
  });
}

simdattn_status simdattn_kv_cache_length(const simdattn_kv_cache* cache,
                                         size_t sequence, size_t* length) {
  constexpr const char* kFn = "simdattn_kv_cache_length";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    simdattn::RequireNonNull(length, kFn, "length");
    *length = cache->cache.length(sequence);
  });
}

simdattn_status simdattn_kv_cache_attention(
    simdattn_const_tensor4 q, const simdattn_kv_cache* cache,
    simdattn_tensor4 out, const simdattn_attention_options* options) {
  constexpr const char* kFn = "simdattn_kv_cache_attention";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    const simdattn::AttentionOptions o = simdattn::ToOptions(options, kFn);
    simdattn::ScaledDotProductAttention(simdattn::View4<const float>(q),
                                        cache->cache.View(),
                                        simdattn::View4<float>(out), o);
  });
}

simdattn_status simdattn_write_kv_slots(simdattn_const_tensor4 keys,
                                        simdattn_const_tensor4 values,
                                        const int64_t* slot_mapping,
                                        const simdattn_kv_pages* pages) {
  constexpr const char* kFn = "simdattn_write_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::WriteKVSlots(simdattn::View4<const float>(keys),
                           simdattn::View4<const float>(values), slot_mapping,
                           simdattn::ToPages(pages, kFn));
  });
}

simdattn_status simdattn_write_kv_slots_rope(simdattn_const_tensor4 keys,
                                             simdattn_const_tensor4 values,
                                             const int64_t* slot_mapping,
                                             const simdattn_kv_pages* pages,
                                             const simdattn_rope_options* rope,
                                             const size_t* positions) {
  constexpr const char* kFn = "simdattn_write_kv_slots_rope";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(rope, kFn, "rope");
    simdattn::WriteKVSlots(simdattn::View4<const float>(keys),
                           simdattn::View4<const float>(values), slot_mapping,
                           simdattn::ToPages(pages, kFn),
                           simdattn::ToRope(*rope, kFn, "rope"), positions);
  });
}

simdattn_status simdattn_element_size(int32_t type, size_t* block_bytes,
                                      size_t* block_values) {
  constexpr const char* kFn = "simdattn_element_size";
  return CallGuarded(kFn, [&] {
    const simdattn::ElementTraits traits =
        simdattn::ElementTraitsOf(simdattn::ToElementType(type, kFn, "type"));
    if (block_bytes != nullptr) *block_bytes = traits.bytes;
    if (block_values != nullptr) *block_values = traits.values;
  });
}

simdattn_status simdattn_kv_pages_dense(int32_t type, size_t kv_heads,
                                        size_t head_dim, size_t value_dim,
                                        size_t block_size, size_t num_blocks,
                                        simdattn_kv_pages* pages,
                                        size_t* key_bytes, size_t* value_bytes,
                                        size_t* scales) {
  constexpr const char* kFn = "simdattn_kv_pages_dense";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(pages, kFn, "pages");
    const simdattn::KVPages p = simdattn::DenseKVPages(
        simdattn::ToElementType(type, kFn, "type"), kv_heads, head_dim,
        value_dim, block_size, num_blocks);
    const simdattn::KVPagesSize size = simdattn::SizeOf(p);
    simdattn_kv_pages c = SIMDATTN_KV_PAGES_INIT;
    c.type = type;
    c.kv_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.value_dim = p.value_dim;
    c.block_stride = p.block_stride;
    c.head_stride = p.head_stride;
    c.row_stride = p.row_stride;
    c.scale_block_stride = p.scale_block_stride;
    c.scale_head_stride = p.scale_head_stride;
    c.block_size = p.block_size;
    c.num_blocks = p.num_blocks;
    *pages = c;
    if (key_bytes != nullptr) *key_bytes = size.key_bytes;
    if (value_bytes != nullptr) *value_bytes = size.value_bytes;
    if (scales != nullptr) *scales = size.scales;
  });
}

simdattn_status simdattn_first_key_read(size_t length, size_t q_tokens,
                                        size_t window, int32_t dropout,
                                        size_t* first) {
  constexpr const char* kFn = "simdattn_first_key_read";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(first, kFn, "first");
    *first = simdattn::FirstKeyRead(length, q_tokens, window,
                                    simdattn::Flag(dropout, kFn, "dropout"));
  });
}

simdattn_status simdattn_read_kv_slots(const simdattn_kv_pages* pages,
                                       const int64_t* slot_mapping,
                                       simdattn_tensor4 keys,
                                       simdattn_tensor4 values) {
  constexpr const char* kFn = "simdattn_read_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::ReadKVSlots(simdattn::ToPages(pages, kFn), slot_mapping,
                          simdattn::View4<float>(keys),
                          simdattn::View4<float>(values));
  });
}

simdattn_status simdattn_copy_kv_slots(const simdattn_kv_pages* pages,
                                       const int64_t* from, const int64_t* to,
                                       size_t count) {
  constexpr const char* kFn = "simdattn_copy_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::CopyKVSlots(simdattn::ToPages(pages, kFn), from, to, count);
  });
}

simdattn_status simdattn_copy_kv_blocks(const simdattn_kv_pages* pages,
                                        const int32_t* from, const int32_t* to,
                                        size_t count) {
  constexpr const char* kFn = "simdattn_copy_kv_blocks";
  return CallGuarded(kFn, [&] {
    simdattn::CopyKVBlocks(simdattn::ToPages(pages, kFn), from, to, count);
  });
}

simdattn_status simdattn_kv_transfer_bytes(const simdattn_kv_pages* pages,
                                           size_t count, size_t* bytes) {
  constexpr const char* kFn = "simdattn_kv_transfer_bytes";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(bytes, kFn, "bytes");
    *bytes = simdattn::KVTransferBytes(simdattn::ToPages(pages, kFn), count);
  });
}

simdattn_status simdattn_export_kv_slots(const simdattn_kv_pages* pages,
                                         const int64_t* slots, size_t count,
                                         void* buffer, size_t buffer_bytes) {
  constexpr const char* kFn = "simdattn_export_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::ExportKVSlots(simdattn::ToPages(pages, kFn), slots, count, buffer,
                            buffer_bytes);
  });
}

simdattn_status simdattn_import_kv_slots(const simdattn_kv_pages* pages,
                                         const int64_t* slots, size_t count,
                                         const void* buffer,
                                         size_t buffer_bytes) {
  constexpr const char* kFn = "simdattn_import_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::ImportKVSlots(simdattn::ToPages(pages, kFn), slots, count, buffer,
                            buffer_bytes);
  });
}

simdattn_status simdattn_varlen_attention(
    simdattn_const_tensor4 q, const simdattn_varlen_step* step,
    const simdattn_kv_pages* pages, simdattn_tensor4 out,
    const simdattn_attention_options* options) {
  constexpr const char* kFn = "simdattn_varlen_attention";
  return CallGuarded(kFn, [&] {
    const simdattn::VarlenStep s = simdattn::ToStep(step, kFn);
    const simdattn::AttentionOptions o = simdattn::ToOptions(options, kFn);
    simdattn::VarlenAttention(simdattn::View4<const float>(q), s,
                              simdattn::ToPages(pages, kFn),
                              simdattn::View4<float>(out), o);
  });
}

simdattn_status simdattn_varlen_plan_create(const simdattn_varlen_step* step,
                                            const simdattn_kv_pages* shape,
                                            size_t max_window,
                                            simdattn_varlen_plan** plan) {
  constexpr const char* kFn = "simdattn_varlen_plan_create";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(plan, kFn, "plan");
    *plan = new simdattn_varlen_plan{
        simdattn::VarlenPlan(simdattn::ToStep(step, kFn),
                             simdattn::ToPages(shape, kFn), max_window)};
  });
}

void simdattn_varlen_plan_destroy(simdattn_varlen_plan* plan) { delete plan; }

simdattn_status simdattn_varlen_plan_attention(
    const simdattn_varlen_plan* plan, simdattn_const_tensor4 q,
    const simdattn_kv_pages* pages, simdattn_tensor4 out,
    const simdattn_attention_options* options) {
  constexpr const char* kFn = "simdattn_varlen_plan_attention";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(plan, kFn, "plan");
    plan->plan.Attention(
        simdattn::View4<const float>(q), simdattn::ToPages(pages, kFn),
        simdattn::View4<float>(out), simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_varlen_plan_write_kv_slots(
    const simdattn_varlen_plan* plan, simdattn_const_tensor4 keys,
    simdattn_const_tensor4 values, const simdattn_kv_pages* pages,
    const simdattn_rope_options* rope) {
  constexpr const char* kFn = "simdattn_varlen_plan_write_kv_slots";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(plan, kFn, "plan");
    std::optional<simdattn::RopeOptions> r;
    if (rope != nullptr) r = simdattn::ToRope(*rope, kFn, "rope");
    plan->plan.WriteKVSlots(simdattn::View4<const float>(keys),
                            simdattn::View4<const float>(values),
                            simdattn::ToPages(pages, kFn), r ? &*r : nullptr);
  });
}

simdattn_status simdattn_kv_cache_export_bytes(const simdattn_kv_cache* cache,
                                               size_t count, size_t* bytes) {
  constexpr const char* kFn = "simdattn_kv_cache_export_bytes";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    simdattn::RequireNonNull(bytes, kFn, "bytes");
    *bytes = cache->cache.ExportBytes(count);
  });
}

simdattn_status simdattn_kv_cache_export(const simdattn_kv_cache* cache,
                                         size_t sequence, size_t first,
                                         size_t count, void* buffer,
                                         size_t buffer_bytes) {
  constexpr const char* kFn = "simdattn_kv_cache_export";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    simdattn::CheckExportBuffer(kFn, cache->cache, count, buffer_bytes);
    cache->cache.Export(sequence, first, count, buffer);
  });
}

simdattn_status simdattn_kv_cache_import(simdattn_kv_cache* cache,
                                         size_t sequence, const void* buffer,
                                         size_t buffer_bytes, size_t count) {
  constexpr const char* kFn = "simdattn_kv_cache_import";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    simdattn::CheckExportBuffer(kFn, cache->cache, count, buffer_bytes);
    cache->cache.Import(sequence, buffer, count);
  });
}

simdattn_status simdattn_kv_cache_clear(simdattn_kv_cache* cache) {
  constexpr const char* kFn = "simdattn_kv_cache_clear";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    cache->cache.Clear();
  });
}

simdattn_status simdattn_kv_cache_size(const simdattn_kv_cache* cache,
                                       size_t* size, size_t* capacity) {
  constexpr const char* kFn = "simdattn_kv_cache_size";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    if (size != nullptr) *size = cache->cache.size();
    if (capacity != nullptr) *capacity = cache->cache.capacity();
  });
}

simdattn_status simdattn_kv_cache_read(const simdattn_kv_cache* cache,
                                       size_t sequence, simdattn_tensor3 keys,
                                       simdattn_tensor3 values) {
  constexpr const char* kFn = "simdattn_kv_cache_read";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    cache->cache.Read(sequence, simdattn::View(keys), simdattn::View(values));
  });
}

simdattn_status simdattn_kv_cache_view(const simdattn_kv_cache* cache,
                                       simdattn_const_tensor4* keys,
                                       simdattn_const_tensor4* values) {
  constexpr const char* kFn = "simdattn_kv_cache_view";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(cache, kFn, "cache");
    if (keys != nullptr) *keys = simdattn::CView(cache->cache.keys());
    if (values != nullptr) *values = simdattn::CView(cache->cache.values());
  });
}

simdattn_status simdattn_module_create(const simdattn_module_config* config,
                                       simdattn_module** module) {
  constexpr const char* kFn = "simdattn_module_create";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(config, kFn, "config");
    simdattn::RequireNonNull(module, kFn, "module");
    *module = new simdattn_module(simdattn::MakeModule(*config));
  });
}

void simdattn_module_destroy(simdattn_module* module) { delete module; }

simdattn_status simdattn_module_shape(const simdattn_module* module,
                                      size_t* d_in, size_t* d_out,
                                      size_t* num_heads) {
  constexpr const char* kFn = "simdattn_module_shape";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    const simdattn::AttentionConfig& c = module->module.config();
    if (d_in != nullptr) *d_in = c.d_in;
    if (d_out != nullptr) *d_out = c.y_features();
    if (num_heads != nullptr) *num_heads = c.num_heads;
  });
}

simdattn_status simdattn_module_weight_count(const simdattn_module* module,
                                             size_t* count) {
  constexpr const char* kFn = "simdattn_module_weight_count";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    simdattn::RequireNonNull(count, kFn, "count");
    *count = module->weight_names.size();
  });
}

simdattn_status simdattn_module_weight_info(const simdattn_module* module,
                                            size_t index, const char** name,
                                            const size_t** shape, size_t* rank,
                                            int32_t* is_buffer) {
  constexpr const char* kFn = "simdattn_module_weight_info";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    const size_t count = module->weight_names.size();
    SIMDATTN_REQUIRE(index < count, kFn, "index (", index,
                     ") is not less than the number of tensors (", count, ")");
    if (name != nullptr) *name = module->weight_names[index].c_str();
    if (shape != nullptr) *shape = module->weight_shapes[index].data();
    if (rank != nullptr) *rank = module->weight_shapes[index].size();
    if (is_buffer != nullptr) *is_buffer = module->weight_is_buffer[index];
  });
}

simdattn_status simdattn_module_load_weights(
    simdattn_module* module, const simdattn_named_tensor* tensors, size_t count,
    const simdattn_load_options* options) {
  return simdattn::LoadWeights("simdattn_module_load_weights", module, tensors,
                               count, options);
}

simdattn_status simdattn_module_forward(
    const simdattn_module* module, simdattn_const_tensor3 x, simdattn_tensor3 y,
    const simdattn_forward_options* options) {
  constexpr const char* kFn = "simdattn_module_forward";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    module->module.Forward(simdattn::View(x), simdattn::View(y),
                           simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_module_forward_step(
    const simdattn_module* module, simdattn_const_tensor3 x,
    simdattn_kv_cache* cache, simdattn_tensor3 y,
    const simdattn_forward_options* options) {
  constexpr const char* kFn = "simdattn_module_forward_step";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    simdattn::RequireNonNull(cache, kFn, "cache");
    module->module.ForwardStep(simdattn::View(x), cache->cache,
                               simdattn::View(y),
                               simdattn::ToOptions(options, kFn));
  });
}

simdattn_status simdattn_module_forward_varlen(
    const simdattn_module* module, simdattn_const_tensor3 x,
    const simdattn_varlen_step* step, const simdattn_kv_pages* pages,
    simdattn_tensor3 y, const simdattn_forward_options* options) {
  constexpr const char* kFn = "simdattn_module_forward_varlen";
  return CallGuarded(kFn, [&] {
    simdattn::RequireNonNull(module, kFn, "module");
    const simdattn::VarlenStep v = simdattn::ToStep(step, kFn);
    SIMDATTN_REQUIRE(x.batch == 1 && y.batch == 1, kFn, "x and y have batch ",
                     x.batch, " and ", y.batch,
                     ": expected 1, the step's packed tokens");
    module->module.ForwardStep(
        simdattn::View(x).Sequence(0), v, simdattn::ToPages(pages, kFn),
        simdattn::View(y).Sequence(0), simdattn::ToOptions(options, kFn));
  });
}

}  // extern "C"
