#include "tools/measure/workloads.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tools/measure/shapes.h"

#ifdef SIMDATTN_HAVE_ONEDNN
#include "oneapi/dnnl/dnnl.hpp"
// _OPENMP: CMake found OpenMP and compiles this file with -fopenmp.
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP && defined(_OPENMP)
#define SIMDATTN_ONEDNN_OMP 1
#include <omp.h>
#endif
#endif
#ifdef SIMDATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace simdattn {
namespace measure {
namespace {

// A tensor's floats, 64-byte aligned as frameworks allocate tensors
// (PyTorch's CPU allocator, ONNX Runtime's arena). std::vector's large blocks
// come from mmap 16 bytes past a page boundary, which splits the first and
// last cache line of every row: kernels would be timed on a layout their
// users do not give them.
class Buffer {
 public:
  explicit Buffer(size_t size, float value = 0.0f)
      : size_(size), data_(hwy::AllocateAligned<float>(size)) {
    std::fill(begin(), end(), value);
  }
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  float* begin() const { return data(); }
  float* end() const { return data() + size_; }
  float& operator[](size_t i) const { return data_[i]; }

 private:
  size_t size_;
  hwy::AlignedFreeUniquePtr<float[]> data_;
};

// Matmul operands: uniform [-1, 1), C zero. B is k x n, or n x k for B^T.
struct MatMulOperands {
  Buffer a, b, c;
  explicit MatMulOperands(const MatMulShape& s)
      : a(s.m * s.k), b(s.k * s.n), c(s.m * s.n) {
    std::mt19937 rng(static_cast<uint32_t>(s.m * 131 + s.k * 17 + s.n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
  }
};

// Scores in [-4, 4): a cheap LCG is enough for timing.
Buffer Scores(size_t n) {
  Buffer x(n);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * (8.0f / 16777216.0f) - 4.0f;
  }
  return x;
}

class SimdattnMatMul : public Workload {
 public:
  explicit SimdattnMatMul(const MatMulShape& s)
      : ops_(s), a_(ops_.a.data(), s.m, s.k), c_(ops_.c.data(), s.m, s.n) {
    options_.transpose_b = s.transpose_b ? Transpose::kYes : Transpose::kNo;
    if (s.bf16dot) options_.compute = ComputeType::kBFloat16;
    const size_t rows = s.transpose_b ? s.n : s.k;
    const size_t cols = s.transpose_b ? s.k : s.n;
    const size_t bytes = rows * cols * sizeof(float);
    const size_t copies =
        s.cold ? std::max<size_t>(2, MatMulShape::kColdBytes / (bytes + 1)) : 1;
    for (size_t i = 0; i < copies; ++i) {
      auto stored =
          std::make_unique<StoredB>(ops_.b.data(), rows, cols, s.b_storage);
      if (s.packed) {
        packed_.push_back(stored->Pack(options_));
      } else {
        b_.push_back(std::move(stored));
      }
    }
    if (s.a_bf16) {
      a16_.resize(ops_.a.size());
      for (size_t i = 0; i < a16_.size(); ++i) a16_[i] = ToBFloat16(ops_.a[i]);
    }
  }
  void Run() override {
    if (packed_.empty()) {
      b_[next_]->Multiply(a_, c_, options_);
      next_ = (next_ + 1) % b_.size();
    } else {
      if (a16_.empty()) {
        MatMul(a_, packed_[next_], c_, options_);
      } else {
        MatMul(MatrixView<const BFloat16>(a16_.data(), a_.rows, a_.cols),
               packed_[next_], c_, options_);
      }
      next_ = (next_ + 1) % packed_.size();
    }
  }
  std::string Impl() const override { return ActiveTarget(); }

