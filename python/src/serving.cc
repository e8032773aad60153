// A serving step from Python, with vLLM's conventions: pools of KV blocks in
// the caller's tensors (KVPages), keys and values written by slot_mapping,
// attention over block_table, and a step's metadata planned once for every
// layer (VarlenPlan). The metadata is copied once per step into vectors the
// plan owns (int32 or int64 tensors, arrays or lists); pools, queries and
// outputs are used where they lie.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/arrays.h"

namespace simdattn_python {
namespace {

using simdattn::ElementTraits;
using simdattn::KVPages;

// A pool over the caller's tensors, which it keeps alive.
struct Pages {
  KVPages pages;
  py::object keys, values, key_scales, value_scales;
};

// Sizes in elements of `traits` of `units` units of `unit_bytes` bytes;
// ValueError unless they are whole elements (blocks).
size_t Elements(int64_t units, size_t unit_bytes, const ElementTraits& traits,
                const std::string& what) {
  const size_t bytes = static_cast<size_t>(units) * unit_bytes;
  if (bytes % traits.bytes != 0) {
    ValueError(what + " spans " + std::to_string(bytes) + " bytes, not whole " +
               traits.name + " elements of " + std::to_string(traits.bytes) +
               " bytes");
  }
  return bytes / traits.bytes * traits.values;
}

// A cache tensor (num_blocks, kv_heads, block_size, row) holding `type`:
// the type's own dtype (float32, bfloat16, float16, int8) or its bytes
// (uint8: fp8 and ggml's blocks, or any type).
struct CacheTensor {
  Arr a;
  size_t row = 0;  // Elements per row.
  size_t block_stride = 0, head_stride = 0, row_stride = 0;  // Elements.
};

CacheTensor ToCache(py::handle obj, const char* name, simdattn::KVType type) {
  const ElementTraits traits = simdattn::ElementTraitsOf(type);
  CacheTensor c{ToArr(obj, name, /*writable=*/true)};
  const Arr& a = c.a;
  const DT own = type == simdattn::KVType::kF32    ? DT::kF32
                 : type == simdattn::KVType::kBF16 ? DT::kBF16
                 : type == simdattn::KVType::kF16  ? DT::kF16
                 : type == simdattn::KVType::kInt8 ? DT::kI8
                                                   : DT::kU8;
  if (a.dt != own && a.dt != DT::kU8) {
    TypeError(std::string(name) + " has dtype " + a.dtype_name + ": a " +
              traits.name + " pool is held in " +
              (own == DT::kU8 ? "uint8" : "its own dtype or uint8 bytes"));
  }
  if (a.ndim() != 4) {
    ValueError(std::string(name) +
               " must have 4 dimensions (num_blocks, kv_heads, block_size, "
               "row), got shape " +
               ShapeStr(a.shape));
  }
  RequireLayout(a, name);
  const size_t unit = a.dt == DT::kF32                        ? 4
                      : a.dt == DT::kBF16 || a.dt == DT::kF16 ? 2
                                                              : 1;
  const std::string n = name;
  c.row = Elements(a.shape[3], unit, traits, n + "'s rows");
  c.block_stride = Elements(a.strides[0], unit, traits, n + "'s block stride");
  c.head_stride = Elements(a.strides[1], unit, traits, n + "'s head stride");
  c.row_stride = Elements(a.strides[2], unit, traits, n + "'s row stride");
  return c;
}

// A float32 (num_blocks, kv_heads, block_size) tensor of int8 scales.
void ToScales(py::handle obj, const char* name, const Arr& cache,
              float** scales, size_t* block_stride, size_t* head_stride) {
  if (obj.is_none()) {
    ValueError(std::string(name) +
               " is None: an int8 pool has a float32 "
               "scale per slot and head");
  }
  Arr a = ToArr(obj, name, /*writable=*/true);
  RequireDtype(a, name, DT::kF32, "float32");
  RequireLayout(a, name);
  const std::vector<int64_t> want = {cache.shape[0], cache.shape[1],
                                     cache.shape[2]};
  if (a.shape != want) {
    ValueError(std::string(name) + " has shape " + ShapeStr(a.shape) +
               ": expected " + ShapeStr(want) +
               " (num_blocks, kv_heads, block_size)");
  }
  *scales = static_cast<float*>(a.data);
  *block_stride = static_cast<size_t>(a.strides[0]);
  *head_stride = static_cast<size_t>(a.strides[1]);
}

Pages MakePages(py::object key_cache, py::object value_cache,
                const std::string& dtype, int64_t head_dim, int64_t value_dim,
                py::object key_scales, py::object value_scales, float key_scale,
                float value_scale) {
  const simdattn::KVType type = ParseType(dtype);
  if (head_dim < 0 || value_dim < 0) {
    ValueError("head_dim (" + std::to_string(head_dim) + ") and value_dim (" +
               std::to_string(value_dim) + ") must be >= 0");
  }
  Pages p;
  KVPages& pages = p.pages;
  const CacheTensor keys = ToCache(key_cache, "key_cache", type);
  pages.type = type;
  pages.kv_heads = keys.a.shape[1];
  pages.block_size = keys.a.shape[2];
  pages.num_blocks = keys.a.shape[0];
  pages.head_dim = head_dim == 0 ? keys.row : head_dim;
  pages.value_dim = value_dim;
  pages.keys = keys.a.data;
  pages.block_stride = keys.block_stride;
  pages.head_stride = keys.head_stride;
  pages.row_stride = keys.row_stride;
  const size_t row = std::max<size_t>(pages.head_dim, value_dim);
  if (row > keys.row) {
    ValueError("key_cache's rows hold " + std::to_string(keys.row) +
               " elements: fewer than head_dim (" +
               std::to_string(pages.head_dim) + ") or value_dim (" +
               std::to_string(value_dim) + ")");
  }
  const bool latent = value_cache.is_none();
  if (latent) {
    if (value_dim == 0 || static_cast<size_t>(value_dim) >= pages.head_dim) {
      ValueError("value_cache is None (a latent pool, MLA) but value_dim (" +
                 std::to_string(value_dim) +
                 ") is not in [1, head_dim): the first value_dim elements of "
                 "each key row are its value");
    }
    pages.values = pages.keys;
  } else {
    const CacheTensor values = ToCache(value_cache, "value_cache", type);
    if (values.a.shape[0] != keys.a.shape[0] ||
        values.a.shape[1] != keys.a.shape[1] ||
        values.a.shape[2] != keys.a.shape[2] ||
        values.block_stride != keys.block_stride ||
        values.head_stride != keys.head_stride ||
        values.row_stride != keys.row_stride || values.row < row) {
      ValueError("value_cache (shape " + ShapeStr(values.a.shape) +
                 ", strides " + ShapeStr(values.a.strides) +
                 ") must have key_cache's blocks, heads, slots and strides "
                 "(shape " +
                 ShapeStr(keys.a.shape) + ", strides " +
                 ShapeStr(keys.a.strides) + ")");
    }
    pages.values = values.a.data;
  }
  if (simdattn::ElementTraitsOf(type).scaled) {
    size_t block_stride = 0, head_stride = 0;
    ToScales(key_scales, "key_scales", keys.a, &pages.key_scales,
             &pages.scale_block_stride, &pages.scale_head_stride);
    if (!latent) {
      ToScales(value_scales, "value_scales", keys.a, &pages.value_scales,
               &block_stride, &head_stride);
      if (block_stride != pages.scale_block_stride ||
          head_stride != pages.scale_head_stride) {
        ValueError("value_scales' strides differ from key_scales'");
      }
    }
  }
  pages.key_scale = key_scale;
  pages.value_scale = value_scale;
  p.keys = key_cache;
  p.values = value_cache;
  p.key_scales = key_scales;
  p.value_scales = value_scales;
  // The library's own check of the whole layout, now rather than per call.
  simdattn::SizeOf(pages);
  return p;
}

// A 1-D (or, with `columns`, 2-D) integer operand: an int32 or int64 tensor
// or array, or a list; copied.
std::vector<int64_t> Integers(py::handle obj, const char* name,
                              int64_t* columns = nullptr) {
  const int64_t dims = columns != nullptr ? 2 : 1;
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    if (dims == 1) return obj.cast<std::vector<int64_t>>();
    const auto rows = obj.cast<std::vector<std::vector<int64_t>>>();
    *columns = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
    std::vector<int64_t> r;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (static_cast<int64_t>(rows[i].size()) != *columns) {
        ValueError(std::string(name) + "'s rows differ in length (row " +
                   std::to_string(i) + ")");
      }
      r.insert(r.end(), rows[i].begin(), rows[i].end());
    }
    return r;
  }
  const Arr a = ToArr(obj, name, /*writable=*/false);
  if (a.dt != DT::kI32 && a.dt != DT::kI64) {
    TypeError(std::string(name) + " has dtype " + a.dtype_name +
              ": expected int32 or int64");
  }
  if (a.ndim() != dims) {
    ValueError(std::string(name) + " must have " + std::to_string(dims) +
               " dimension" + (dims == 1 ? "" : "s") + ", got shape " +
               ShapeStr(a.shape));
  }
  const int64_t rows = a.shape[0], cols = dims == 2 ? a.shape[1] : 1;
  const int64_t col_stride = dims == 2 ? a.strides[1] : 0;
  if (columns != nullptr) *columns = cols;
  std::vector<int64_t> r;
  r.reserve(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t at = i * a.strides[0] + j * col_stride;
      r.push_back(a.dt == DT::kI32 ? static_cast<const int32_t*>(a.data)[at]
                                   : static_cast<const int64_t*>(a.data)[at]);
    }
  }
  return r;
}

