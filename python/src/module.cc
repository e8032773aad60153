// simdattn._simdattn: the pybind11 extension under the `simdattn` Python
// package (python/simdattn/). pybind11 because it maps C++ exceptions to
// Python ones (std::invalid_argument -> ValueError, keeping the library's
// message), reads numpy arrays through the buffer protocol without a copy,
// and needs nothing beyond Debian's python3-pybind11 (headers only).
//
// Operands are numpy arrays (buffer protocol) or CPU torch tensors (their
// data_ptr, shape and strides): both are used where they lie, never copied.
// Every argument is converted and checked while the GIL is held; the kernel
// then runs with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <tbb/global_control.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "simdattn/simdattn.h"
#include "src/arrays.h"

namespace py = pybind11;

namespace {

using namespace simdattn_python;  // NOLINT: the extension's own helpers.

void Sdpa(py::handle q_obj, py::handle k_obj, py::handle v_obj,
          py::handle out_obj, py::handle lse_obj, std::optional<float> scale,
          bool causal, int64_t causal_offset,
          std::optional<std::vector<int64_t>> causal_offsets, int64_t window,
          float softcap, std::optional<std::vector<float>> sinks,
          py::object alibi, std::optional<std::vector<int64_t>> key_lengths,
          float dropout_p, uint64_t dropout_seed, uint64_t dropout_offset) {
  const char* kQ = "(batch, q_heads, q_tokens, head_dim)";
  const ConstTensor4 q = ToTensor4<const float>(q_obj, "q", false, kQ);
  const ConstTensor4 k = ToTensor4<const float>(
      k_obj, "k", false, "(batch, kv_heads, k_tokens, head_dim)");
  const ConstTensor4 v = ToTensor4<const float>(
      v_obj, "v", false, "(batch, kv_heads, k_tokens, value_dim)");
  const Tensor4 out = ToTensor4<float>(out_obj, "out", true,
                                       "(batch, q_heads, q_tokens, value_dim)");
  CheckOutShape(out, q, v.dims[3], "v's value_dim");
  if (causal_offset < 0) {
    ValueError("causal_offset is " + std::to_string(causal_offset) +
               ": must be >= 0");
  }
  if (!(dropout_p >= 0.0f && dropout_p <= 1.0f)) {
    ValueError("dropout_p is " + std::to_string(dropout_p) +
               ": must be in [0, 1]");
  }
  Options opt;
  FillOptions(opt, q.dims[0], q.dims[1], scale, causal, window, softcap, sinks,
              alibi);
  opt.o.mask.causal_offset = static_cast<size_t>(causal_offset);
  if (causal_offsets) {
    opt.causal_offsets = PerBatch(*causal_offsets, "causal_offsets", q.dims[0]);
    opt.o.mask.causal_offsets = opt.causal_offsets.data();
  }
  if (key_lengths) {
    opt.key_lengths = PerBatch(*key_lengths, "key_lengths", q.dims[0]);
    for (size_t b = 0; b < opt.key_lengths.size(); ++b) {
      if (opt.key_lengths[b] > k.dims[2]) {
        ValueError("key_lengths[" + std::to_string(b) + "] is " +
                   std::to_string(opt.key_lengths[b]) + " but k has " +
                   std::to_string(k.dims[2]) + " tokens");
      }
    }
    opt.o.mask.key_lengths = opt.key_lengths.data();
  }
  opt.o.dropout = dropout_p;
  opt.o.dropout_key = {dropout_seed, dropout_offset};
  opt.o.log_sum_exp = LseOut(lse_obj, out);
  py::gil_scoped_release release;
  simdattn::ScaledDotProductAttention(q, k, v, out, opt.o);
}

std::vector<std::string> TypeNames() {
  std::vector<std::string> r;
  for (int t = 0; t <= static_cast<int>(simdattn::kLastElementType); ++t) {
    r.push_back(
        simdattn::ElementTraitsOf(static_cast<simdattn::ElementType>(t)).name);
  }
  return r;
}

std::vector<size_t> Sequences(const std::vector<int64_t>& s, size_t batch) {
  std::vector<size_t> r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0 || static_cast<size_t>(s[i]) >= batch) {
      ValueError("sequences[" + std::to_string(i) + "] is " +
                 std::to_string(s[i]) + ": the cache holds sequences 0 to " +
                 std::to_string(batch) + " - 1");
    }
    for (size_t j = 0; j < r.size(); ++j) {
      if (r[j] == static_cast<size_t>(s[i])) {
        ValueError("sequences lists sequence " + std::to_string(s[i]) +
                   " twice (entries " + std::to_string(j) + " and " +
                   std::to_string(i) + ")");
      }
    }
    r.push_back(static_cast<size_t>(s[i]));
  }
  return r;
}

