// Drives the C API with arbitrary dims, strides, flags, probabilities and
// aliasing, on buffers sized exactly to what each view spans, under ASan and
// UBSan. A view that validation accepts is then read and written in full, so
// an access outside it is reported; a view whose extent overflows or whose
// data is null gets a tiny buffer and must be rejected. Every call must
// return OK, INVALID_ARGUMENT or OUT_OF_MEMORY with a message on failure and
// none on success; INTERNAL or a crash is a bug. Every options and config
// struct also gets a fuzzed struct_size now and then: zero (no
// SIMDATTN_*_INIT), too small, that of a newer header's struct with its new
// fields zero (accepted) or set (refused), or past the 4096-byte bound
// (refused).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "simdattn/simdattn_c.h"

namespace {

// Views spanning more floats than this are not called: the fuzzer could not
// back them with memory, and a valid one would be a legitimate access.
constexpr size_t kMaxFloats = size_t{1} << 14;

// Consumes the fuzzer's bytes; zeros once they run out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | Byte();
    return v;
  }
  uint64_t U64() { return uint64_t{U32()} << 32 | U32(); }
  // The decisions the 0.2.0 API added (struct sizes, the arithmetic, tensor
  // dtypes) read the input from its other end, so that the seeds written
  // before them drive the calls they did; their defaults are what a byte
  // below 240, and an exhausted input's 0, choose.
  uint8_t Tail() { return tail_ < size_ ? data_[size_ - 1 - tail_++] : 0; }
  uint32_t TailU32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | Tail();
    return v;
  }

  // Mostly small extents (0 included), sometimes ones that overflow.
  size_t Dim() {
    const uint8_t b = Byte();
    if (b < 232) return b % 7;
    static const size_t kHuge[] = {SIZE_MAX,         SIZE_MAX / 2,
                                   SIZE_MAX / 4 + 1, size_t{1} << 32,
                                   size_t{1} << 31,  (size_t{1} << 35) + 1,
                                   size_t{1} << 40,  size_t{1} << 62};
    return kHuge[b % 8];
  }
  // The dense stride, or one that is zero, too small, larger, or huge.
  size_t Stride(size_t natural) {
    switch (Byte() % 8) {
      case 0:
      case 1:
      case 2:
        return natural;
      case 3:
        return 0;
      case 4:
        return natural > 0 ? natural - 1 : 0;
      case 5:
        return natural + Byte() % 5;
      case 6:
        return Byte() % 9;
      default:
        return Dim();
    }
  }
  // 0/1 mostly; other values test the flag checks.
  int32_t Flag() {
    const uint8_t b = Byte();
    return b < 240 ? b % 2 : static_cast<int32_t>(U32());
  }
  float Float() {
    static const float kValues[] = {0.0f, 0.5f,  1.0f,  0.125f,
                                    2.0f, -1.0f, 0.999f};
    const uint8_t b = Byte();
    if (b < 224) return kValues[b % 7];
    const uint32_t bits = U32();  // NaN, inf, denormals, anything.
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t tail_ = 0;
};

// SIMDATTN_COMPUTE_FP32 mostly; bf16, or a value that is neither.
int32_t Compute(Input& in) {
  const uint8_t b = in.Tail();
  if (b < 240) return SIMDATTN_COMPUTE_FP32;
  return b % 4 != 0 ? SIMDATTN_COMPUTE_BF16
                    : static_cast<int32_t>(in.TailU32());
}

// The library's bound on struct_size: a larger one is garbage.
constexpr size_t kMaxStructSize = 4096;

// An options or config struct as a caller compiled against a newer header
// passes it: followed by the fields this version does not know (zero unless
// FuzzStructSize sets one), room for any struct_size up to past the bound.
template <typename T>
struct Grown {
  T value;
  uint8_t newer[kMaxStructSize + 1];
};
template <typename T>
Grown<T> Grow(const T& value) {
  return Grown<T>{value, {}};
}

// Sets g->value.struct_size: sizeof(T) mostly; else larger with the newer
// fields zero (accepted), or too small, covering a set newer field, past the
// bound, or garbage (refused, before anything past sizeof(T) is trusted).
// Returns whether a call given the struct must fail.
template <typename T>
bool FuzzStructSize(Input& in, Grown<T>* g) {
  T& v = g->value;
  v.struct_size = sizeof(T);
  const uint8_t b = in.Tail();
  if (b < 240) return false;
  switch (b % 8) {
    case 0:  // Zeroed without the macro, or below the first version's size.
      v.struct_size = in.Tail() % (sizeof(size_t) + 1);
      return true;
    case 1:
    case 2:  // A newer caller that leaves its new fields zero.
      v.struct_size = sizeof(T) + 1 + in.Tail() % 64;
      return false;
    case 3: {  // One that sets a new field.
      const size_t n = 1 + in.Tail() % 64;
      v.struct_size = sizeof(T) + n;
      g->newer[in.Tail() % n] = static_cast<uint8_t>(1 + in.Tail() % 255);
      return true;
    }
    case 4:
      v.struct_size = kMaxStructSize;  // The largest accepted.
      return false;
    case 5:
      v.struct_size = kMaxStructSize + 1;
      return true;
    default:  // Not backed: must be refused without a read past sizeof(T).
      v.struct_size = SIZE_MAX - in.Tail();
      return true;
  }
}

// Elements from the first to one past the last of a view; false if that
// overflows (then the view is not empty, and must be rejected).
bool Span(const size_t* dims, const size_t* strides, int rank, size_t* span) {
  for (int k = 0; k < rank; ++k) {
    if (dims[k] == 0) {
      *span = 0;
      return true;
    }
  }
  size_t last = dims[rank - 1];
  for (int k = 0; k < rank - 1; ++k) {
    size_t offset;
    if (__builtin_mul_overflow(dims[k] - 1, strides[k], &offset) ||
        __builtin_add_overflow(last, offset, &last)) {
      return false;
    }
  }
  *span = last;
  return true;
}

// Memory for a view: exactly its span when that is small; a few elements for
// a view that must be rejected. Keeps every buffer alive for one input.
class Arena {
 public:
  enum class Verdict { kBacked, kMustFail, kSkip };