// A step's metadata, owned (the plan and the calls point into it).
struct StepData {
  std::vector<size_t> query_starts, seq_lens, positions, tree_offsets;
  std::vector<int32_t> block_table;
  std::vector<int64_t> slot_mapping;
  std::vector<uint64_t> tree_bits;
  simdattn::VarlenStep step;
};

std::unique_ptr<StepData> MakeStep(py::handle query_start_loc,
                                   py::handle seq_lens, py::handle block_table,
                                   py::handle slot_mapping,
                                   py::handle positions, py::handle tree_bits,
                                   py::handle tree_offsets) {
  auto d = std::make_unique<StepData>();
  d->query_starts = NonNegative(Integers(query_start_loc, "query_start_loc"),
                                "query_start_loc");
  d->seq_lens = NonNegative(Integers(seq_lens, "seq_lens"), "seq_lens");
  if (d->query_starts.size() != d->seq_lens.size() + 1) {
    ValueError("query_start_loc has " + std::to_string(d->query_starts.size()) +
               " entries: expected len(seq_lens) + 1 = " +
               std::to_string(d->seq_lens.size() + 1));
  }
  if (d->query_starts[0] != 0) {
    ValueError("query_start_loc[0] (" + std::to_string(d->query_starts[0]) +
               ") is not 0");
  }
  for (size_t b = 1; b < d->query_starts.size(); ++b) {
    if (d->query_starts[b] < d->query_starts[b - 1]) {
      ValueError("query_start_loc[" + std::to_string(b) + "] (" +
                 std::to_string(d->query_starts[b]) +
                 ") is less than query_start_loc[" + std::to_string(b - 1) +
                 "] (" + std::to_string(d->query_starts[b - 1]) + ")");
    }
  }
  const size_t num_seqs = d->seq_lens.size();
  int64_t columns = 0;
  const std::vector<int64_t> table =
      Integers(block_table, "block_table", &columns);
  if (table.size() != num_seqs * static_cast<size_t>(columns)) {
    ValueError("block_table has " +
               std::to_string(table.size() / std::max<int64_t>(columns, 1)) +
               " rows: expected one per sequence (" + std::to_string(num_seqs) +
               ")");
  }
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] < -1 || table[i] > INT32_MAX) {
      ValueError("block_table[" + std::to_string(i / columns) + ", " +
                 std::to_string(i % columns) + "] is " +
                 std::to_string(table[i]) + ": a block index, or -1");
    }
    d->block_table.push_back(static_cast<int32_t>(table[i]));
  }
  const size_t num_tokens = d->query_starts.back();
  simdattn::VarlenStep& s = d->step;
  if (!slot_mapping.is_none()) {
    d->slot_mapping = Integers(slot_mapping, "slot_mapping");
    if (d->slot_mapping.size() != num_tokens) {
      ValueError("slot_mapping has " + std::to_string(d->slot_mapping.size()) +
                 " entries: expected one per token (query_start_loc[-1] = " +
                 std::to_string(num_tokens) + ")");
    }
    s.slot_mapping = d->slot_mapping.data();
  }
  if (!positions.is_none()) {
    d->positions = NonNegative(Integers(positions, "positions"), "positions");
    if (d->positions.size() != num_tokens) {
      ValueError("positions has " + std::to_string(d->positions.size()) +
                 " entries: expected one per token (" +
                 std::to_string(num_tokens) + ")");
    }
    s.positions = d->positions.data();
  }
  if (tree_bits.is_none() != tree_offsets.is_none()) {
    ValueError("tree_bits and tree_offsets come together");
  }
  if (!tree_bits.is_none()) {
    for (int64_t bits : Integers(tree_bits, "tree_bits")) {
      d->tree_bits.push_back(static_cast<uint64_t>(bits));
    }
    d->tree_offsets =
        NonNegative(Integers(tree_offsets, "tree_offsets"), "tree_offsets");
    if (d->tree_offsets.size() != num_seqs) {
      ValueError("tree_offsets has " + std::to_string(d->tree_offsets.size()) +
                 " entries: expected one per sequence (" +
                 std::to_string(num_seqs) + ")");
    }
    s.tree_bits = d->tree_bits.data();
    s.tree_offsets = d->tree_offsets.data();
  }
  s.num_seqs = num_seqs;
  s.query_starts = d->query_starts.data();
  s.seq_lens = d->seq_lens.data();
  s.block_table = d->block_table.data();
  s.blocks_per_sequence = static_cast<size_t>(columns);
  return d;
}