 private:
  MatMulOperands ops_;
  ConstMatrix a_;
  // One B, or the cold copies; with _packed, packed instead.
  std::vector<std::unique_ptr<StoredB>> b_;
  std::vector<PackedMatrix> packed_;
  std::vector<BFloat16> a16_;  // With _abf16: A rounded.
  size_t next_ = 0;
  Matrix c_;
  MatMulOptions options_;
};

class SimdattnSoftmax : public Workload {
 public:
  explicit SimdattnSoftmax(const ScoresShape& s)
      : x_(Scores(s.Elements())),
        y_(x_.size()),
        xv_(ConstTensor4::Dense(x_.data(), s.batch, s.heads, s.rows, s.cols)),
        yv_(Tensor4::Dense(y_.data(), s.batch, s.heads, s.rows, s.cols)),
        mask_(s.variants, s.heads, s.causal, 0) {}
  void Run() override { Softmax(xv_, yv_, 0.125f, mask_.mask()); }
  std::string Impl() const override { return ActiveTarget(); }

 private:
  Buffer x_, y_;
  ConstTensor4 xv_;
  Tensor4 yv_;
  ShapeMask mask_;
};

class SimdattnDropout : public Workload {
 public:
  // Each call scales kept values by 1/0.9: they grow, never becoming
  // denormal (which would slow the multiply), and cost the same once inf.
  explicit SimdattnDropout(const ScoresShape& s)
      : x_(s.Elements(), 1.0f),
        xv_(Tensor4::Dense(x_.data(), s.batch, s.heads, s.rows, s.cols)) {}
  void Run() override {
    Dropout(xv_, 0.1f, key_);
    ++key_.offset;  // A new mask per step, as in training.
  }
  std::string Impl() const override { return ActiveTarget(); }

 private:
  Buffer x_;
  Tensor4 xv_;
  DropoutKey key_{1234, 0};
};

class SimdattnMha : public Workload {
 public:
  explicit SimdattnMha(const MhaShape& s)
      : mha_([&] {
          MultiHeadAttentionConfig config;
          config.d_in = s.d_in;
          config.d_out = s.d_out;
          config.context_length = s.tokens;
          config.num_heads = s.heads;
          config.seed = 1;
          return config;
        }()),
        x_(s.batch * s.tokens * s.d_in, 0.25f),
        y_(s.batch * s.tokens * s.d_out),
        xv_(x_.data(), s.batch, s.tokens, s.d_in),
        yv_(y_.data(), s.batch, s.tokens, s.d_out) {
    // bf16 weights, held as such with _bf16 and widened without, so that
    // both compute with the same values.
    std::vector<std::vector<BFloat16>> bits;
    StateDict state_dict;
    for (const auto& [name, shape] : mha_.StateDictShapes()) {
      if (name == "mask") continue;
      size_t n = 1;
      for (size_t dim : shape) n *= dim;
      std::vector<BFloat16>& b = bits.emplace_back(n);
      for (size_t i = 0; i < n; ++i) {
        b[i] = ToBFloat16(0.05f * std::sin(0.37f * float(i % 1031)));
      }
      state_dict[name] = {b.data(), shape, DType::kBF16};
    }
    LoadOptions options;
    options.keep_dtype = s.bf16;
    mha_.LoadStateDict(state_dict, options);
    if (s.bf16dot) options_.compute = ComputeType::kBFloat16;
    if (s.step) {  // T - 1 tokens in the cache; each call adds the last.
      KVCacheConfig config;  // bf16 arithmetic reads a bf16 cache.
      if (s.bf16dot) config.type = KVType::kBF16;
      cache_.emplace(s.batch, s.heads, s.tokens, s.d_out / s.heads, config);
      mha_.ForwardStep(Prefix(xv_, s.tokens - 1), *cache_,
                       Prefix(yv_, s.tokens - 1), options_);
    }
  }
  void Run() override {
    if (!cache_) return mha_.Forward(xv_, yv_, options_);
    for (size_t b = 0; b < cache_->batch(); ++b) {
      cache_->Truncate(b, xv_.tokens - 1);
    }
    mha_.ForwardStep(Last(xv_), *cache_, Last(yv_), options_);
  }
  std::string Impl() const override { return ActiveTarget(); }

