// The kernels beside attention, from Python: RoPE in place, MatMul (B in
// float32, bfloat16 or float16, or packed once), and a KVCache sequence's
// export and import (kernels.h's transfer format).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/arrays.h"

namespace simdattn_python {
namespace {

// A 2-D operand of dtype float32, bfloat16 or float16 (rows, cols), its
// last dimension contiguous.
Arr Matrix2(py::handle obj, const char* name, bool writable) {
  Arr a = ToArr(obj, name, writable);
  if (a.ndim() != 2) {
    ValueError(std::string(name) + " must have 2 dimensions, got shape " +
               ShapeStr(a.shape));
  }
  RequireLayout(a, name);
  return a;
}

template <typename T>
simdattn::MatrixView<T> ViewOf(const Arr& a) {
  using U = std::remove_const_t<T>;
  return simdattn::MatrixView<T>(static_cast<U*>(a.data), a.shape[0],
                                 a.shape[1],
                                 a.shape[0] > 1 ? a.strides[0] : a.shape[1]);
}

simdattn::ComputeType Compute(const std::string& compute) {
  if (compute == "f32") return simdattn::ComputeType::kFloat32;
  if (compute == "bf16") return simdattn::ComputeType::kBFloat16;
  ValueError("compute is '" + compute +
             "': 'f32' (float32 arithmetic) or 'bf16' (operands rounded to "
             "bf16, float32 sums)");
}

simdattn::MatMulOptions MatMulOptionsOf(bool transpose_b,
                                        const std::string& compute,
                                        float alpha) {
  simdattn::MatMulOptions o;
  o.transpose_b =
      transpose_b ? simdattn::Transpose::kYes : simdattn::Transpose::kNo;
  o.compute = Compute(compute);
  o.alpha = alpha;
  return o;
}

struct Packed {
  simdattn::PackedMatrix matrix;
};

Packed Pack(py::handle b_obj, bool transpose_b, const std::string& compute) {
  const Arr b = Matrix2(b_obj, "b", false);
  const simdattn::MatMulOptions o = MatMulOptionsOf(transpose_b, compute, 1);
  switch (b.dt) {
    case DT::kF32:
      return {simdattn::PackedMatrix(ViewOf<const float>(b), o)};
    case DT::kBF16:
      return {simdattn::PackedMatrix(ViewOf<const simdattn::BFloat16>(b), o)};
    case DT::kF16:
      return {simdattn::PackedMatrix(ViewOf<const simdattn::Float16>(b), o)};
    default:
      TypeError("b has dtype " + b.dtype_name +
                ": expected float32, bfloat16 or float16");
  }
}

void MatMul(py::handle a_obj, py::handle b_obj, py::handle c_obj,
            bool transpose_b, const std::string& compute, float alpha) {
  const Arr a = Matrix2(a_obj, "a", false);
  RequireDtype(a, "a", DT::kF32, "float32");
  const Arr c = Matrix2(c_obj, "c", true);
  RequireDtype(c, "c", DT::kF32, "float32");
  const simdattn::ConstMatrix av = ViewOf<const float>(a);
  const simdattn::Matrix cv = ViewOf<float>(c);
  if (py::isinstance<Packed>(b_obj)) {
    const Packed& b = b_obj.cast<const Packed&>();
    simdattn::MatMulOptions o;
    o.transpose_b = b.matrix.transpose_b();
    o.compute = b.matrix.compute();
    o.alpha = alpha;
    py::gil_scoped_release release;
    simdattn::MatMul(av, b.matrix, cv, o);
    return;
  }
  const Arr b = Matrix2(b_obj, "b", false);
  const simdattn::MatMulOptions o =
      MatMulOptionsOf(transpose_b, compute, alpha);
  switch (b.dt) {
    case DT::kF32: {
      py::gil_scoped_release release;
      return simdattn::MatMul(av, ViewOf<const float>(b), cv, o);
    }
    case DT::kBF16: {
      py::gil_scoped_release release;
      return simdattn::MatMul(av, ViewOf<const simdattn::BFloat16>(b), cv, o);
    }
    case DT::kF16: {
      py::gil_scoped_release release;
      return simdattn::MatMul(av, ViewOf<const simdattn::Float16>(b), cv, o);
    }
    default:
      TypeError("b has dtype " + b.dtype_name +
                ": expected float32, bfloat16 or float16, or a PackedMatrix");
  }
}

void ApplyRope(py::handle x_obj, std::optional<std::vector<int64_t>> positions,
               float theta, int64_t rotary_dim, int64_t rotary_offset,
               bool interleaved) {
  const Tensor4 x =
      ToTensor4<float>(x_obj, "x", true, "(batch, heads, tokens, head_dim)");
  simdattn::RopeOptions o =
      *Rope(theta, rotary_dim, rotary_offset, interleaved);
  std::vector<size_t> at;
  if (positions) {
    at = PerBatch(*positions, "positions", x.dims[0]);
    o.positions = at.data();
  }
  py::gil_scoped_release release;
  simdattn::ApplyRope(x, o);
}

}  // namespace

void DefineKernels(py::module_& m) {
  py::class_<Packed>(m, "PackedMatrix")
      .def(py::init(&Pack), py::arg("b"), py::kw_only(),
           py::arg("transpose_b") = false, py::arg("compute") = "f32")
      .def_property_readonly("shape",
                             [](const Packed& p) {
                               return std::make_pair(p.matrix.rows(),
                                                     p.matrix.cols());
                             })
      .def_property_readonly("nbytes",
                             [](const Packed& p) { return p.matrix.bytes(); });
  m.def("matmul", &MatMul, py::arg("a"), py::arg("b"), py::arg("c"),
        py::arg("transpose_b"), py::arg("compute"), py::arg("alpha"));
  m.def("apply_rope", &ApplyRope, py::arg("x"), py::arg("positions").none(true),
        py::arg("theta"), py::arg("rotary_dim"), py::arg("rotary_offset"),
        py::arg("interleaved"));
}

void DefineCacheTransfers(py::class_<simdattn::KVCache>& cache) {
  cache
      .def(
          "export",
          [](const simdattn::KVCache& c, int64_t sequence, int64_t first,
             std::optional<int64_t> count) {
            if (sequence < 0 || static_cast<size_t>(sequence) >= c.batch()) {
              ValueError("sequence is " + std::to_string(sequence) +
                         ": the cache holds sequences 0 to " +
                         std::to_string(c.batch()) + " - 1");
            }
            const size_t length = c.length(static_cast<size_t>(sequence));
            if (first < 0 || static_cast<size_t>(first) > length) {
              ValueError("first is " + std::to_string(first) + ": sequence " +
                         std::to_string(sequence) + " holds " +
                         std::to_string(length) + " tokens");
            }
            const int64_t n = count.value_or(int64_t(length) - first);
            if (n < 0 || static_cast<size_t>(first + n) > length) {
              ValueError("count is " + std::to_string(n) + ": sequence " +
                         std::to_string(sequence) + " holds " +
                         std::to_string(length) + " tokens from " +
                         std::to_string(first) + " on");
            }
            std::string bytes(c.ExportBytes(static_cast<size_t>(n)), '\0');
            c.Export(static_cast<size_t>(sequence), static_cast<size_t>(first),
                     static_cast<size_t>(n), bytes.data());
            return py::bytes(bytes);
          },
          py::arg("sequence"), py::arg("first") = 0,
          py::arg("count") = py::none(),
          "A sequence's tokens [first, first + count) in the library's "
          "transfer format (self-describing, checksummed: kernels.h).")
      .def(
          "import_",
          [](simdattn::KVCache& c, int64_t sequence, py::bytes data) {
            if (sequence < 0 || static_cast<size_t>(sequence) >= c.batch()) {
              ValueError("sequence is " + std::to_string(sequence) +
                         ": the cache holds sequences 0 to " +
                         std::to_string(c.batch()) + " - 1");
            }
            const std::string bytes = data;
            // The transfer's token count, from the sizes of the format.
            const size_t header = c.ExportBytes(0);
            const size_t per_token = c.ExportBytes(1) - header;
            if (bytes.size() < header ||
                (bytes.size() - header) % per_token != 0) {
              ValueError("data holds " + std::to_string(bytes.size()) +
                         " bytes: not a transfer of this cache's rows (" +
                         std::to_string(header) + " + n * " +
                         std::to_string(per_token) + ")");
            }
            c.Import(static_cast<size_t>(sequence), bytes.data(),
                     (bytes.size() - header) / per_token);
          },
          py::arg("sequence"), py::arg("data"),
          "Appends an export's tokens to a sequence; refuses another type, "
          "dims, version or a corrupted transfer, changing nothing.");
}

}  // namespace simdattn_python