size_t Sequence(const simdattn::KVCache& c, int64_t s, const char* name) {
  if (s < 0 || static_cast<size_t>(s) >= c.batch()) {
    ValueError(std::string(name) + " is " + std::to_string(s) +
               ": the cache holds sequences 0 to " + std::to_string(c.batch()) +
               " - 1");
  }
  return static_cast<size_t>(s);
}

void CacheAttention(py::handle q_obj, const simdattn::KVCache& cache,
                    py::handle out_obj, py::handle lse_obj,
                    std::optional<float> scale, bool causal, int64_t window,
                    float softcap, std::optional<std::vector<float>> sinks,
                    py::object alibi) {
  const ConstTensor4 q = ToTensor4<const float>(
      q_obj, "q", false, "(batch, q_heads, q_tokens, head_dim)");
  const Tensor4 out = ToTensor4<float>(out_obj, "out", true,
                                       "(batch, q_heads, q_tokens, value_dim)");
  CheckOutShape(out, q, cache.value_dim(), "the cache's value_dim");
  if (q.dims[0] != cache.batch()) {
    ValueError("q has batch " + std::to_string(q.dims[0]) +
               " but the cache holds " + std::to_string(cache.batch()) +
               " sequences");
  }
  Options opt;
  FillOptions(opt, q.dims[0], q.dims[1], scale, causal, window, softcap, sinks,
              alibi);
  opt.o.log_sum_exp = LseOut(lse_obj, out);
  const simdattn::KVCacheView view = cache.View();
  py::gil_scoped_release release;
  simdattn::ScaledDotProductAttention(q, view, out, opt.o);
}

Module MakeModule(const std::string& kind, size_t d_in, size_t d_out,
                  size_t context_length, float dropout, size_t num_heads,
                  bool qkv_bias, size_t num_kv_heads, float rope_theta,
                  bool out_bias) {
  using simdattn::AttentionModule;
  auto wrap = [](AttentionModule&& m) {
    return Module{std::make_unique<AttentionModule>(std::move(m))};
  };
  if (kind == "SelfAttention_v1") {
    return wrap(simdattn::SelfAttentionV1(d_in, d_out));
  }
  if (kind == "SelfAttention_v2") {
    return wrap(simdattn::SelfAttentionV2(d_in, d_out, qkv_bias));
  }
  if (kind == "CausalAttention") {
    return wrap(simdattn::CausalAttention(d_in, d_out, context_length, dropout,
                                          qkv_bias));
  }
  if (kind == "MultiHeadAttentionWrapper") {
    return wrap(simdattn::MultiHeadAttentionWrapper(
        d_in, d_out, context_length, dropout, num_heads, qkv_bias));
  }
  if (kind == "MultiHeadAttention" || kind == "LlamaAttention") {
    simdattn::MultiHeadAttentionConfig c;
    c.d_in = d_in;
    c.d_out = d_out;
    c.context_length = context_length;
    c.dropout = dropout;
    c.num_heads = num_heads;
    c.qkv_bias = qkv_bias;
    c.num_kv_heads = num_kv_heads;
    if (kind == "LlamaAttention") {  // HF's names, RoPE, o_proj's bias.
      c.weight_names = simdattn::WeightNames::kLlama;
      c.rope = simdattn::RopeOptions{};
      c.rope->theta = rope_theta;
      c.out_bias = out_bias;
    }
    return wrap(simdattn::MultiHeadAttention(c));
  }
  ValueError("kind '" + kind + "' is not a module of the seeds");
}

void LoadStateDict(Module& self, py::dict state_dict) {
  simdattn::StateDict sd;
  std::vector<Arr> keep;
  keep.reserve(state_dict.size());
  for (auto item : state_dict) {
    const std::string name = py::str(item.first).cast<std::string>();
    keep.push_back(ToArr(item.second, name.c_str(), false));
    const Arr& a = keep.back();
    simdattn::TensorRef ref;
    switch (a.dt) {
      case DT::kF32:
        ref.dtype = simdattn::DType::kF32;
        break;
      case DT::kBF16:
        ref.dtype = simdattn::DType::kBF16;
        break;
      case DT::kF16:
        ref.dtype = simdattn::DType::kF16;
        break;
      default:
        TypeError(name + " has dtype " + a.dtype_name +
                  ": expected float32, bfloat16 or float16");
    }
    int64_t expect = 1;
    for (int64_t i = a.ndim() - 1; i >= 0; --i) {
      if (a.shape[i] > 1 && a.strides[i] != expect) {
        TypeError(name + " is not contiguous (call .contiguous())");
      }
      expect *= a.shape[i];
    }
    ref.data = a.data;
    ref.shape.assign(a.shape.begin(), a.shape.end());
    sd.emplace(name, std::move(ref));
  }
  self.m->LoadStateDict(sd);
}

