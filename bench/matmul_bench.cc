// MatMul throughput (FLOPS = 2 M N K per call, as a rate) on square, linear
// projection and attention shapes, at 1 and 2 threads; beside oneDNN's matmul
// primitive (SIMDATTN_HAVE_ONEDNN) and OpenBLAS's cblas_sgemm
// (SIMDATTN_HAVE_OPENBLAS) on the same shapes, so one run prints
//   MatMul/simdattn/AVX3/1024x768x768/threads:1   label: AVX3
//   MatMul/onednn/1024x768x768/threads:1          label: oneDNN's kernel
//   MatMul/openblas/1024x768x768/threads:1        label: OpenBLAS's core
//
//   matmul_bench                                   the dispatched target only
//   SIMDATTN_BENCH_ALL_TARGETS=1 matmul_bench      every supported target
//   SIMDATTN_BENCH_THREADS=1,2,4 matmul_bench      other thread counts
//   matmul_bench --benchmark_filter='/AVX2/|openblas'
//
// OpenBLAS 0.3.21 (Debian bookworm) does not know Zen 4/5 and picks its
// Haswell (AVX2) kernels there; OPENBLAS_CORETYPE=SkylakeX selects the
// AVX-512 ones (compare those with AVX3, and Haswell with AVX2).
//
// Libraries whose idle workers spin (OpenMP under oneDNN, OpenBLAS's
// pthreads) steal a core from the next benchmark for a few milliseconds on a
// 2-core machine; compare ratios within one run, and filter to one library
// when the absolute numbers matter.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchmark/benchmark.h"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tbb/task_arena.h"

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
namespace {

struct Shape {
  size_t m, k, n;
  // op(B) = B^T with B stored N x K (one head's Q K^T).
  bool transpose_b = false;