 private:
  template <typename T>
  static Tensor3View<T> Prefix(Tensor3View<T> t, size_t tokens) {
    return {t.data,     t.batch,        tokens,
            t.features, t.batch_stride, t.token_stride};
  }
  template <typename T>
  static Tensor3View<T> Last(Tensor3View<T> t) {
    return {t.data + (t.tokens - 1) * t.token_stride,
            t.batch,
            1,
            t.features,
            t.batch_stride,
            t.token_stride};
  }
  MultiHeadAttention mha_;
  Buffer x_, y_;
  ConstTensor3 xv_;
  Tensor3 yv_;
  ForwardOptions options_;
  std::optional<KVCache> cache_;
};

// Q, K, V with values of a trained model's order (|x| < 1), and the output.
// Dropout draws a new mask per call, as in training.
class AttentionWorkload : public Workload {
 public:
  explicit AttentionWorkload(const AttentionShape& s)
      : q_(Values(s.batch * s.heads * s.QueryTokens() * s.head_dim, 0.1f)),
        k_(Values(s.batch * s.kv_heads * s.tokens * s.head_dim, 0.07f)),
        v_(Values(s.batch * s.kv_heads * s.tokens * s.ValueDim(), 0.03f)),
        out_(s.batch * s.heads * s.QueryTokens() * s.ValueDim()),
        q_view_(ConstTensor4::Dense(q_.data(), s.batch, s.heads,
                                    s.QueryTokens(), s.head_dim)),
        k_view_(ConstTensor4::Dense(k_.data(), s.batch, s.kv_heads, s.tokens,
                                    s.head_dim)),
        v_view_(ConstTensor4::Dense(v_.data(), s.batch, s.kv_heads, s.tokens,
                                    s.ValueDim())),
        out_view_(Tensor4::Dense(out_.data(), s.batch, s.heads, s.QueryTokens(),
                                 s.ValueDim())),
        mask_(s.variants, s.heads, s.causal || s.decode,
              s.tokens - s.QueryTokens()) {
    options_.mask = mask_.mask();
    options_.dropout = s.dropout ? 0.1f : 0.0f;
    if (s.bf16dot) options_.compute = ComputeType::kBFloat16;
    if (s.int8dot) options_.compute = ComputeType::kInt8;
  }
  std::string Impl() const override { return ActiveTarget(); }

 protected:
  static Buffer Values(size_t n, float frequency) {
    Buffer x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(frequency * float(i % 4096));
    return x;
  }

  Buffer q_, k_, v_, out_;
  ConstTensor4 q_view_, k_view_, v_view_;
  Tensor4 out_view_;
  ShapeMask mask_;
  AttentionOptions options_;
};

class FusedAttention : public AttentionWorkload {
 public:
  using AttentionWorkload::AttentionWorkload;
  void Run() override {
    ScaledDotProductAttention(q_view_, k_view_, v_view_, out_view_, options_);
    ++options_.dropout_key.offset;
  }
};

// Decode over a KVCache of the shape's type and layout, filled once with
// the same keys and values; _cold: over copies of it in turn.
class CachedAttention : public AttentionWorkload {
 public:
  explicit CachedAttention(const AttentionShape& s)
      : AttentionWorkload(s), cache_mask_(s.variants, s.heads, true, 0) {
    const size_t copies = s.cold
                              ? std::max<size_t>(2, MatMulShape::kColdBytes /
                                                        (size_t(s.Bytes()) + 1))
                              : 1;
    for (size_t i = 0; i < copies; ++i) {
      caches_.push_back(std::make_unique<KVCache>(s.batch, s.kv_heads, s.tokens,
                                                  s.head_dim, CacheConfig(s)));
      caches_.back()->Append(k_view_, s.mla != 0 ? ConstTensor4{} : v_view_);
    }
    options_.mask = cache_mask_.mask();
  }
  void Run() override {
    ScaledDotProductAttention(q_view_, caches_[next_]->View(), out_view_,
                              options_);
    next_ = (next_ + 1) % caches_.size();
  }