  // null_is_absent: a null pointer means "no such input" (masks, bias,
  // attention weights), which is valid whatever the shape.
  template <typename T>
  Verdict Back(Input& in, const size_t* dims, const size_t* strides, int rank,
               T** data, bool null_is_absent) {
    size_t span = 0;
    const bool fits = Span(dims, strides, rank, &span);
    if (fits && span > kMaxFloats) return Verdict::kSkip;
    const bool null = in.Byte() % 16 == 0;
    if (null) {
      *data = nullptr;
      return null_is_absent || (fits && span == 0) ? Verdict::kBacked
                                                   : Verdict::kMustFail;
    }
    // A distinct heap block each, so that ASan sees the view's exact end.
    // Values: small integers, which keep every result finite.
    buffers_.emplace_back((fits ? span : 4) * sizeof(T));
    std::vector<uint8_t>& buffer = buffers_.back();
    using Mutable = std::remove_const_t<T>;
    Mutable* typed = reinterpret_cast<Mutable*>(buffer.data());
    for (size_t i = 0; i < (fits ? span : 4); ++i) {
      typed[i] = static_cast<Mutable>(in.Byte() % 5);
    }
    *data = typed;
    return fits ? Verdict::kBacked : Verdict::kMustFail;
  }

 private:
  // uint8_t storage, aligned by new for any T used here.
  std::vector<std::vector<uint8_t>> buffers_;
};

void Expect(bool condition) {
  if (!condition) std::abort();
}

// The status contract of every C function; a breach prints what happened.
void CheckStatus(simdattn_status status, bool must_fail) {
  const char* message = simdattn_last_error();
  const bool ok =
      message != nullptr &&
      ((status == SIMDATTN_STATUS_OK && !must_fail && message[0] == '\0') ||
       ((status == SIMDATTN_STATUS_INVALID_ARGUMENT ||
         status == SIMDATTN_STATUS_OUT_OF_MEMORY) &&
        message[0] != '\0'));
  if (!ok) {
    std::fprintf(stderr, "status %d (must fail: %d), message \"%s\"\n",
                 static_cast<int>(status), must_fail ? 1 : 0,
                 message ? message : "(null)");
    std::abort();
  }
}

// Fills a 4-D view's dims and strides from the input (last dim contiguous).
template <typename View>
void Shape4(Input& in, View* v) {
  for (size_t& d : v->dims) d = in.Dim();
  v->strides[2] = in.Stride(v->dims[3]);
  v->strides[1] = in.Stride(v->dims[2] * v->dims[3]);
  v->strides[0] = in.Stride(v->dims[1] * v->dims[2] * v->dims[3]);
}
// The same dims as `like`, usually; else fresh ones.
template <typename View, typename Like>
void Shape4Like(Input& in, const Like& like, View* v) {
  if (in.Byte() % 4 != 0) {
    std::memcpy(v->dims, like.dims, sizeof(v->dims));
    v->strides[2] = in.Stride(v->dims[3]);
    v->strides[1] = in.Stride(v->dims[2] * v->dims[3]);
    v->strides[0] = in.Stride(v->dims[1] * v->dims[2] * v->dims[3]);
  } else {
    Shape4(in, v);
  }
}

struct Call {
  Arena arena;
  bool must_fail = false;
  bool skip = false;

  template <typename T>
  void Back(Input& in, const size_t* dims, const size_t* strides, int rank,
            T** data, bool null_is_absent = false) {
    switch (arena.Back(in, dims, strides, rank, data, null_is_absent)) {
      case Arena::Verdict::kBacked:
        break;
      case Arena::Verdict::kMustFail:
        must_fail = true;
        break;
      case Arena::Verdict::kSkip:
        skip = true;
        break;
    }
  }
  template <typename View>
  void Back4(Input& in, View* v, bool null_is_absent = false) {
    Back(in, v->dims, v->strides, 4, &v->data, null_is_absent);
  }
  template <typename Matrix>
  void BackMatrix(Input& in, Matrix* m) {
    const size_t dims[2] = {m->rows, m->cols};
    const size_t strides[1] = {m->stride};
    Back(in, dims, strides, 2, &m->data);
  }
  // Floats a kernel reads by count (bias, key lengths): present or null.
  template <typename T>
  const T* Array(Input& in, size_t count) {
    if (in.Byte() % 4 == 0 || count > kMaxFloats) return nullptr;
    const size_t dims[1] = {count};
    T* data = nullptr;
    Back(in, dims, nullptr, 1, &data, /*null_is_absent=*/true);
    return data;
  }
};

// Options for C with n columns; returns whether their struct_size must be
// refused.
bool MatMulOptions(Input& in, Call& call, size_t n,
                   Grown<simdattn_matmul_options>* g) {
  simdattn_matmul_options& o = g->value;
  o.transpose_b = in.Flag();
  o.use_alpha = in.Flag();
  o.alpha = in.Float();
  o.beta = in.Float();
  o.bias = call.Array<float>(in, n);
  o.compute = Compute(in);
  return FuzzStructSize(in, g);
}

void FuzzMatMul(Input& in) {
  Call call;
  simdattn_const_matrix a{nullptr, in.Dim(), in.Dim(), 0};
  simdattn_const_matrix b{nullptr, in.Dim(), in.Dim(), 0};
  simdattn_matrix c{nullptr, in.Dim(), in.Dim(), 0};
  a.stride = in.Stride(a.cols);
  b.stride = in.Stride(b.cols);
  c.stride = in.Stride(c.cols);
  call.BackMatrix(in, &a);
  call.BackMatrix(in, &b);
  // C on A's memory: must be refused unless nothing is written.
  if (in.Byte() % 8 == 0) {
    c.data = const_cast<float*>(a.data);
  } else {
    call.BackMatrix(in, &c);
  }
  auto options = Grow<simdattn_matmul_options>(SIMDATTN_MATMUL_OPTIONS_INIT);
  const bool bad = MatMulOptions(in, call, c.cols, &options);
  if (call.skip) return;
  const bool with_options = in.Byte() % 8 != 0;
  CheckStatus(simdattn_matmul(a, b, c, with_options ? &options.value : nullptr),
              call.must_fail || (with_options && bad));
}