// A (num_tokens, heads, dim) float32 operand as the (1, heads, num_tokens,
// dim) view the step's calls take.
template <typename T>
simdattn::Tensor4View<T> TokenMajor(py::handle obj, const char* name,
                                    bool writable, const char* dims) {
  const Arr a = ToArr(obj, name, writable);
  if (a.ndim() != 3) {
    ValueError(std::string(name) + " must have 3 dimensions " + dims +
               ", got shape " + ShapeStr(a.shape));
  }
  RequireDtype(a, name, DT::kF32, "float32");
  RequireLayout(a, name);
  using U = std::remove_const_t<T>;
  return simdattn::Tensor4View<T>(static_cast<U*>(a.data), 1, a.shape[1],
                                  a.shape[0], a.shape[2], 0, a.strides[1],
                                  a.strides[0]);
}

// lse: None, or float32 (q_heads, num_tokens), dense.
float* StepLse(py::handle obj, const Tensor4& out) {
  if (obj.is_none()) return nullptr;
  const Arr a = ToArr(obj, "lse", /*writable=*/true);
  RequireDtype(a, "lse", DT::kF32, "float32");
  const std::vector<int64_t> want = {static_cast<int64_t>(out.dims[1]),
                                     static_cast<int64_t>(out.dims[2])};
  if (a.shape != want) {
    ValueError("lse has shape " + ShapeStr(a.shape) + ": expected " +
               ShapeStr(want) + " (q_heads, num_tokens)");
  }
  if ((want[0] > 1 && a.strides[0] != want[1]) ||
      (want[1] > 1 && a.strides[1] != 1)) {
    TypeError("lse is not contiguous: simdattn writes it densely");
  }
  return static_cast<float*>(a.data);
}