  std::string Name() const {
    return std::to_string(m) + "x" + std::to_string(k) + "x" +
           std::to_string(n) + (transpose_b ? "_Bt" : "");
  }
  double Flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

constexpr Shape kShapes[] = {
    // Square.
    {64, 64, 64},
    {256, 256, 256},
    {512, 512, 512},
    {1024, 1024, 1024},
    {2048, 2048, 2048},
    // Projections of 1024 or 2048 tokens at d_model 768: out (or Q, K, V
    // alone) and the fused QKV.
    {1024, 768, 768},
    {1024, 768, 2304},
    {2048, 768, 768},
    // One head of attention at T = 1024, head_dim 64: scores = Q K^T and
    // weights V.
    {1024, 64, 1024, true},
    {1024, 1024, 64},
    // The seeds' toy example: 6 tokens, d_in 3, d_out 2.
    {6, 3, 2},
};

// SIMDATTN_BENCH_THREADS="1,2,4"; default {1, 2}.
std::vector<int> ThreadCounts() {
  std::vector<int> counts;
  if (const char* env = std::getenv("SIMDATTN_BENCH_THREADS")) {
    std::stringstream list(env);
    std::string item;
    while (std::getline(list, item, ',')) {
      const int n = std::atoi(item.c_str());
      if (n > 0) counts.push_back(n);
    }
  }
  if (counts.empty()) counts = {1, 2};
  return counts;
}

bool AllTargets() {
  const char* env = std::getenv("SIMDATTN_BENCH_ALL_TARGETS");
  return env != nullptr && env[0] != '\0' && env[0] != '0';
}

// Operands of one shape: uniform [-1, 1), C zero; allocated once per
// benchmark, outside the timed loop.
struct Operands {
  std::vector<float> a, b, c;
  explicit Operands(const Shape& s)
      : a(s.m * s.k), b(s.k * s.n), c(s.m * s.n, 0.0f) {
    std::mt19937 rng(static_cast<uint32_t>(s.m * 131 + s.k * 17 + s.n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
  }
};

void SetFlops(benchmark::State& state, const Shape& s) {
  state.counters["FLOPS"] = benchmark::Counter(
      s.Flops() * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_SimdattnMatMul(benchmark::State& state, std::string target,
                       Shape s) {
  const int threads = static_cast<int>(state.range(0));
  Operands ops(s);
  const ConstMatrix a(ops.a.data(), s.m, s.k);
  const ConstMatrix b = s.transpose_b ? ConstMatrix(ops.b.data(), s.n, s.k)
                                      : ConstMatrix(ops.b.data(), s.k, s.n);
  const Matrix c(ops.c.data(), s.m, s.n);
  MatMulOptions options;
  options.transpose_b = s.transpose_b ? Transpose::kYes : Transpose::kNo;
  UseTarget(target);
  state.SetLabel(ActiveTarget());
  tbb::task_arena arena(threads);
  arena.execute([&] {
    MatMul(a, b, c, options);  // Warm the scratch pool and TBB's workers.
    for (auto _ : state) {
      MatMul(a, b, c, options);
      benchmark::DoNotOptimize(ops.c.data());
      benchmark::ClobberMemory();
    }
  });
  UseTarget("");
  SetFlops(state, s);
}

#ifdef SIMDATTN_HAVE_ONEDNN
// oneDNN's matmul primitive: f32, row-major A and C, B a K x N row-major
// matrix or, for B^T, the same logical matrix through a column-major
// descriptor. Created once, after the thread count is set: oneDNN chooses its
// blocking for the threads it sees at creation.
void BM_OneDnnMatMul(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
#ifdef SIMDATTN_ONEDNN_OMP
  // Debian's libdnnl2 uses GNU OpenMP (ldd: libgomp.so.1).
  omp_set_num_threads(threads);
#endif
  Operands ops(s);
  using dnnl::memory;
  const auto dim = [](size_t v) { return static_cast<memory::dim>(v); };
  // A TBB build of oneDNN follows the arena it runs in; OpenMP and
  // sequential builds ignore it.
  tbb::task_arena arena(threads);
  arena.execute([&] {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    const memory::desc a_md({dim(s.m), dim(s.k)}, memory::data_type::f32,
                            memory::format_tag::ab);
    const memory::desc b_md(
        {dim(s.k), dim(s.n)}, memory::data_type::f32,
        s.transpose_b ? memory::format_tag::ba : memory::format_tag::ab);
    const memory::desc c_md({dim(s.m), dim(s.n)}, memory::data_type::f32,
                            memory::format_tag::ab);
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::matmul::primitive_desc pd(engine, a_md, b_md, c_md);
#else
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(a_md, b_md, c_md), engine);
#endif
    const dnnl::matmul matmul(pd);
    const std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(a_md, engine, ops.a.data())},
        {DNNL_ARG_WEIGHTS, memory(b_md, engine, ops.b.data())},
        {DNNL_ARG_DST, memory(c_md, engine, ops.c.data())}};
    state.SetLabel(pd.impl_info_str());
    matmul.execute(stream, args);  // Warm up: first-touch, thread start.
    stream.wait();
    for (auto _ : state) {
      matmul.execute(stream, args);
      stream.wait();
      benchmark::DoNotOptimize(ops.c.data());
      benchmark::ClobberMemory();
    }
  });
  SetFlops(state, s);
}
#endif  // SIMDATTN_HAVE_ONEDNN

#ifdef SIMDATTN_HAVE_OPENBLAS
void BM_OpenBlasMatMul(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(0));
  openblas_set_num_threads(threads);
  Operands ops(s);
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n),
            k = static_cast<int>(s.k);
  const CBLAS_TRANSPOSE tb = s.transpose_b ? CblasTrans : CblasNoTrans;
  const int ldb = s.transpose_b ? k : n;
  state.SetLabel(openblas_get_corename());
  const auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0f, ops.a.data(),
                k, ops.b.data(), ldb, 0.0f, ops.c.data(), n);
  };
  gemm();
  for (auto _ : state) {
    gemm();
    benchmark::DoNotOptimize(ops.c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, s);
}
#endif  // SIMDATTN_HAVE_OPENBLAS

void Configure(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();
  for (int t : ThreadCounts()) b->Arg(t);
}

// Registered at static initialisation so that benchmark_main sees them; per
// shape, simdattn's targets then oneDNN then OpenBLAS, so the libraries are
// printed side by side.
[[maybe_unused]] const bool kRegistered = [] {
  const std::vector<std::string> targets =
      AllTargets() ? SupportedTargets()
                   : std::vector<std::string>{ActiveTarget()};
  for (const Shape& s : kShapes) {
    for (const std::string& target : targets) {
      Configure(benchmark::RegisterBenchmark(
          ("MatMul/simdattn/" + target + "/" + s.Name()).c_str(),
          BM_SimdattnMatMul, target, s));
    }
#ifdef SIMDATTN_HAVE_ONEDNN
    Configure(benchmark::RegisterBenchmark(
        ("MatMul/onednn/" + s.Name()).c_str(), BM_OneDnnMatMul, s));
#endif
#ifdef SIMDATTN_HAVE_OPENBLAS
    Configure(benchmark::RegisterBenchmark(
        ("MatMul/openblas/" + s.Name()).c_str(), BM_OpenBlasMatMul, s));
#endif
  }
  return true;
}();

}  // namespace
}  // namespace simdattn