void FuzzBatchedMatMul(Input& in) {
  Call call;
  simdattn_const_tensor4 a, b;
  simdattn_tensor4 c;
  Shape4(in, &a);
  Shape4Like(in, a, &b);
  Shape4Like(in, a, &c);
  call.Back4(in, &a);
  call.Back4(in, &b);
  call.Back4(in, &c);
  auto options = Grow<simdattn_matmul_options>(SIMDATTN_MATMUL_OPTIONS_INIT);
  const bool bad = MatMulOptions(in, call, c.dims[3], &options);
  if (call.skip) return;
  CheckStatus(simdattn_batched_matmul(a, b, c, &options.value),
              call.must_fail || bad);
}

// A mask over scores shaped like `scores`, its views backed in `masks`;
// returns whether its struct_size must be refused.
template <typename Like>
bool Mask(Input& in, const Like& scores, Call& masks, Grown<simdattn_mask>* g) {
  simdattn_mask& mask = g->value;
  mask.causal = in.Flag();
  mask.causal_offset = in.Dim();
  if (in.Byte() % 2) {
    Shape4Like(in, scores, &mask.boolean_mask);
    masks.Back4(in, &mask.boolean_mask, /*null_is_absent=*/true);
  }
  if (in.Byte() % 2) {
    Shape4Like(in, scores, &mask.additive_mask);
    masks.Back4(in, &mask.additive_mask, /*null_is_absent=*/true);
  }
  mask.key_lengths = masks.Array<size_t>(in, scores.dims[0]);
  mask.causal_offsets = masks.Array<size_t>(in, scores.dims[0]);
  mask.window = in.Byte() % 2 ? in.Dim() : 0;
  mask.softcap = in.Byte() % 2 ? in.Float() : 0.0f;
  mask.alibi_slopes = masks.Array<float>(in, scores.dims[1]);
  mask.sinks = masks.Array<float>(in, scores.dims[1]);
  return FuzzStructSize(in, g);
}

void FuzzSoftmax(Input& in) {
  Call call;
  simdattn_const_tensor4 x;
  simdattn_tensor4 y;
  Shape4(in, &x);
  call.Back4(in, &x);
  const uint8_t placement = in.Byte() % 4;
  if (placement == 0) {  // In place.
    std::memcpy(y.dims, x.dims, sizeof(y.dims));
    std::memcpy(y.strides, x.strides, sizeof(y.strides));
    y.data = const_cast<float*>(x.data);
  } else {
    Shape4Like(in, x, &y);
    if (placement == 1) {
      // On x's memory with its own shape: refused unless it is the same
      // view or nothing is written (then x's buffer covers it).
      y.data = const_cast<float*>(x.data);
    } else {
      call.Back4(in, &y);
    }
  }
  // The mask's views count only when the mask is passed at all.
  Call masks;
  auto mask = Grow<simdattn_mask>(SIMDATTN_MASK_INIT);
  const bool bad_mask = Mask(in, x, masks, &mask);
  const float scale = in.Float();
  const bool with_mask = in.Byte() % 8 != 0;
  if (call.skip || masks.skip) return;
  CheckStatus(simdattn_softmax(x, y, scale, with_mask ? &mask.value : nullptr),
              call.must_fail || (with_mask && (masks.must_fail || bad_mask)));
}

void FuzzDropout(Input& in) {
  Call call;
  simdattn_tensor4 x;
  Shape4(in, &x);
  call.Back4(in, &x);
  const float p = in.Float();
  const uint64_t seed = in.U64(), offset = in.U64();
  if (call.skip) return;
  CheckStatus(simdattn_dropout(x, p, seed, offset), call.must_fail);
  // RoPE on the same view, with options read after dropout's.
  Call rope_call;
  auto rope = Grow<simdattn_rope_options>(SIMDATTN_ROPE_OPTIONS_INIT);
  rope.value.interleaved = in.Flag();
  rope.value.theta = in.Byte() % 2 ? in.Float() : 0.0f;  // 0: 10000.
  rope.value.rotary_dim = in.Byte() % 4 == 0 ? in.Dim() : 0;
  rope.value.positions = rope_call.Array<size_t>(in, x.dims[0]);
  const bool bad = FuzzStructSize(in, &rope);
  const bool with_options = in.Byte() % 8 != 0;
  if (rope_call.skip) return;
  CheckStatus(simdattn_apply_rope(x, with_options ? &rope.value : nullptr),
              call.must_fail || (with_options && (rope_call.must_fail || bad)));
}

// Fused attention: q, k, v and out usually consistent (k like q, v like k,
// out like q), sometimes not; out sometimes on q's memory.
void FuzzAttention(Input& in) {
  Call call;
  simdattn_const_tensor4 q, k, v;
  simdattn_tensor4 out;
  Shape4(in, &q);
  Shape4Like(in, q, &k);
  Shape4Like(in, k, &v);
  Shape4Like(in, q, &out);
  call.Back4(in, &q);
  call.Back4(in, &k);
  call.Back4(in, &v);
  if (in.Byte() % 8 == 0) {
    out.data = const_cast<float*>(q.data);
  } else {
    call.Back4(in, &out);
  }
  Call masks;
  auto grown_options =
      Grow<simdattn_attention_options>(SIMDATTN_ATTENTION_OPTIONS_INIT);
  simdattn_attention_options& options = grown_options.value;
  auto mask = Grow<simdattn_mask>(SIMDATTN_MASK_INIT);
  simdattn_const_tensor4 scores = q;
  scores.dims[3] = k.dims[2];
  const bool bad_mask = Mask(in, scores, masks, &mask);
  options.mask = &mask.value;
  options.has_scale = in.Flag();
  options.scale = in.Float();
  options.dropout = in.Byte() % 2 ? in.Float() : 0.0f;
  options.dropout_seed = in.U64();
  options.dropout_offset = in.U64();
  // Each row's log-sum-exp, (batch, q_heads, q_tokens), or on out's memory.
  if (in.Byte() % 2) {
    const size_t dims[3] = {q.dims[0], q.dims[1], q.dims[2]};
    const size_t strides[2] = {q.dims[1] * q.dims[2], q.dims[2]};
    if (in.Byte() % 8 == 0) {
      options.log_sum_exp = out.data;
    } else {
      masks.Back(in, dims, strides, 3, &options.log_sum_exp,
                 /*null_is_absent=*/true);
    }
  }
  options.compute = Compute(in);
  const bool bad = FuzzStructSize(in, &grown_options) || bad_mask;
  const bool with_options = in.Byte() % 8 != 0;
  if (call.skip || masks.skip) return;
  CheckStatus(simdattn_scaled_dot_product_attention(
                  q, k, v, out, with_options ? &options : nullptr),
              call.must_fail || (with_options && (masks.must_fail || bad)));
}