 private:
  std::vector<std::unique_ptr<KVCache>> caches_;  // One, or the cold copies.
  size_t next_ = 0;
  ShapeMask cache_mask_;  // The cache gives the causal offsets.
};

class CacheAppend : public Workload {
 public:
  explicit CacheAppend(const AttentionShape& s)
      : k_(s.batch * s.kv_heads * s.tokens * s.head_dim),
        v_(k_.size()),
        cache_(s.batch, s.kv_heads, s.tokens, s.head_dim, CacheConfig(s)),
        k_view_(ConstTensor4::Dense(k_.data(), s.batch, s.kv_heads, s.tokens,
                                    s.head_dim)),
        v_view_(ConstTensor4::Dense(v_.data(), s.batch, s.kv_heads, s.tokens,
                                    s.head_dim)) {
    for (size_t i = 0; i < k_.size(); ++i) {
      k_[i] = std::sin(0.07f * float(i % 4096));
      v_[i] = std::cos(0.03f * float(i % 4096));
    }
  }
  std::string Impl() const override { return ActiveTarget(); }
  void Run() override {
    cache_.Clear();
    cache_.Append(k_view_, v_view_);
  }

 private:
  Buffer k_, v_;
  KVCache cache_;
  ConstTensor4 k_view_, v_view_;
};

class UnfusedAttention : public AttentionWorkload {
 public:
  explicit UnfusedAttention(const AttentionShape& s)
      : AttentionWorkload(s),
        weights_(s.batch * s.heads * s.QueryTokens() * s.tokens),
        weights_view_(Tensor4::Dense(weights_.data(), s.batch, s.heads,
                                     s.QueryTokens(), s.tokens)) {
    scores_.transpose_b = Transpose::kYes;
    scores_.alpha = 1.0f / std::sqrt(float(s.head_dim));
  }
  void Run() override {
    BatchedMatMul(q_view_, k_view_, weights_view_, scores_);
    Softmax(weights_view_, weights_view_, 1.0f, options_.mask);
    if (options_.dropout > 0.0f) {
      Dropout(weights_view_, options_.dropout, options_.dropout_key);
      ++options_.dropout_key.offset;
    }
    BatchedMatMul(weights_view_, v_view_, out_view_);
  }

 private:
  Buffer weights_;
  Tensor4 weights_view_;
  MatMulOptions scores_;
};

#ifdef SIMDATTN_HAVE_ONEDNN
void SetOneDnnThreads([[maybe_unused]] int threads) {
#ifdef SIMDATTN_ONEDNN_OMP
  // Debian's libdnnl2 uses GNU OpenMP (ldd: libgomp.so.1). A TBB build of
  // oneDNN would follow the caller's task_arena instead.
  if (threads > 0) omp_set_num_threads(threads);
#endif
}

dnnl::memory::dim Dim(size_t v) { return static_cast<dnnl::memory::dim>(v); }

// oneDNN's matmul primitive: row-major A and C, B a k x n row-major matrix
// or, for B^T, the same logical matrix through a column-major descriptor.
// float32 throughout, or for `_bf16dot` shapes as oneDNN's bf16 users run
// it: A and B in bf16 (converted before the timing), B reordered once into
// the layout the primitive picks (pre-packed weights), C in float32.
class OneDnnMatMul : public Workload {
 public:
  OneDnnMatMul(const MatMulShape& s, int threads) : ops_(s) {
    SetOneDnnThreads(threads);
    using dnnl::memory;
    const memory::data_type in =
        s.bf16dot ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc a_md({Dim(s.m), Dim(s.k)}, in, memory::format_tag::ab);
    const memory::desc b_plain(
        {Dim(s.k), Dim(s.n)}, in,
        s.transpose_b ? memory::format_tag::ba : memory::format_tag::ab);
    const memory::desc b_md = s.bf16dot ? memory::desc({Dim(s.k), Dim(s.n)}, in,
                                                       memory::format_tag::any)
                                        : b_plain;
    const memory::desc c_md({Dim(s.m), Dim(s.n)}, memory::data_type::f32,
                            memory::format_tag::ab);
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::matmul::primitive_desc pd(engine_, a_md, b_md, c_md);
#else
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md),
                                          engine_);
#endif
    impl_ = pd.impl_info_str();
    matmul_ = dnnl::matmul(pd);
    memory a(a_md, engine_, ops_.a.data());
    memory b(b_plain, engine_, ops_.b.data());
    if (s.bf16dot) {
      a_bf16_.resize(ops_.a.size());
      b_bf16_.resize(ops_.b.size());
      for (size_t i = 0; i < ops_.a.size(); ++i)
        a_bf16_[i] = ToBFloat16(ops_.a[i]);
      for (size_t i = 0; i < ops_.b.size(); ++i)
        b_bf16_[i] = ToBFloat16(ops_.b[i]);
      a = memory(a_md, engine_, a_bf16_.data());
      memory b_bf16(b_plain, engine_, b_bf16_.data());
      b = memory(pd.weights_desc(), engine_);
      dnnl::reorder(b_bf16, b).execute(stream_, b_bf16, b);
      stream_.wait();
    }
    args_ = {{DNNL_ARG_SRC, a},
             {DNNL_ARG_WEIGHTS, b},
             {DNNL_ARG_DST, memory(c_md, engine_, ops_.c.data())}};
  }
  void Run() override {
    matmul_.execute(stream_, args_);
    stream_.wait();
  }
  std::string Impl() const override { return impl_; }