void Forward(const Module& self, py::handle x_obj, py::handle y_obj) {
  Arr x = ToArr(x_obj, "x", false);
  Arr y = ToArr(y_obj, "y", true);
  RequireDtype(x, "x", DT::kF32, "float32");
  RequireDtype(y, "y", DT::kF32, "float32");
  RequireLayout(x, "x");
  RequireLayout(y, "y");
  if (x.ndim() != 2 && x.ndim() != 3) {
    ValueError(
        "x must have 2 (tokens, d_in) or 3 (batch, tokens, d_in) "
        "dimensions, got shape " +
        ShapeStr(x.shape));
  }
  if (y.ndim() != x.ndim()) {
    ValueError("y has shape " + ShapeStr(y.shape) + " but x has shape " +
               ShapeStr(x.shape));
  }
  if (x.ndim() == 2) {
    x.shape.insert(x.shape.begin(), 1);
    x.strides.insert(x.strides.begin(), x.shape[1] * x.strides[0]);
    y.shape.insert(y.shape.begin(), 1);
    y.strides.insert(y.strides.begin(), y.shape[1] * y.strides[0]);
  }
  const simdattn::ConstTensor3 xv(static_cast<const float*>(x.data), x.shape[0],
                                  x.shape[1], x.shape[2], x.strides[0],
                                  x.strides[1]);
  const simdattn::Tensor3 yv(static_cast<float*>(y.data), y.shape[0],
                             y.shape[1], y.shape[2], y.strides[0],
                             y.strides[1]);
  py::gil_scoped_release release;
  self.m->Forward(xv, yv);
}

std::unique_ptr<tbb::global_control>& ThreadLimit() {
  static auto* limit = new std::unique_ptr<tbb::global_control>();
  return *limit;
}

}  // namespace