// (batch, heads, n, head_dim) keys or values to append to `cache_like`,
// usually of its shape with n tokens.
template <typename View, typename Like>
void AppendShape(Input& in, const Like& cache_like, View* v) {
  Shape4Like(in, cache_like, v);
  if (in.Byte() % 4 != 0) v->dims[2] = in.Dim();
}

// A KV cache over fuzzed caller views (sometimes overlapping), a few
// appends, and views of what it holds, read in full.
void FuzzKVCache(Input& in) {
  Call call;
  simdattn_tensor4 keys, values;
  Shape4(in, &keys);
  Shape4Like(in, keys, &values);
  call.Back4(in, &keys);
  if (in.Byte() % 8 == 0) {
    values.data = keys.data;
  } else {
    call.Back4(in, &values);
  }
  if (call.skip) return;
  simdattn_kv_cache* cache = nullptr;
  const simdattn_status created =
      simdattn_kv_cache_create_in(keys, values, &cache);
  CheckStatus(created, call.must_fail);
  if (created != SIMDATTN_STATUS_OK) {
    Expect(cache == nullptr);
    return;
  }
  for (int step = 0; step < 3; ++step) {
    Call add;
    simdattn_const_tensor4 new_keys, new_values;
    AppendShape(in, keys, &new_keys);
    AppendShape(in, new_keys, &new_values);
    add.Back4(in, &new_keys);
    add.Back4(in, &new_values);
    if (!add.skip) {
      CheckStatus(
          simdattn_kv_cache_append(cache, new_keys, new_values, nullptr),
          add.must_fail);
    }
    size_t size = 0, capacity = 0;
    CheckStatus(simdattn_kv_cache_size(cache, &size, &capacity), false);
    Expect(size <= capacity && capacity == keys.dims[2]);
    simdattn_const_tensor4 held;
    CheckStatus(simdattn_kv_cache_view(cache, &held, nullptr), false);
    Expect(held.dims[2] == size);
    // Every element the view claims must lie in the caller's buffer. (With
    // an extent of 0 there is none, however large the others.)
    size_t span = 0;
    Span(held.dims, held.strides, 4, &span);
    if (span == 0) continue;
    float sum = 0.0f;
    for (size_t b = 0; b < held.dims[0]; ++b)
      for (size_t h = 0; h < held.dims[1]; ++h)
        for (size_t t = 0; t < held.dims[2]; ++t)
          for (size_t c = 0; c < held.dims[3]; ++c)
            sum += held.data[b * held.strides[0] + h * held.strides[1] +
                             t * held.strides[2] + c];
    Expect(sum == sum);
  }
  if (in.Byte() % 2) CheckStatus(simdattn_kv_cache_clear(cache), false);
  simdattn_kv_cache_destroy(cache);
}