 private:
  MatMulOperands ops_;
  std::vector<BFloat16> a_bf16_, b_bf16_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul matmul_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};

// oneDNN's softmax (accurate algorithm) over the last axis, out of place.
class OneDnnSoftmax : public Workload {
 public:
  OneDnnSoftmax(const ScoresShape& s, int threads)
      : x_(Scores(s.Elements())), y_(x_.size()) {
    SetOneDnnThreads(threads);
    const dnnl::memory::desc md(
        {Dim(s.batch), Dim(s.heads), Dim(s.rows), Dim(s.cols)},
        dnnl::memory::data_type::f32, dnnl::memory::format_tag::abcd);
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::softmax_forward::primitive_desc pd(
        engine_, dnnl::prop_kind::forward_inference,
        dnnl::algorithm::softmax_accurate, md, md, 3);
#else
    const dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 3),
        engine_);
#endif
    impl_ = pd.impl_info_str();
    softmax_ = dnnl::softmax_forward(pd);
    // oneDNN's softmax has no scale: it gets the scores pre-scaled, so both
    // libraries compute the same function of the same tensor.
    for (float& v : x_) v *= 0.125f;
    args_ = {{DNNL_ARG_SRC, dnnl::memory(md, engine_, x_.data())},
             {DNNL_ARG_DST, dnnl::memory(md, engine_, y_.data())}};
  }
  void Run() override {
    softmax_.execute(stream_, args_);
    stream_.wait();
  }
  std::string Impl() const override { return impl_; }

 private:
  Buffer x_, y_;
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::softmax_forward softmax_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};
#endif  // SIMDATTN_HAVE_ONEDNN

#ifdef SIMDATTN_HAVE_OPENBLAS
// OpenBLAS 0.3.21 (Debian bookworm) does not know Zen 4/5 and picks its
// Haswell (AVX2) kernels there; OPENBLAS_CORETYPE=SkylakeX selects the
// AVX-512 ones (compare those with AVX3, and Haswell with AVX2).
class OpenBlasMatMul : public Workload {
 public:
  OpenBlasMatMul(const MatMulShape& s, int threads) : s_(s), ops_(s) {
    if (threads > 0) openblas_set_num_threads(threads);
  }
  void Run() override {
    const int m = static_cast<int>(s_.m), n = static_cast<int>(s_.n),
              k = static_cast<int>(s_.k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans,
                s_.transpose_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                ops_.a.data(), k, ops_.b.data(), s_.transpose_b ? k : n, 0.0f,
                ops_.c.data(), n);
  }
  std::string Impl() const override { return openblas_get_corename(); }

 private:
  MatMulShape s_;
  MatMulOperands ops_;
};
#endif  // SIMDATTN_HAVE_OPENBLAS

}  // namespace

