// One op at one shape, ready to run repeatedly: operands allocated and
// filled once, outside any timed loop. simdattn's kernels, and the same op
// through oneDNN or OpenBLAS when they were found at configure time
// (SIMDATTN_HAVE_ONEDNN, SIMDATTN_HAVE_OPENBLAS in workloads.cc only: users
// of this header need no #ifdef).
#ifndef SIMDATTN_TOOLS_MEASURE_WORKLOADS_H_
#define SIMDATTN_TOOLS_MEASURE_WORKLOADS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "simdattn/kernels.h"
#include "src/common/aligned_vector.h"
#include "tools/measure/shapes.h"

namespace simdattn {
namespace measure {

enum class Library { kSimdattn, kOneDnn, kOpenBlas };

// "simdattn", "onednn", "openblas": the names the JSON records use.
const char* LibraryName(Library library);
// Whether this build links the library.
bool LibraryAvailable(Library library);

// The AttentionMask of a shape: causality, its causal offset and its
// variants, owning the per-head arrays (AlibiSlopes, SinkLogits) the mask
// points to. Not copyable: a copy's mask would point into the original.
class ShapeMask {
 public:
  ShapeMask(const MaskVariants& variants, size_t heads, bool causal,
            size_t causal_offset);
  ShapeMask(const ShapeMask&) = delete;
  ShapeMask& operator=(const ShapeMask&) = delete;

  const AttentionMask& mask() const { return mask_; }

 private:
  std::vector<float> alibi_slopes_, sinks_;
  AttentionMask mask_;
};

// A matmul's B in its shape's storage: float values rounded to it once.
class StoredB {
 public:
  // `values`: rows x cols floats, row-major.
  StoredB(const float* values, size_t rows, size_t cols, ElementType storage);
  // B's values as stored, widened back to float: what the product uses.
  ConstMatrix widened() const { return {widened_.data(), rows_, cols_}; }
  // MatMul(a, B, c, options) with the overload of B's storage.
  void Multiply(ConstMatrix a, Matrix c, const MatMulOptions& options) const;
  // B packed for such products, from its storage.
  PackedMatrix Pack(const MatMulOptions& options) const;

 private:
  size_t rows_, cols_;
  ElementType storage_;
  // Aligned as frameworks and simdattn's modules hold weights.
  internal::AlignedVector<float> widened_;
  internal::AlignedVector<BFloat16> bf16_;
  internal::AlignedVector<Float16> f16_;
};

class Workload {
 public:
  virtual ~Workload() = default;
  // One call of the op. simdattn's run on the caller's tbb::task_arena and
  // the target a TargetScope selects (target_scope.h).
  virtual void Run() = 0;
  // What runs: simdattn's dispatched target, oneDNN's implementation
  // ("brg:avx512_core"), OpenBLAS's core ("SkylakeX").
  virtual std::string Impl() const = 0;
};

// nullptr when the library is not available or has no such op (OpenBLAS has
// no softmax; oneDNN's softmax has no causal mask). `threads` > 0 sets the
// thread count of libraries with their own pool (oneDNN's OpenMP, OpenBLAS's
// pthreads): create the workload right before timing it, since that setting
// is process-wide. oneDNN picks its blocking for the threads it sees at
// creation. simdattn ignores it (use a tbb::task_arena).
std::unique_ptr<Workload> MakeMatMul(const MatMulShape& shape,
                                     Library library = Library::kSimdattn,
                                     int threads = 0);
// softmax(0.125 x) over the last axis, out of place (0.125 = 1/sqrt(64)),
// with the shape's mask.
std::unique_ptr<Workload> MakeSoftmax(const ScoresShape& shape,
                                      Library library = Library::kSimdattn,
                                      int threads = 0);
// In-place dropout with p = 0.1 and a new key offset per call, as in
// training.
std::unique_ptr<Workload> MakeDropout(const ScoresShape& shape);
// MultiHeadAttention::Forward, causal, eval.
std::unique_ptr<Workload> MakeMha(const MhaShape& shape);
// ScaledDotProductAttention over dense (b, h, T, D) tensors with the
// shape's mask; the queries are the last positions (a decode query sees the
// whole cache, or its window).
std::unique_ptr<Workload> MakeAttention(const AttentionShape& shape);
// The KVCache of a decode or append shape: its type, pages and rope.
KVCacheConfig CacheConfig(const AttentionShape& shape);
// KVCache::Append of every token (the shape's cache and rope), into a
// cache emptied first.
std::unique_ptr<Workload> MakeAppend(const AttentionShape& shape);
// A serving step's operands: one paged KVCache of the shape's type holding
// every sequence, group by group, each with context + its tokens; the
// packed queries (num_tokens, heads, head_dim) and their starts.
struct ServeOperands {
  explicit ServeOperands(const ServeShape& shape);
  // One step into out, (num_tokens, heads, head_dim) floats: a
  // VarlenAttention call, or with shape.separate one ScaledDotProductAttention
  // over the cache's view of each group's sequences, or with shape.planned
  // the plan's call; with shape.tree, the verifying sequences' trees added
  // to options.mask.
  void Run(const AttentionOptions& options, float* out) const;
  // Whether new token i of sequence b sees its new token j (i, j below its
  // query count) under shape.tree.
  bool TreeSees(size_t b, size_t i, size_t j) const;

  ServeShape shape;
  KVCache cache;
  std::vector<float> q;
  std::vector<size_t> starts;  // Sequences() + 1.
  // With shape.tree: AttentionMask's tree_bits and tree_offsets (kNoTree
  // for the sequences that do not verify).
  std::vector<uint64_t> tree_bits;
  std::vector<size_t> tree_offsets;
  // With shape.planned: the cache's memory as pages, and the step planned.
  KVPages pages;
  VarlenPlan plan;
};
// ServeOperands::Run with the shape's variants, causal.
std::unique_ptr<Workload> MakeServe(const ServeShape& shape);
// The same through this library's unfused path, storing the (b, h, T, T)
// weights: BatchedMatMul, Softmax, Dropout, BatchedMatMul. What the modules
// do when the caller asks for the weights; the fused kernel's baseline.
std::unique_ptr<Workload> MakeUnfusedAttention(const AttentionShape& shape);

}  // namespace measure
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_MEASURE_WORKLOADS_H_