void FuzzModule(Input& in) {
  auto grown_config = Grow<simdattn_module_config>(SIMDATTN_MODULE_CONFIG_INIT);
  simdattn_module_config& config = grown_config.value;
  config.kind =
      in.Byte() % 8 == 7 ? static_cast<int32_t>(in.U32()) : in.Byte() % 6;
  config.d_in = in.Dim();
  config.d_out = in.Dim();
  config.context_length = in.Dim();  // 0: unbounded.
  config.dropout = in.Float();
  config.num_heads = in.Dim();
  config.num_kv_heads = in.Dim();
  config.qkv_bias = in.Flag();
  config.seed = in.U64();
  // Weights of more than a few MB would be allocated and initialised for
  // real (slow, and a failing `new` is fatal under ASan, which cannot throw
  // std::bad_alloc): skip those. Sizes whose products overflow or exceed
  // any vector are still tried: they must be refused before allocating.
  const bool multi = config.kind == SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER;
  size_t features = 0, rows = 0, weights = 0;
  const bool estimated =
      !__builtin_mul_overflow(
          config.d_out, multi && config.num_heads > 0 ? config.num_heads : 1,
          &features) &&
      !__builtin_add_overflow(config.d_in, features + 1, &rows) &&
      features < SIZE_MAX / 8 &&
      !__builtin_mul_overflow(rows, 4 * features + 1, &weights);
  if (!estimated || weights > (size_t{1} << 22)) {
    // Only sizes no machine could hold may go on: beyond 2^62 floats.
    if (estimated ||
        (config.d_in < (size_t{1} << 62) && features < (size_t{1} << 62))) {
      return;
    }
  }
  const bool bad_config = FuzzStructSize(in, &grown_config);
  simdattn_module* module = nullptr;
  // Weights of absurd size may honestly be out of memory.
  const simdattn_status created = simdattn_module_create(&config, &module);
  CheckStatus(created, bad_config);
  if (created != SIMDATTN_STATUS_OK) {
    Expect(module == nullptr);
    return;
  }
  size_t d_in = 0, d_out = 0, heads = 0, count = 0;
  CheckStatus(simdattn_module_shape(module, &d_in, &d_out, &heads), false);
  CheckStatus(simdattn_module_weight_count(module, &count), false);

  Call call;
  // A state_dict from the module's own names and shapes, sometimes altered.
  std::vector<simdattn_named_tensor> tensors;
  std::vector<std::vector<size_t>> shapes;
  for (size_t i = 0; i < count && i < 64; ++i) {
    simdattn_named_tensor t;
    const size_t* shape = nullptr;
    CheckStatus(simdattn_module_weight_info(module, i, &t.name, &shape, &t.rank,
                                            nullptr),
                false);
    shapes.emplace_back(shape, shape + t.rank);
    if (in.Byte() % 16 == 0 && t.rank > 0) shapes.back()[0] = in.Dim();
    t.shape = shapes.back().data();
    size_t elements = 1;
    for (size_t d : shapes.back()) {
      if (__builtin_mul_overflow(elements, d, &elements)) elements = SIZE_MAX;
    }
    t.data = call.Array<float>(in, elements);
    // Float mostly; else bf16 or f16 bits (in the floats' memory, which
    // holds twice as many), or not a simdattn_element_type.
    const uint8_t dtype = in.Tail();
    t.dtype = dtype < 240 ? SIMDATTN_F32 : dtype % 4;
    if (in.Byte() % 16 != 0) tensors.push_back(t);
  }
  auto load = Grow<simdattn_load_options>(SIMDATTN_LOAD_OPTIONS_INIT);
  const uint8_t keep = in.Tail();
  load.value.keep_dtype = keep < 240 ? 0 : keep % 4 == 0 ? 2 : 1;
  const bool bad_load = FuzzStructSize(in, &load);
  const bool with_load = load.value.keep_dtype != 0 || bad_load;
  if (!call.skip && in.Byte() % 2) {
    // The mask buffers hold arbitrary values here: usually refused.
    CheckStatus(
        simdattn_module_load_weights(module, tensors.data(), tensors.size(),
                                     with_load ? &load.value : nullptr),
        with_load && bad_load);
  }

  // x and y; the attention weights apart, since a step without options
  // never sees them.
  Call forward, weights_view;
  simdattn_const_tensor3 x;
  simdattn_tensor3 y;
  x.batch = in.Dim();
  x.tokens = in.Dim();
  x.features = in.Byte() % 4 ? d_in : in.Dim();
  x.token_stride = in.Stride(x.features);
  x.batch_stride = in.Stride(x.tokens * x.token_stride);
  y.batch = in.Byte() % 8 ? x.batch : in.Dim();
  y.tokens = in.Byte() % 8 ? x.tokens : in.Dim();
  y.features = in.Byte() % 4 ? d_out : in.Dim();
  y.token_stride = in.Stride(y.features);
  y.batch_stride = in.Stride(y.tokens * y.token_stride);
  const size_t x_dims[3] = {x.batch, x.tokens, x.features};
  const size_t x_strides[2] = {x.batch_stride, x.token_stride};
  const size_t y_dims[3] = {y.batch, y.tokens, y.features};
  const size_t y_strides[2] = {y.batch_stride, y.token_stride};
  forward.Back(in, x_dims, x_strides, 3, &x.data);
  forward.Back(in, y_dims, y_strides, 3, &y.data);
  auto grown_options =
      Grow<simdattn_forward_options>(SIMDATTN_FORWARD_OPTIONS_INIT);
  simdattn_forward_options& options = grown_options.value;
  options.training = in.Flag();
  options.dropout_seed = in.U64();
  options.dropout_offset = in.U64();
  if (in.Byte() % 2) {
    options.attention_weights.dims[0] = x.batch;
    options.attention_weights.dims[1] = heads;
    options.attention_weights.dims[2] = x.tokens;
    options.attention_weights.dims[3] = x.tokens;
    if (in.Byte() % 4 == 0) {
      Shape4(in, &options.attention_weights);
    } else {
      simdattn_tensor4& w = options.attention_weights;
      w.strides[2] = in.Stride(w.dims[3]);
      w.strides[1] = in.Stride(w.dims[2] * w.dims[3]);
      w.strides[0] = in.Stride(w.dims[1] * w.dims[2] * w.dims[3]);
    }
    weights_view.Back4(in, &options.attention_weights, /*null_is_absent=*/true);
  }
  options.compute = Compute(in);
  const bool bad_options = FuzzStructSize(in, &grown_options);
  if (!forward.skip && !weights_view.skip) {
    CheckStatus(simdattn_module_forward(module, x, y, &options),
                forward.must_fail || weights_view.must_fail || bad_options);
    // A generation step on the same views through a small owned cache,
    // usually shaped for the module.
    simdattn_kv_cache* cache = nullptr;
    const size_t kv_heads =
        config.num_kv_heads > 0 ? config.num_kv_heads : heads;
    const size_t head_dim = heads > 0 ? d_out / heads : 0;
    const size_t cache_dims[4] = {in.Byte() % 4 ? x.batch : in.Byte() % 7u,
                                  in.Byte() % 4 ? kv_heads : in.Byte() % 7u,
                                  static_cast<size_t>(in.Byte() % 9),
                                  in.Byte() % 4 ? head_dim : in.Byte() % 7u};
    size_t floats = 1;
    for (size_t dim : cache_dims) {
      if (__builtin_mul_overflow(floats, dim, &floats)) floats = SIZE_MAX;
    }
    if (in.Byte() % 2 && floats <= kMaxFloats) {
      // bf16 forward steps need a bf16 cache: one now and then.
      auto cache_config =
          Grow<simdattn_kv_cache_config>(SIMDATTN_KV_CACHE_CONFIG_INIT);
      const uint8_t type = in.Tail();
      cache_config.value.type = type < 240 ? SIMDATTN_F32 : type % 4;
      const bool bad_cache_config = FuzzStructSize(in, &cache_config);
      CheckStatus(
          simdattn_kv_cache_create(cache_dims[0], cache_dims[1], cache_dims[2],
                                   cache_dims[3], &cache_config.value, &cache),
          bad_cache_config);
      if (cache != nullptr) {
        const bool with_options = in.Byte() % 2;
        CheckStatus(
            simdattn_module_forward_step(module, x, cache, y,
                                         with_options ? &options : nullptr),
            forward.must_fail ||
                (with_options && (weights_view.must_fail || bad_options)));
        simdattn_kv_cache_destroy(cache);
      }
    }
  }
  simdattn_module_destroy(module);
}