struct StepOperands {
  ConstTensor4 q;
  Tensor4 out;
  Options opt;
};

StepOperands Operands(py::handle query, py::handle out_obj, py::handle lse,
                      size_t value_dim, std::optional<float> scale, bool causal,
                      int64_t window, float softcap,
                      const std::optional<std::vector<float>>& sinks,
                      const py::object& alibi) {
  StepOperands s{TokenMajor<const float>(query, "query", false,
                                         "(num_tokens, q_heads, head_dim)"),
                 TokenMajor<float>(out_obj, "out", true,
                                   "(num_tokens, q_heads, value_dim)"),
                 {}};
  CheckOutShape(s.out, s.q, value_dim, "the pages' value_dim");
  FillOptions(s.opt, 1, s.q.dims[1], scale, causal, window, softcap, sinks,
              alibi);
  s.opt.o.log_sum_exp = StepLse(lse, s.out);
  return s;
}

size_t ValueDim(const KVPages& p) {
  return p.value_dim == 0 ? p.head_dim : p.value_dim;
}

// keys and values (num_tokens, kv_heads, dim); values None for a latent
// pool.
std::pair<ConstTensor4, ConstTensor4> KeysValues(py::handle key,
                                                 py::handle value) {
  const ConstTensor4 k = TokenMajor<const float>(
      key, "key", false, "(num_tokens, kv_heads, head_dim)");
  const ConstTensor4 v =
      value.is_none()
          ? ConstTensor4{}
          : TokenMajor<const float>(value, "value", false,
                                    "(num_tokens, kv_heads, value_dim)");
  return {k, v};
}

// A planned step: its metadata and the library's plan over it.
struct Plan {
  std::unique_ptr<StepData> data;
  simdattn::VarlenPlan plan;
};

}  // namespace