ShapeMask::ShapeMask(const MaskVariants& variants, size_t heads, bool causal,
                     size_t causal_offset) {
  mask_.causal = causal;
  mask_.causal_offset = causal_offset;
  mask_.window = variants.window;
  mask_.softcap = variants.softcap;
  if (variants.alibi) {
    alibi_slopes_ = AlibiSlopes(heads);
    mask_.alibi_slopes = alibi_slopes_.data();
  }
  if (variants.sinks) {
    sinks_ = SinkLogits(heads);
    mask_.sinks = sinks_.data();
  }
}

const char* LibraryName(Library library) {
  switch (library) {
    case Library::kSimdattn:
      return "simdattn";
    case Library::kOneDnn:
      return "onednn";
    case Library::kOpenBlas:
      return "openblas";
  }
  return "?";
}

bool LibraryAvailable(Library library) {
  switch (library) {
    case Library::kSimdattn:
      return true;
    case Library::kOneDnn:
#ifdef SIMDATTN_HAVE_ONEDNN
      return true;
#else
      return false;
#endif
    case Library::kOpenBlas:
#ifdef SIMDATTN_HAVE_OPENBLAS
      return true;
#else
      return false;
#endif
  }
  return false;
}

StoredB::StoredB(const float* values, size_t rows, size_t cols,
                 ElementType storage)
    : rows_(rows), cols_(cols), storage_(storage) {
  for (size_t i = 0; i < rows * cols; ++i) {
    if (storage == ElementType::kBF16) {
      bf16_.push_back(ToBFloat16(values[i]));
      widened_.push_back(ToFloat(bf16_.back()));
    } else if (storage == ElementType::kF16) {
      f16_.push_back(ToFloat16(values[i]));
      widened_.push_back(ToFloat(f16_.back()));
    } else {
      widened_.push_back(values[i]);
    }
  }
}

void StoredB::Multiply(ConstMatrix a, Matrix c,
                       const MatMulOptions& options) const {
  if (storage_ == ElementType::kBF16) {
    return MatMul(a, MatrixView<const BFloat16>(bf16_.data(), rows_, cols_), c,
                  options);
  }
  if (storage_ == ElementType::kF16) {
    return MatMul(a, MatrixView<const Float16>(f16_.data(), rows_, cols_), c,
                  options);
  }
  MatMul(a, widened(), c, options);
}

PackedMatrix StoredB::Pack(const MatMulOptions& options) const {
  if (storage_ == ElementType::kBF16) {
    return PackedMatrix(MatrixView<const BFloat16>(bf16_.data(), rows_, cols_),
                        options);
  }
  if (storage_ == ElementType::kF16) {
    return PackedMatrix(MatrixView<const Float16>(f16_.data(), rows_, cols_),
                        options);
  }
  return PackedMatrix(widened(), options);
}

std::unique_ptr<Workload> MakeMatMul(const MatMulShape& shape, Library library,
                                     [[maybe_unused]] int threads) {
  // The other libraries are measured warm, in float32 (arithmetic and
  // storage); oneDNN also in bf16 arithmetic, from bf16 or float B alike
  // (its B is converted and packed before the timing).
  const bool float32 = !shape.bf16dot && shape.b_storage == ElementType::kF32;
  const bool onednn_bf16 = library == Library::kOneDnn && shape.bf16dot &&
                           shape.b_storage != ElementType::kF16;
  if (library != Library::kSimdattn &&
      (shape.cold || !(float32 || onednn_bf16))) {
    return nullptr;
  }
  switch (library) {
    case Library::kSimdattn:
      return std::make_unique<SimdattnMatMul>(shape);
    case Library::kOneDnn:
#ifdef SIMDATTN_HAVE_ONEDNN
      try {
        return std::make_unique<OneDnnMatMul>(shape, threads);
      } catch (const dnnl::error&) {
        return nullptr;  // No such primitive on this CPU (bf16 before AVX-512).
      }
#else
      return nullptr;
#endif
    case Library::kOpenBlas:
#ifdef SIMDATTN_HAVE_OPENBLAS
      return std::make_unique<OpenBlasMatMul>(shape, threads);
#else
      return nullptr;
#endif
  }
  return nullptr;
}