// A cache of any element type and layout (small shapes: its memory is the
// cache's own) through fuzzed operations, sequences and lengths, and
// attention over it: every call succeeds or fails cleanly.
void FuzzTypedKVCache(Input& in) {
  auto config = Grow<simdattn_kv_cache_config>(SIMDATTN_KV_CACHE_CONFIG_INIT);
  config.value.type = in.Byte() % 9;  // 8: not a type.
  // fp8's scales, 0 (the default) or anything.
  config.value.key_scale = in.Byte() % 4 == 0 ? in.Float() : 0.0f;
  config.value.value_scale = in.Byte() % 4 == 0 ? in.Float() : 0.0f;
  static const size_t kBlockSizes[] = {0, 16, 32, 256, 24, 8};
  config.value.block_size = kBlockSizes[in.Byte() % 6];
  config.value.num_blocks = in.Byte() % 4 == 0 ? in.Byte() % 12 : 0;
  // A rolling window (refused without pages) now and then.
  config.value.window = in.Tail() >= 224 ? in.Tail() % 40 : 0;
  // RoPE on append: any nonzero flag sets it.
  auto rope = Grow<simdattn_rope_options>(SIMDATTN_ROPE_OPTIONS_INIT);
  const bool with_rope = in.Flag() != 0;
  rope.value.interleaved = in.Flag();
  rope.value.theta = in.Byte() % 8 == 0 ? in.Float() : 0.0f;
  rope.value.rotary_dim = in.Byte() % 4 == 0 ? in.Byte() % 24 : 0;
  const size_t batch = in.Byte() % 4, kv_heads = in.Byte() % 4;
  const size_t capacity = in.Byte() % 70;
  // Whole blocks of 32 for q8_0 and q4_0 sometimes, other dims too.
  const uint8_t dim = in.Byte();
  const size_t head_dim = dim >= 224 ? 32 * (dim % 3) : dim % 21;
  // A cache knows its positions: positions given are refused.
  const size_t position = 7;
  const bool positions = in.Tail() >= 248;
  if (positions) rope.value.positions = &position;
  if (with_rope) config.value.rope = &rope.value;
  const bool bad = FuzzStructSize(in, &config) ||
                   (with_rope && (FuzzStructSize(in, &rope) || positions));
  simdattn_kv_cache* cache = nullptr;
  const simdattn_status created = simdattn_kv_cache_create(
      batch, kv_heads, capacity, head_dim, &config.value, &cache);
  CheckStatus(created, bad);
  if (created != SIMDATTN_STATUS_OK) return;
  std::vector<float> data;
  const auto tensor = [&](size_t d0, size_t d1, size_t d2, size_t d3) {
    data.resize(d0 * d1 * d2 * d3);
    for (float& x : data) x = in.Float();
    simdattn_const_tensor4 t;
    t.data = data.data();
    t.dims[0] = d0, t.dims[1] = d1, t.dims[2] = d2, t.dims[3] = d3;
    t.strides[0] = d1 * d2 * d3, t.strides[1] = d2 * d3, t.strides[2] = d3;
    return t;
  };
  for (int step = 0; step < 8; ++step) {
    const size_t seq = in.Byte() % (batch + 1), n = in.Byte() % 20;
    const uint8_t op = in.Byte();
    if (op % 7 == 0) {  // To some sequences (maybe repeated, out of range).
      const size_t count = in.Byte() % (batch + 2);
      std::vector<size_t> sequences(count);
      for (size_t& b : sequences) b = in.Byte() % (batch + 1);
      const simdattn_const_tensor4 k = tensor(count, kv_heads, n, head_dim);
      CheckStatus(simdattn_kv_cache_append(cache, k, k, sequences.data()),
                  false);
    } else if (op % 7 == 1) {
      const simdattn_const_tensor4 k = tensor(batch, kv_heads, n, head_dim);
      CheckStatus(simdattn_kv_cache_append(cache, k, k, nullptr), false);
    } else if (op % 7 == 2 && op >= 224) {  // Moved between sequences.
      const size_t first = in.Byte() % 30, count = in.Byte() % 30;
      size_t bytes = 0;
      CheckStatus(simdattn_kv_cache_export_bytes(cache, count, &bytes), false);
      std::vector<uint8_t> buffer(bytes);
      const simdattn_status exported = simdattn_kv_cache_export(
          cache, seq, first, count, buffer.data(), buffer.size());
      CheckStatus(exported, false);
      if (exported == SIMDATTN_STATUS_OK) {
        CheckStatus(
            simdattn_kv_cache_import(cache, in.Byte() % (batch + 1),
                                     buffer.data(), buffer.size(), count),
            false);
      }
    } else if (op % 7 == 2) {
      CheckStatus(simdattn_kv_cache_truncate(cache, seq, in.Byte() % 80),
                  false);
    } else if (op % 7 == 3) {
      CheckStatus(simdattn_kv_cache_copy(cache, seq, in.Byte() % (batch + 1)),
                  false);
    } else if (op % 7 == 4) {
      std::vector<size_t> order(batch + 1);
      for (size_t& b : order) b = in.Byte() % (batch + 1);
      CheckStatus(simdattn_kv_cache_reorder(cache, order.data()), false);
    } else if (op % 7 == 5) {
      const size_t heads = kv_heads * (1 + in.Byte() % 2) + in.Byte() % 2;
      const simdattn_const_tensor4 q =
          tensor(batch, heads, in.Byte() % 4, head_dim);
      std::vector<float> out(q.dims[0] * q.dims[1] * q.dims[2] * q.dims[3]);
      simdattn_tensor4 o;
      o.data = out.data();
      std::memcpy(o.dims, q.dims, sizeof(o.dims));
      std::memcpy(o.strides, q.strides, sizeof(o.strides));
      auto options =
          Grow<simdattn_attention_options>(SIMDATTN_ATTENTION_OPTIONS_INIT);
      auto mask = Grow<simdattn_mask>(SIMDATTN_MASK_INIT);
      mask.value.causal = in.Flag();
      mask.value.window = in.Byte() % 8;
      options.value.mask = &mask.value;
      // bf16 arithmetic: over a bf16 cache, else refused.
      options.value.compute = Compute(in);
      const bool bad_options =
          FuzzStructSize(in, &options) || FuzzStructSize(in, &mask);
      CheckStatus(simdattn_kv_cache_attention(q, cache, o, &options.value),
                  bad_options);
    } else {
      // A sequence's length, then its keys and values read back as float
      // into buffers of exactly that many tokens (a refused length leaves
      // 0); now and then the keys' view claims a token more, which must be
      // refused before anything is written.
      size_t length = 0;
      const simdattn_status known =
          simdattn_kv_cache_length(cache, seq, &length);
      CheckStatus(known, false);
      std::vector<float> keys(kv_heads * length * head_dim, -1.0f);
      std::vector<float> values(keys.size(), -1.0f);
      const bool too_long = in.Tail() >= 248;
      const auto view = [&](std::vector<float>& v, size_t tokens) {
        simdattn_tensor3 t;
        t.data = v.data();
        t.batch = kv_heads, t.tokens = tokens, t.features = head_dim;
        t.batch_stride = tokens * head_dim, t.token_stride = head_dim;
        return t;
      };
      CheckStatus(
          simdattn_kv_cache_read(cache, seq, view(keys, length + too_long),
                                 view(values, length)),
          known != SIMDATTN_STATUS_OK || too_long);
    }
  }
  simdattn_kv_cache_destroy(cache);
}