void DefineServing(py::module_& m) {
  py::class_<Pages>(m, "KVPages")
      .def(py::init(&MakePages), py::arg("key_cache"), py::arg("value_cache"),
           py::kw_only(), py::arg("dtype"), py::arg("head_dim") = 0,
           py::arg("value_dim") = 0, py::arg("key_scales") = py::none(),
           py::arg("value_scales") = py::none(), py::arg("key_scale") = 1.0f,
           py::arg("value_scale") = 1.0f)
      .def_property_readonly(
          "dtype",
          [](const Pages& p) {
            return std::string(simdattn::ElementTraitsOf(p.pages.type).name);
          })
      .def_property_readonly("num_blocks",
                             [](const Pages& p) { return p.pages.num_blocks; })
      .def_property_readonly("block_size",
                             [](const Pages& p) { return p.pages.block_size; })
      .def_property_readonly("kv_heads",
                             [](const Pages& p) { return p.pages.kv_heads; })
      .def_property_readonly("head_dim",
                             [](const Pages& p) { return p.pages.head_dim; })
      .def_property_readonly("value_dim",
                             [](const Pages& p) { return ValueDim(p.pages); })
      .def_readonly("key_cache", &Pages::keys)
      .def_readonly("value_cache", &Pages::values)
      .def_readonly("key_scales", &Pages::key_scales)
      .def_readonly("value_scales", &Pages::value_scales);

  m.def("element_size", [](const std::string& dtype) {
    const ElementTraits t = simdattn::ElementTraitsOf(ParseType(dtype));
    return std::make_pair(t.bytes, t.values);
  });

  m.def(
      "write_kv_slots",
      [](py::handle key, py::handle value, const Pages& pages,
         py::handle slot_mapping, py::handle positions,
         std::optional<float> rope_theta, int64_t rotary_dim,
         int64_t rotary_offset, bool interleaved) {
        const auto [k, v] = KeysValues(key, value);
        const std::vector<int64_t> slots =
            Integers(slot_mapping, "slot_mapping");
        if (slots.size() != k.dims[2]) {
          ValueError("slot_mapping has " + std::to_string(slots.size()) +
                     " entries but key has " + std::to_string(k.dims[2]) +
                     " tokens");
        }
        const auto rope =
            Rope(rope_theta, rotary_dim, rotary_offset, interleaved);
        if (!rope) {
          py::gil_scoped_release release;
          simdattn::WriteKVSlots(k, v, slots.data(), pages.pages);
          return;
        }
        if (positions.is_none()) {
          ValueError("positions is None: a rotated write needs each token's");
        }
        const std::vector<size_t> at =
            NonNegative(Integers(positions, "positions"), "positions");
        if (at.size() != k.dims[2]) {
          ValueError("positions has " + std::to_string(at.size()) +
                     " entries but key has " + std::to_string(k.dims[2]) +
                     " tokens");
        }
        py::gil_scoped_release release;
        simdattn::WriteKVSlots(k, v, slots.data(), pages.pages, *rope,
                               at.data());
      },
      py::arg("key"), py::arg("value"), py::arg("pages"),
      py::arg("slot_mapping"), py::kw_only(), py::arg("positions") = py::none(),
      py::arg("rope_theta") = py::none(), py::arg("rotary_dim") = 0,
      py::arg("rotary_offset") = 0, py::arg("interleaved") = false);

  m.def(
      "varlen_attention",
      [](py::handle query, const Pages& pages, py::handle query_start_loc,
         py::handle seq_lens, py::handle block_table, py::handle out,
         py::handle lse, std::optional<float> scale, bool causal,
         int64_t window, float softcap, std::optional<std::vector<float>> sinks,
         py::object alibi, py::handle tree_bits, py::handle tree_offsets) {
        const auto step =
            MakeStep(query_start_loc, seq_lens, block_table, py::none(),
                     py::none(), tree_bits, tree_offsets);
        StepOperands s = Operands(query, out, lse, ValueDim(pages.pages), scale,
                                  causal, window, softcap, sinks, alibi);
        py::gil_scoped_release release;
        simdattn::VarlenAttention(s.q, step->step, pages.pages, s.out, s.opt.o);
      },
      py::arg("query"), py::arg("pages"), py::arg("query_start_loc"),
      py::arg("seq_lens"), py::arg("block_table"), py::arg("out"),
      py::arg("lse").none(true), py::arg("scale").none(true), py::arg("causal"),
      py::arg("window"), py::arg("softcap"), py::arg("sinks").none(true),
      py::arg("alibi").none(true), py::arg("tree_bits").none(true),
      py::arg("tree_offsets").none(true));

  py::class_<Plan>(m, "VarlenPlan")
      .def(py::init([](const Pages& pages, py::handle query_start_loc,
                       py::handle seq_lens, py::handle block_table,
                       py::handle slot_mapping, py::handle positions,
                       py::handle tree_bits, py::handle tree_offsets,
                       int64_t max_window) {
             if (max_window < 0) {
               ValueError("max_window is " + std::to_string(max_window) +
                          ": must be >= 0");
             }
             auto p = std::make_unique<Plan>();
             p->data =
                 MakeStep(query_start_loc, seq_lens, block_table, slot_mapping,
                          positions, tree_bits, tree_offsets);
             p->plan = simdattn::VarlenPlan(p->data->step, pages.pages,
                                            static_cast<size_t>(max_window));
             return p;
           }),
           py::arg("pages"), py::arg("query_start_loc"), py::arg("seq_lens"),
           py::arg("block_table"), py::kw_only(),
           py::arg("slot_mapping") = py::none(),
           py::arg("positions") = py::none(), py::arg("tree_bits") = py::none(),
           py::arg("tree_offsets") = py::none(), py::arg("max_window") = 0)
      .def_property_readonly("num_tokens",
                             [](const Plan& p) { return p.plan.num_tokens(); })
      .def_property_readonly(
          "num_seqs", [](const Plan& p) { return p.plan.step().num_seqs; })
      .def(
          "_attention",
          [](const Plan& p, py::handle query, const Pages& pages,
             py::handle out, py::handle lse, std::optional<float> scale,
             bool causal, int64_t window, float softcap,
             std::optional<std::vector<float>> sinks, py::object alibi) {
            StepOperands s =
                Operands(query, out, lse, ValueDim(pages.pages), scale, causal,
                         window, softcap, sinks, alibi);
            py::gil_scoped_release release;
            p.plan.Attention(s.q, pages.pages, s.out, s.opt.o);
          },
          py::arg("query"), py::arg("pages"), py::arg("out"),
          py::arg("lse").none(true), py::arg("scale").none(true),
          py::arg("causal"), py::arg("window"), py::arg("softcap"),
          py::arg("sinks").none(true), py::arg("alibi").none(true))
      .def(
          "write",
          [](const Plan& p, py::handle key, py::handle value,
             const Pages& pages, std::optional<float> rope_theta,
             int64_t rotary_dim, int64_t rotary_offset, bool interleaved) {
            const auto [k, v] = KeysValues(key, value);
            const auto rope =
                Rope(rope_theta, rotary_dim, rotary_offset, interleaved);
            py::gil_scoped_release release;
            p.plan.WriteKVSlots(k, v, pages.pages, rope ? &*rope : nullptr);
          },
          py::arg("key"), py::arg("value"), py::arg("pages"), py::kw_only(),
          py::arg("rope_theta") = py::none(), py::arg("rotary_dim") = 0,
          py::arg("rotary_offset") = 0, py::arg("interleaved") = false);

  // A module's layer of the plan's step (AttentionModule::ForwardStep):
  // x (num_tokens, d_in) -> y (num_tokens, y features).
  m.def(
      "module_forward_step",
      [](const Module& module, py::handle x_obj, const Plan& p,
         const Pages& pages, py::handle y_obj) {
        const Arr x = ToArr(x_obj, "hidden_states", false);
        const Arr y = ToArr(y_obj, "out", true);
        for (const auto& [a, name] :
             {std::pair<const Arr*, const char*>{&x, "hidden_states"},
              {&y, "out"}}) {
          RequireDtype(*a, name, DT::kF32, "float32");
          RequireLayout(*a, name);
          if (a->ndim() != 2) {
            ValueError(std::string(name) +
                       " must have 2 dimensions (num_tokens, features), got "
                       "shape " +
                       ShapeStr(a->shape));
          }
        }
        const auto rows = [](const Arr& a) {
          return a.shape[0] > 1 ? a.strides[0] : a.shape[1];
        };
        const simdattn::ConstMatrix xv(static_cast<const float*>(x.data),
                                       x.shape[0], x.shape[1], rows(x));
        const simdattn::Matrix yv(static_cast<float*>(y.data), y.shape[0],
                                  y.shape[1], rows(y));
        py::gil_scoped_release release;
        module.m->ForwardStep(xv, p.plan.step(), pages.pages, yv);
      },
      py::arg("module"), py::arg("hidden_states"), py::arg("plan"),
      py::arg("pages"), py::arg("out"));
}

}  // namespace simdattn_python