PYBIND11_MODULE(_simdattn, m) {
  m.doc() =
      "simdattn's C++ API for Python (pybind11). Use the `simdattn` package "
      "rather than this module.";

  m.def("version", [] { return std::string(simdattn::Version()); });
  m.def("compiled_targets", &simdattn::CompiledTargets);
  m.def("supported_targets", &simdattn::SupportedTargets);
  m.def("active_target", &simdattn::ActiveTarget);
  m.def("use_target", &simdattn::UseTarget, py::arg("name"));
  m.def("cpu_summary", &simdattn::CpuSummary);
  m.def("policy_rules", &simdattn::PolicyRules);
  m.def("last_attention_plan", &simdattn::LastAttentionPlan);
  m.def("load_plans", &simdattn::LoadPlans);
  m.def("bf16_dot_kernel",
        [] { return std::string(simdattn::BFloat16DotKernel()); });
  m.def("cache_types", &TypeNames);
  m.def("alibi_slopes", &simdattn::AlibiSlopes, py::arg("num_heads"));

  m.def(
      "set_num_threads",
      [](int64_t n) {
        if (n < 0) ValueError("n is " + std::to_string(n) + ": must be >= 0");
        ThreadLimit().reset();
        if (n > 0) {
          ThreadLimit() = std::make_unique<tbb::global_control>(
              tbb::global_control::max_allowed_parallelism,
              static_cast<size_t>(n));
        }
      },
      py::arg("n"));
  m.def("get_num_threads", [] {
    return tbb::global_control::active_value(
        tbb::global_control::max_allowed_parallelism);
  });

  m.def(
      "sdpa", &Sdpa, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
      py::arg("lse").none(true), py::arg("scale").none(true), py::arg("causal"),
      py::arg("causal_offset"), py::arg("causal_offsets").none(true),
      py::arg("window"), py::arg("softcap"), py::arg("sinks").none(true),
      py::arg("alibi").none(true), py::arg("key_lengths").none(true),
      py::arg("dropout_p"), py::arg("dropout_seed"), py::arg("dropout_offset"));

  py::class_<simdattn::KVCache> cache(m, "KVCache");
  cache
      .def(
          py::init([](int64_t batch, int64_t kv_heads, int64_t capacity,
                      int64_t head_dim, const std::string& dtype,
                      int64_t block_size, int64_t num_blocks, int64_t value_dim,
                      float key_scale, float value_scale, int64_t window,
                      std::optional<float> rope_theta, int64_t rotary_dim,
                      int64_t rotary_offset, bool interleaved) {
            const std::pair<const char*, int64_t> sizes[] = {
                {"batch", batch},           {"kv_heads", kv_heads},
                {"capacity", capacity},     {"head_dim", head_dim},
                {"block_size", block_size}, {"num_blocks", num_blocks},
                {"value_dim", value_dim},   {"window", window}};
            for (const auto& [name, value] : sizes) {
              if (value < 0) {
                ValueError(std::string(name) + " is " + std::to_string(value) +
                           ": must be >= 0");
              }
            }
            simdattn::KVCacheConfig config;
            config.type = ParseType(dtype);
            config.block_size = block_size;
            config.num_blocks = num_blocks;
            config.value_dim = value_dim;
            config.key_scale = key_scale;
            config.value_scale = value_scale;
            config.window = window;
            config.rope =
                Rope(rope_theta, rotary_dim, rotary_offset, interleaved);
            return std::make_unique<simdattn::KVCache>(
                batch, kv_heads, capacity, head_dim, config);
          }),
          py::arg("batch"), py::arg("kv_heads"), py::arg("capacity"),
          py::arg("head_dim"), py::kw_only(), py::arg("dtype") = "f32",
          py::arg("block_size") = 0, py::arg("num_blocks") = 0,
          py::arg("value_dim") = 0, py::arg("key_scale") = 1.0f,
          py::arg("value_scale") = 1.0f, py::arg("window") = 0,
          py::arg("rope_theta") = py::none(), py::arg("rotary_dim") = 0,
          py::arg("rotary_offset") = 0, py::arg("interleaved") = false)
      .def("_append",
           [](simdattn::KVCache& c, py::handle k_obj, py::handle v_obj,
              std::optional<std::vector<int64_t>> sequences) {
             const ConstTensor4 k = ToTensor4<const float>(
                 k_obj, "k", false, "(batch, kv_heads, tokens, head_dim)");
             const ConstTensor4 v = ToTensor4<const float>(
                 v_obj, "v", false, "(batch, kv_heads, tokens, value_dim)");
             const size_t count = sequences ? sequences->size() : c.batch();
             const size_t n = k.dims[2];
             const std::vector<int64_t> want_k = {
                 int64_t(count), int64_t(c.kv_heads()), int64_t(n),
                 int64_t(c.head_dim())};
             const std::vector<int64_t> want_v = {
                 int64_t(count), int64_t(c.kv_heads()), int64_t(n),
                 int64_t(c.value_dim())};
             const std::vector<int64_t> got_k = {
                 int64_t(k.dims[0]), int64_t(k.dims[1]), int64_t(k.dims[2]),
                 int64_t(k.dims[3])};
             const std::vector<int64_t> got_v = {
                 int64_t(v.dims[0]), int64_t(v.dims[1]), int64_t(v.dims[2]),
                 int64_t(v.dims[3])};
             const char* rows = sequences ? "(len(sequences), kv_heads, "
                                          : "(batch, kv_heads, ";
             if (got_k != want_k) {
               ValueError("k has shape " + ShapeStr(got_k) + ": expected " +
                          ShapeStr(want_k) + " " + rows + "tokens, head_dim)");
             }
             if (got_v != want_v) {
               ValueError("v has shape " + ShapeStr(got_v) + ": expected " +
                          ShapeStr(want_v) + " " + rows + "tokens, value_dim)");
             }
             if (sequences) {
               std::vector<size_t> s = Sequences(*sequences, c.batch());
               if (s.size() != k.dims[0]) {
                 ValueError("sequences has " + std::to_string(s.size()) +
                            " entries but k has batch " +
                            std::to_string(k.dims[0]));
               }
               py::gil_scoped_release release;
               c.Append(k, v, s);
             } else {
               py::gil_scoped_release release;
               c.Append(k, v);
             }
           })
      .def(
          "truncate",
          [](simdattn::KVCache& c, int64_t sequence, int64_t length) {
            const size_t s = Sequence(c, sequence, "sequence");
            if (length < 0 || static_cast<size_t>(length) > c.length(s)) {
              ValueError("length is " + std::to_string(length) + ": sequence " +
                         std::to_string(s) + " holds " +
                         std::to_string(c.length(s)) + " tokens");
            }
            c.Truncate(s, static_cast<size_t>(length));
          },
          py::arg("sequence"), py::arg("length"))
      .def(
          "reset",
          [](simdattn::KVCache& c, int64_t sequence) {
            c.Reset(Sequence(c, sequence, "sequence"));
          },
          py::arg("sequence"))
      .def("clear", &simdattn::KVCache::Clear)
      .def(
          "copy",
          [](simdattn::KVCache& c, int64_t src, int64_t dst) {
            c.Copy(Sequence(c, src, "src"), Sequence(c, dst, "dst"));
          },
          py::arg("src"), py::arg("dst"))
      .def(
          "reorder",
          [](simdattn::KVCache& c, const std::vector<int64_t>& order) {
            if (order.size() != c.batch()) {
              ValueError("order has " + std::to_string(order.size()) +
                         " entries: expected one per sequence (" +
                         std::to_string(c.batch()) + ")");
            }
            std::vector<size_t> o;
            for (size_t i = 0; i < order.size(); ++i) {
              if (order[i] < 0 || static_cast<size_t>(order[i]) >= c.batch()) {
                ValueError("order[" + std::to_string(i) + "] is " +
                           std::to_string(order[i]) +
                           ": the cache holds sequences 0 to " +
                           std::to_string(c.batch()) + " - 1");
              }
              o.push_back(static_cast<size_t>(order[i]));
            }
            c.Reorder(o);
          },
          py::arg("order"))
      .def("_read",
           [](const simdattn::KVCache& c, int64_t sequence, py::handle k_obj,
              py::handle v_obj) {
             const size_t s = Sequence(c, sequence, "sequence");
             Arr k = ToArr(k_obj, "keys", true),
                 v = ToArr(v_obj, "values", true);
             RequireDtype(k, "keys", DT::kF32, "float32");
             RequireDtype(v, "values", DT::kF32, "float32");
             const int64_t n = c.length(s);
             if (k.shape != std::vector<int64_t>{int64_t(c.kv_heads()), n,
                                                 int64_t(c.head_dim())} ||
                 v.shape != std::vector<int64_t>{int64_t(c.kv_heads()), n,
                                                 int64_t(c.value_dim())}) {
               ValueError("keys/values have the wrong shape");
             }
             c.Read(s,
                    simdattn::Tensor3(static_cast<float*>(k.data), k.shape[0],
                                      k.shape[1], k.shape[2], k.strides[0],
                                      k.strides[1]),
                    simdattn::Tensor3(static_cast<float*>(v.data), v.shape[0],
                                      v.shape[1], v.shape[2], v.strides[0],
                                      v.strides[1]));
           })
      .def(
          "length",
          [](const simdattn::KVCache& c, int64_t sequence) {
            return c.length(Sequence(c, sequence, "sequence"));
          },
          py::arg("sequence"))
      .def_property_readonly("lengths",
                             [](const simdattn::KVCache& c) {
                               std::vector<size_t> r;
                               for (size_t b = 0; b < c.batch(); ++b) {
                                 r.push_back(c.length(b));
                               }
                               return r;
                             })
      .def_property_readonly("batch", &simdattn::KVCache::batch)
      .def_property_readonly("kv_heads", &simdattn::KVCache::kv_heads)
      .def_property_readonly("capacity", &simdattn::KVCache::capacity)
      .def_property_readonly("head_dim", &simdattn::KVCache::head_dim)
      .def_property_readonly("value_dim", &simdattn::KVCache::value_dim)
      .def_property_readonly(
          "dtype",
          [](const simdattn::KVCache& c) {
            return std::string(simdattn::ElementTraitsOf(c.config().type).name);
          })
      .def_property_readonly("block_size", [](const simdattn::KVCache& c) {
        return c.config().block_size;
      });

  DefineCacheTransfers(cache);

  m.def("cache_attention", &CacheAttention, py::arg("q"), py::arg("cache"),
        py::arg("out"), py::arg("lse").none(true), py::arg("scale").none(true),
        py::arg("causal"), py::arg("window"), py::arg("softcap"),
        py::arg("sinks").none(true), py::arg("alibi").none(true));

  py::class_<Module>(m, "Module")
      .def(py::init(&MakeModule), py::arg("kind"), py::arg("d_in"),
           py::arg("d_out"), py::arg("context_length") = 0,
           py::arg("dropout") = 0.0f, py::arg("num_heads") = 1,
           py::arg("qkv_bias") = false, py::arg("num_kv_heads") = 0,
           py::arg("rope_theta") = 10000.0f, py::arg("out_bias") = false)
      .def("load_state_dict", &LoadStateDict, py::arg("state_dict"))
      .def("forward", &Forward, py::arg("x"), py::arg("y"))
      .def("state_dict_shapes",
           [](const Module& self) { return self.m->StateDictShapes(); })
      .def_property_readonly("out_features", [](const Module& self) {
        return self.m->config().y_features();
      });

  DefineServing(m);
  DefineKernels(m);
}