std::unique_ptr<Workload> MakeSoftmax(const ScoresShape& shape, Library library,
                                      [[maybe_unused]] int threads) {
  switch (library) {
    case Library::kSimdattn:
      return std::make_unique<SimdattnSoftmax>(shape);
    case Library::kOneDnn:
#ifdef SIMDATTN_HAVE_ONEDNN
      // oneDNN's softmax has no masks: only unmasked is comparable.
      if (shape.causal || shape.variants.Any()) return nullptr;
      return std::make_unique<OneDnnSoftmax>(shape, threads);
#else
      return nullptr;
#endif
    case Library::kOpenBlas:
      return nullptr;
  }
  return nullptr;
}

std::unique_ptr<Workload> MakeDropout(const ScoresShape& shape) {
  return std::make_unique<SimdattnDropout>(shape);
}

std::unique_ptr<Workload> MakeMha(const MhaShape& shape) {
  return std::make_unique<SimdattnMha>(shape);
}

std::unique_ptr<Workload> MakeAttention(const AttentionShape& shape) {
  if (shape.InCache()) return std::make_unique<CachedAttention>(shape);
  return std::make_unique<FusedAttention>(shape);
}

KVCacheConfig CacheConfig(const AttentionShape& shape) {
  KVCacheConfig config;
  config.type = shape.cache;
  config.block_size = shape.page;
  config.value_dim = shape.mla;
  config.latent = shape.mla != 0;
  if (shape.rope) config.rope = RopeOptions{};
  return config;
}

std::unique_ptr<Workload> MakeAppend(const AttentionShape& shape) {
  return std::make_unique<CacheAppend>(shape);
}

namespace {

// Deterministic values in [-1, 1], as the other workloads' (sin of a
// stepped angle).
void FillValues(float* x, size_t n, float frequency) {
  for (size_t i = 0; i < n; ++i) x[i] = std::sin(frequency * float(i % 4099));
}

KVCacheConfig ServeCacheConfig(const ServeShape& shape) {
  KVCacheConfig config;
  config.type = shape.cache;
  config.block_size = shape.page;
  return config;
}

class ServeStep : public Workload {
 public:
  explicit ServeStep(const ServeShape& s)
      : operands_(s),
        out_(operands_.q.size()),
        mask_(s.variants, s.heads, true, 0) {
    options_.mask = mask_.mask();
  }
  void Run() override { operands_.Run(options_, out_.data()); }
  std::string Impl() const override { return ActiveTarget(); }

 private:
  ServeOperands operands_;
  Buffer out_;
  ShapeMask mask_;  // The cache gives the causal offsets.
  AttentionOptions options_;
};

}  // namespace