// A serving step over a pool of the fuzzer's own memory, sized exactly for
// the layout it claims (dense or with padded strides, f32, bf16, int8 or
// q8_0): slots, query starts, sequence lengths and block-table entries
// anything, some out of range, repeated or decreasing; a window that lets
// early entries be -1. Accepted calls read and write inside the pool.
void FuzzVarlenStep(Input& in) {
  static const int32_t kTypes[] = {SIMDATTN_F32, SIMDATTN_BF16, SIMDATTN_INT8,
                                   SIMDATTN_Q8_0};
  const int32_t type = kTypes[in.Byte() % 4];
  const bool blocks32 = type == SIMDATTN_Q8_0;
  const size_t kv_heads = 1 + in.Byte() % 2, group = 1 + in.Byte() % 2;
  const size_t head_dim = blocks32 ? 32 : 1 + in.Byte() % 9;
  const size_t block_size = in.Byte() % 8 == 0 ? 24 : 16;  // 24: refused.
  const size_t num_blocks = 1 + in.Byte() % 6;
  const size_t row = head_dim + (blocks32 ? 0 : in.Byte() % 3);
  auto pages = Grow<simdattn_kv_pages>(SIMDATTN_KV_PAGES_INIT);
  simdattn_kv_pages& p = pages.value;
  p.type = type;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.row_stride = row;
  p.head_stride = block_size * row;
  p.block_stride = kv_heads * p.head_stride;
  p.block_size = block_size;
  p.num_blocks = num_blocks;
  const size_t elements = num_blocks * p.block_stride;
  const size_t bytes = type == SIMDATTN_F32    ? 4 * elements
                       : type == SIMDATTN_BF16 ? 2 * elements
                       : type == SIMDATTN_INT8 ? elements
                                               : elements / 32 * 34;
  std::vector<uint8_t> keys(bytes), values(bytes);
  std::vector<float> key_scales(num_blocks * kv_heads * block_size),
      value_scales(key_scales.size());
  p.keys = keys.data();
  p.values = values.data();
  if (type == SIMDATTN_INT8) {
    p.key_scales = key_scales.data();
    p.value_scales = value_scales.data();
    p.scale_head_stride = block_size;
    p.scale_block_stride = kv_heads * block_size;
  }
  // The step's tokens, written by slot.
  const size_t tokens = in.Byte() % 12;
  std::vector<int64_t> slots(tokens);
  for (int64_t& slot : slots) {
    const uint8_t b = in.Byte();
    slot = b >= 250  ? -1
           : b < 240 ? b % (num_blocks * 16 + 2)
                     : static_cast<int64_t>(in.U64());
  }
  std::vector<float> kv(tokens * kv_heads * head_dim);
  for (float& x : kv) x = in.Float();
  simdattn_const_tensor4 k{kv.data(),
                           {1, kv_heads, tokens, head_dim},
                           {0, head_dim, kv_heads * head_dim}};
  const bool bad_pages = FuzzStructSize(in, &pages);
  CheckStatus(simdattn_write_kv_slots(k, k, slots.data(), &p), bad_pages);
  // The pool operations over the same slots: read, copy onto the slots in
  // reverse, a transfer out and back in (a byte sometimes flipped), and the
  // fused rotate-and-write.
  {
    std::vector<int64_t> reversed(slots.rbegin(), slots.rend());
    std::vector<float> read(kv.size() + 1);
    simdattn_tensor4 r{read.data(),
                       {1, kv_heads, tokens, head_dim},
                       {0, head_dim, kv_heads * head_dim}};
    const uint8_t op = in.Byte();
    if (op % 4 == 0) {
      CheckStatus(simdattn_read_kv_slots(&p, slots.data(), r, r), tokens != 0);
    } else if (op % 4 == 1) {
      CheckStatus(
          simdattn_copy_kv_slots(&p, slots.data(), reversed.data(), tokens),
          bad_pages);
    } else if (op % 4 == 2) {
      size_t transfer = 0;
      const simdattn_status sized =
          simdattn_kv_transfer_bytes(&p, tokens, &transfer);
      CheckStatus(sized, bad_pages);
      if (sized == SIMDATTN_STATUS_OK) {
        std::vector<uint8_t> buffer(transfer);
        const simdattn_status out = simdattn_export_kv_slots(
            &p, slots.data(), tokens, buffer.data(), buffer.size());
        CheckStatus(out, false);
        const bool flip = out == SIMDATTN_STATUS_OK && in.Byte() % 4 == 0;
        if (flip) buffer[in.Byte() % buffer.size()] ^= 1 + in.Byte() % 255;
        CheckStatus(simdattn_import_kv_slots(&p, reversed.data(), tokens,
                                             buffer.data(), buffer.size()),
                    flip || out != SIMDATTN_STATUS_OK);
      }
    } else {
      simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
      rope.rotary_dim = in.Byte() % 4 * 2;
      std::vector<size_t> positions(tokens);
      for (size_t& position : positions) position = in.Byte();
      CheckStatus(simdattn_write_kv_slots_rope(k, k, slots.data(), &p, &rope,
                                               positions.data()),
                  bad_pages);
    }
  }
  // Attention over up to 3 sequences of the pool.
  const size_t seqs = in.Byte() % 4, per_sequence = 1 + in.Byte() % 3;
  std::vector<size_t> starts(seqs + 1, 0), lengths(seqs);
  std::vector<int32_t> table(seqs * per_sequence);
  for (size_t b = 0; b < seqs; ++b) {
    starts[b + 1] = starts[b] + in.Byte() % 4;
    if (in.Byte() % 16 == 0) starts[b + 1] = in.Byte() % 3;  // Maybe back.
    lengths[b] = in.Byte() % 50;
  }
  for (int32_t& entry : table) {
    const uint8_t b = in.Byte();
    entry = b >= 248 ? -1 : static_cast<int32_t>(b % (num_blocks + 1));
  }
  auto step = Grow<simdattn_varlen_step>(SIMDATTN_VARLEN_STEP_INIT);
  step.value.num_seqs = seqs;
  step.value.query_starts = starts.data();
  step.value.seq_lens = lengths.data();
  step.value.block_table = table.data();
  step.value.blocks_per_sequence = per_sequence;
  const size_t q_tokens = starts.back(), heads = kv_heads * group;
  std::vector<float> q(q_tokens * heads * head_dim, 1.0f), out(q.size());
  std::vector<float> lse(heads * q_tokens);
  simdattn_const_tensor4 qv{q.data(),
                            {1, heads, q_tokens, head_dim},
                            {0, head_dim, heads * head_dim}};
  simdattn_tensor4 ov{out.data(),
                      {1, heads, q_tokens, head_dim},
                      {0, head_dim, heads * head_dim}};
  auto options =
      Grow<simdattn_attention_options>(SIMDATTN_ATTENTION_OPTIONS_INIT);
  auto mask = Grow<simdattn_mask>(SIMDATTN_MASK_INIT);
  mask.value.causal = in.Flag();
  mask.value.window = in.Byte() % 24;
  options.value.mask = &mask.value;
  if (in.Byte() % 2 == 0) options.value.log_sum_exp = lse.data();
  const bool bad_options = FuzzStructSize(in, &options);
  const bool bad_mask = FuzzStructSize(in, &mask);
  const bool bad_step = FuzzStructSize(in, &step) || bad_pages;
  const simdattn_status unplanned =
      simdattn_varlen_attention(qv, &step.value, &p, ov, &options.value);
  CheckStatus(unplanned, bad_options || bad_mask || bad_step);
  // The same step planned (for the call's window): it refuses what the
  // unplanned call refuses, at creation or in the call, and else gives its
  // bits.
  {
    simdattn_varlen_plan* plan = nullptr;
    const simdattn_status made = simdattn_varlen_plan_create(
        &step.value, &p, bad_mask ? 0 : mask.value.window, &plan);
    CheckStatus(made, bad_step);
    if (made == SIMDATTN_STATUS_OK) {
      std::vector<float> planned(out.size());
      simdattn_tensor4 pv = ov;
      pv.data = planned.data();
      const simdattn_status run =
          simdattn_varlen_plan_attention(plan, qv, &p, pv, &options.value);
      CheckStatus(run, bad_options || bad_mask);
      if ((run == SIMDATTN_STATUS_OK) != (unplanned == SIMDATTN_STATUS_OK) ||
          (run == SIMDATTN_STATUS_OK && !out.empty() &&
           std::memcmp(planned.data(), out.data(),
                       out.size() * sizeof(float)) != 0)) {
        std::fprintf(stderr, "planned %d, unplanned %d, or their bits differ\n",
                     static_cast<int>(run), static_cast<int>(unplanned));
        std::abort();
      }
      simdattn_varlen_plan_destroy(plan);
    } else if (unplanned == SIMDATTN_STATUS_OK) {
      std::fprintf(stderr, "the plan refused a step the call took: %s\n",
                   simdattn_last_error());
      std::abort();
    }
  }

  // A llama-named module's step over the same pool and sequences (its own
  // slots, one per packed token), sometimes with rotary embeddings.
  if (in.Byte() % 2 != 0) return;
  auto config = Grow<simdattn_module_config>(SIMDATTN_MODULE_CONFIG_INIT);
  simdattn_module_config& c = config.value;
  c.kind = SIMDATTN_MULTI_HEAD_ATTENTION;
  c.d_in = 1 + in.Byte() % 5;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.d_out = heads * head_dim;
  c.weight_names = in.Byte() % 8 == 0 ? 3 : in.Byte() % 2;  // 3: refused.
  c.out_bias = c.weight_names == SIMDATTN_WEIGHTS_LLAMA ? in.Flag() : 0;
  c.window = mask.value.window;
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  if (head_dim % 2 == 0 && in.Flag()) c.rope = &rope;
  const bool bad_config = FuzzStructSize(in, &config);
  simdattn_module* module = nullptr;
  const simdattn_status created = simdattn_module_create(&c, &module);
  CheckStatus(created, bad_config);
  if (created != SIMDATTN_STATUS_OK) return;
  size_t y_features = 0;
  CheckStatus(simdattn_module_shape(module, nullptr, &y_features, nullptr),
              false);
  std::vector<int64_t> step_slots(q_tokens);
  for (int64_t& slot : step_slots) {
    const uint8_t b = in.Byte();
    slot = b >= 250 ? -1 : b % (num_blocks * 16 + 2);
  }
  step.value.slot_mapping = step_slots.data();
  std::vector<float> x(q_tokens * c.d_in), y(q_tokens * y_features);
  for (float& value : x) value = in.Float();
  const simdattn_const_tensor3 xv{x.data(),          1,     q_tokens, c.d_in,
                                  q_tokens * c.d_in, c.d_in};
  const simdattn_tensor3 yv{
      y.data(), 1, q_tokens, y_features, q_tokens * y_features, y_features};
  CheckStatus(
      simdattn_module_forward_varlen(module, xv, &step.value, &p, yv, nullptr),
      bad_step);
  simdattn_module_destroy(module);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  switch (in.Byte() % 8) {
    case 0:
      // Half of the matmul seeds drive a serving step instead.
      if (in.Tail() % 2 == 0) {
        FuzzMatMul(in);
      } else {
        FuzzVarlenStep(in);
      }
      break;
    case 1:
      FuzzBatchedMatMul(in);
      break;
    case 2:
      FuzzSoftmax(in);
      break;
    case 3:
      FuzzDropout(in);
      break;
    case 5:
      FuzzAttention(in);
      break;
    case 6:
      FuzzKVCache(in);
      break;
    case 7:
      FuzzTypedKVCache(in);
      break;
    default:  // 4: the seed corpus's first byte for a module.
      FuzzModule(in);
      break;
  }
  return 0;
}
