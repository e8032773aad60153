// Softmax throughput on attention-sized score tensors, per SIMD target,
// unmasked and causal; with oneDNN's softmax on the same tensors when it is
// available (SIMDATTN_HAVE_ONEDNN). Bytes processed = bytes read + written
// (a causal row reads only its first i + 1 columns but writes all of them).
//
//   softmax_bench --benchmark_filter=AVX3          one target
//   taskset -c 0 softmax_bench                     one thread (TBB and oneDNN
//                                                  follow the affinity mask)
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"

#ifdef SIMDATTN_HAVE_ONEDNN
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace simdattn {
namespace {

struct Shape {
  const char* name;
  size_t batch, heads, tokens;
};
// 12 heads of one 1024-token sequence; a batch of 8 of 256 tokens.
constexpr Shape kShapes[] = {{"1x12x1024x1024", 1, 12, 1024},
                             {"8x12x256x256", 8, 12, 256}};

size_t Elements(const Shape& s) {
  return s.batch * s.heads * s.tokens * s.tokens;
}

// Bytes read + written by one call.
int64_t BytesPerCall(const Shape& s, bool causal) {
  const size_t rows = s.batch * s.heads * s.tokens;
  const size_t read = causal
                          ? s.batch * s.heads * (s.tokens * (s.tokens + 1) / 2)
                          : Elements(s);
  return static_cast<int64_t>((read + rows * s.tokens) * sizeof(float));
}

std::vector<float> Scores(size_t n) {
  std::vector<float> x(n);
  uint32_t state = 12345;
  for (float& v : x) {  // Values in [-4, 4): a cheap LCG is enough here.
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) * (8.0f / 16777216.0f) - 4.0f;
  }
  return x;
}

void BM_Softmax(benchmark::State& state, std::string target, Shape s,
                bool causal) {
  UseTarget(target);
  const std::vector<float> x = Scores(Elements(s));
  std::vector<float> y(x.size());
  const auto xv =
      ConstTensor4::Dense(x.data(), s.batch, s.heads, s.tokens, s.tokens);
  const auto yv =
      Tensor4::Dense(y.data(), s.batch, s.heads, s.tokens, s.tokens);
  AttentionMask mask;
  mask.causal = causal;
  for (auto _ : state) {
    Softmax(xv, yv, 0.125f, mask);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  UseTarget("");
  state.SetBytesProcessed(state.iterations() * BytesPerCall(s, causal));
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(Elements(s)));
}

#ifdef SIMDATTN_HAVE_ONEDNN
// oneDNN's softmax (accurate algorithm) over the last axis, out of place.
// It has no causal mask, so only the unmasked case is compared.
void BM_OneDnnSoftmax(benchmark::State& state, Shape s) {
  const std::vector<float> x = Scores(Elements(s));
  std::vector<float> y(x.size());
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dnnl::memory::dims dims = {static_cast<dnnl::memory::dim>(s.batch),
                                   static_cast<dnnl::memory::dim>(s.heads),
                                   static_cast<dnnl::memory::dim>(s.tokens),
                                   static_cast<dnnl::memory::dim>(s.tokens)};
  const dnnl::memory::desc md(dims, dnnl::memory::data_type::f32,
                              dnnl::memory::format_tag::abcd);
  dnnl::memory src(md, engine, const_cast<float*>(x.data()));
  dnnl::memory dst(md, engine, y.data());
#if DNNL_VERSION_MAJOR >= 3
  const dnnl::softmax_forward::primitive_desc pd(
      engine, dnnl::prop_kind::forward_inference,
      dnnl::algorithm::softmax_accurate, md, md, 3);
#else
  const dnnl::softmax_forward::primitive_desc pd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 3),
      engine);
#endif
  dnnl::softmax_forward softmax(pd);
  for (auto _ : state) {
    softmax.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    stream.wait();
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * BytesPerCall(s, false));
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(Elements(s)));
}
#endif  // SIMDATTN_HAVE_ONEDNN

// Registered at static initialisation so that benchmark_main sees one
// benchmark per (target, shape, mask).
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string& target : SupportedTargets()) {
    for (const Shape& s : kShapes) {
      for (bool causal : {false, true}) {
        const std::string name = "Softmax/" + target + "/" + s.name +
                                 (causal ? "/causal" : "/unmasked");
        benchmark::RegisterBenchmark(name.c_str(), BM_Softmax, target, s,
                                     causal)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
#ifdef SIMDATTN_HAVE_ONEDNN
  for (const Shape& s : kShapes) {
    const std::string name = std::string("OneDNN/") + s.name + "/unmasked";
    benchmark::RegisterBenchmark(name.c_str(), BM_OneDnnSoftmax, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
#endif
  return true;
}();

}  // namespace
}  // namespace simdattn