ServeOperands::ServeOperands(const ServeShape& s)
    : shape(s),
      cache(s.Sequences(), s.kv_heads, s.Capacity(), s.head_dim,
            ServeCacheConfig(s)),
      q(s.QueryTokens() * s.heads * s.head_dim),
      starts(1, 0) {
  FillValues(q.data(), q.size(), 0.1f);
  size_t first = 0;
  for (const ServeShape::Group& g : s.groups) {
    const size_t n = s.context + g.tokens;
    std::vector<size_t> sequences(g.sequences);
    std::vector<float> k(g.sequences * s.kv_heads * n * s.head_dim),
        v(k.size());
    FillValues(k.data(), k.size(), 0.07f + 0.01f * float(first));
    FillValues(v.data(), v.size(), 0.03f + 0.01f * float(first));
    for (size_t i = 0; i < g.sequences; ++i) {
      sequences[i] = first + i;
      starts.push_back(starts.back() + g.tokens);
    }
    cache.Append(
        ConstTensor4::Dense(k.data(), g.sequences, s.kv_heads, n, s.head_dim),
        ConstTensor4::Dense(v.data(), g.sequences, s.kv_heads, n, s.head_dim),
        sequences);
    first += g.sequences;
  }
  if (s.planned) {
    // The cache's memory as pages, only read (Attention): KVPages' pointers
    // are writable for the writes a step also makes.
    const KVCacheView view = cache.View();
    pages.type = view.type;
    pages.kv_heads = view.kv_heads;
    pages.head_dim = view.head_dim;
    pages.value_dim = view.value_dim;
    pages.keys = const_cast<void*>(view.keys);
    pages.values = const_cast<void*>(view.values);
    pages.block_stride = view.block_stride;
    pages.head_stride = view.head_stride;
    pages.row_stride = view.row_stride;
    pages.key_scales = const_cast<float*>(view.key_scales);
    pages.value_scales = const_cast<float*>(view.value_scales);
    pages.scale_block_stride = view.scale_block_stride;
    pages.scale_head_stride = view.scale_head_stride;
    pages.block_size = view.block_size;
    pages.num_blocks = view.num_blocks;
    pages.key_scale = view.key_scale;
    pages.value_scale = view.value_scale;
    VarlenStep step;
    step.num_seqs = view.batch;
    step.query_starts = starts.data();
    step.seq_lens = view.lengths;
    step.block_table = view.block_table;
    step.blocks_per_sequence = view.blocks_per_sequence;
    plan = VarlenPlan(step, pages, s.variants.window);
  }
  if (!s.tree) return;
  // Draft i sees itself and its ancestors (i - 1) / 2, ... , 0.
  size_t bits = 0;
  for (const ServeShape::Group& g : s.groups) {
    for (size_t i = 0; i < g.sequences; ++i) {
      tree_offsets.push_back(g.kind == 'v' ? bits : AttentionMask::kNoTree);
      if (g.kind != 'v') continue;
      tree_bits.resize((bits + g.tokens * g.tokens + 63) / 64, 0);
      for (size_t row = 0; row < g.tokens; ++row) {
        for (size_t node = row;; node = (node - 1) / 2) {
          const size_t bit = bits + row * g.tokens + node;
          tree_bits[bit / 64] |= uint64_t{1} << (bit % 64);
          if (node == 0) break;
        }
      }
      bits += g.tokens * g.tokens;
    }
  }
}

bool ServeOperands::TreeSees(size_t b, size_t i, size_t j) const {
  const size_t n = starts[b + 1] - starts[b];
  const size_t bit = tree_offsets[b] + i * n + j;
  return (tree_bits[bit / 64] >> (bit % 64)) & 1;
}

void ServeOperands::Run(const AttentionOptions& step_options,
                        float* out) const {
  const size_t heads = shape.heads, dim = shape.head_dim;
  const KVCacheView view = cache.View();
  AttentionOptions options = step_options;
  if (shape.tree) {
    options.mask.tree_bits = tree_bits.data();
    options.mask.tree_offsets = tree_offsets.data();
  }
  if (shape.planned) {
    const size_t n = starts.back();
    plan.Attention(ConstTensor4::FromTokenMajor(q.data(), 1, n, heads, dim),
                   pages, Tensor4::FromTokenMajor(out, 1, n, heads, dim),
                   options);
    return;
  }
  if (!shape.separate) {
    const size_t n = starts.back();
    VarlenAttention(ConstTensor4::FromTokenMajor(q.data(), 1, n, heads, dim),
                    starts.data(), view,
                    Tensor4::FromTokenMajor(out, 1, n, heads, dim), options);
    return;
  }
  size_t first = 0;
  for (const ServeShape::Group& g : shape.groups) {
    KVCacheView part = view;
    part.batch = g.sequences;
    part.lengths += first;
    part.block_table += first * view.blocks_per_sequence;
    const size_t row = starts[first] * heads * dim;
    if (shape.tree) options.mask.tree_offsets = tree_offsets.data() + first;
    ScaledDotProductAttention(
        ConstTensor4::FromTokenMajor(q.data() + row, g.sequences, g.tokens,
                                     heads, dim),
        part,
        Tensor4::FromTokenMajor(out + row, g.sequences, g.tokens, heads, dim),
        options);
    first += g.sequences;
  }
}

std::unique_ptr<Workload> MakeServe(const ServeShape& shape) {
  return std::make_unique<ServeStep>(shape);
}

std::unique_ptr<Workload> MakeUnfusedAttention(const AttentionShape& shape) {
  return std::make_unique<UnfusedAttention>(shape);
}

}  // namespace measure
}  // namespace simdattn
