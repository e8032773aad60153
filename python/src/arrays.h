// The pybind11 extension's operands: numpy arrays (buffer protocol) and CPU
// torch tensors (data_ptr, shape, strides) as views, never copies; the
// options every attention entry point shares; ValueError and TypeError with
// the argument's name and values.
#ifndef SIMDATTN_PYTHON_SRC_ARRAYS_H_
#define SIMDATTN_PYTHON_SRC_ARRAYS_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "simdattn/simdattn.h"

namespace simdattn_python {

namespace py = pybind11;

using simdattn::ConstTensor4;
using simdattn::Tensor4;

// Element types an operand may hold: attention's floats, a cache's storage
// (int8; uint8 for fp8 and ggml's blocks, or any type's bytes), and the
// integers of a step's metadata.
enum class DT { kF32, kBF16, kF16, kI8, kU8, kI32, kI64, kOther };

// torch objects, looked up once torch is imported (never imported here: a
// torch tensor can only reach us once the caller has imported torch).
struct TorchRefs {
  py::object tensor_type, float32, bfloat16, float16, int8, uint8, int32, int64,
      is_grad_enabled, strided;
};

inline const TorchRefs* Torch() {
  static TorchRefs* refs = nullptr;  // Leaked on purpose (exit order).
  if (refs == nullptr) {
    py::dict modules = py::module_::import("sys").attr("modules");
    if (!modules.contains("torch")) return nullptr;
    py::object torch = modules["torch"];
    refs = new TorchRefs{torch.attr("Tensor"),
                         torch.attr("float32"),
                         torch.attr("bfloat16"),
                         torch.attr("float16"),
                         torch.attr("int8"),
                         torch.attr("uint8"),
                         torch.attr("int32"),
                         torch.attr("int64"),
                         torch.attr("is_grad_enabled"),
                         torch.attr("strided")};
  }
  return refs;
}

inline std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s << (i ? ", " : "") << shape[i];
  }
  s << (shape.size() == 1 ? ",)" : ")");
  return s.str();
}

// An operand: where its elements lie, strides in elements.
struct Arr {
  void* data = nullptr;
  DT dt = DT::kOther;
  std::string dtype_name;
  std::vector<int64_t> shape, strides;
  std::optional<py::buffer_info> info;  // Keeps a numpy buffer exported.

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
};

[[noreturn]] inline void TypeError(const std::string& message) {
  throw py::type_error(message);
}
[[noreturn]] inline void ValueError(const std::string& message) {
  throw py::value_error(message);
}

inline Arr ToArr(py::handle obj, const char* name, bool writable) {
  Arr a;
  const TorchRefs* torch = Torch();
  if (torch != nullptr && py::isinstance(obj, torch->tensor_type)) {
    // is_cpu first: one attribute where the device's name takes three.
    if (!obj.attr("is_cpu").cast<bool>()) {
      const std::string device =
          py::str(obj.attr("device").attr("type")).cast<std::string>();
      TypeError(std::string(name) + " is on device '" + device +
                "': simdattn takes CPU tensors (call .cpu())");
    }
    if (!py::object(obj.attr("layout")).is(torch->strided)) {
      TypeError(std::string(name) + " has layout " +
                py::str(obj.attr("layout")).cast<std::string>() +
                ": simdattn takes dense (strided) tensors");
    }
    if (obj.attr("requires_grad").cast<bool>() &&
        torch->is_grad_enabled().cast<bool>()) {
      TypeError(std::string(name) +
                " requires grad: simdattn does not support autograd (it "
                "computes no backward); call it under torch.no_grad() or "
                "pass " +
                name + ".detach()");
    }
    py::object dtype = obj.attr("dtype");
    a.dt = dtype.is(torch->float32)    ? DT::kF32
           : dtype.is(torch->bfloat16) ? DT::kBF16
           : dtype.is(torch->float16)  ? DT::kF16
           : dtype.is(torch->int8)     ? DT::kI8
           : dtype.is(torch->uint8)    ? DT::kU8
           : dtype.is(torch->int32)    ? DT::kI32
           : dtype.is(torch->int64)    ? DT::kI64
                                       : DT::kOther;
    a.dtype_name = py::str(dtype).cast<std::string>();
    a.shape = obj.attr("shape").cast<std::vector<int64_t>>();
    a.strides = obj.attr("stride")().cast<std::vector<int64_t>>();
    a.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    return a;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    TypeError(std::string(name) +
              " must be a numpy array or a CPU torch tensor, not " +
              py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  }
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  if (writable && info.readonly) {
    ValueError(std::string(name) + " is read-only: simdattn writes into it");
  }
  const std::string& f = info.format;
  const char code = f.empty() ? '?' : f.back();
  const bool native =
      f.size() == 1 || f[0] == '<' || f[0] == '=' || f[0] == '@';
  const auto size = info.itemsize;
  const bool integer =
      code == 'b' || code == 'h' || code == 'i' || code == 'l' || code == 'q';
  a.dt = !native                    ? DT::kOther
         : code == 'f' && size == 4 ? DT::kF32
         : code == 'e' && size == 2 ? DT::kF16
         : code == 'b' && size == 1 ? DT::kI8
         : code == 'B' && size == 1 ? DT::kU8
         : integer && size == 4     ? DT::kI32
         : integer && size == 8     ? DT::kI64
                                    : DT::kOther;
  static const char* const kNames[] = {"float32", "bfloat16", "float16", "int8",
                                       "uint8",   "int32",    "int64"};
  a.dtype_name = a.dt == DT::kOther ? "buffer format '" + f + "'"
                                    : kNames[static_cast<int>(a.dt)];
  a.shape.assign(info.shape.begin(), info.shape.end());
  for (py::ssize_t s : info.strides) {
    if (s % info.itemsize != 0) {
      TypeError(std::string(name) + " has a stride of " + std::to_string(s) +
                " bytes, not a multiple of its element size");
    }
    a.strides.push_back(s / info.itemsize);
  }
  a.data = info.ptr;
  a.info.emplace(std::move(info));
  return a;
}

inline void RequireDtype(const Arr& a, const char* name, DT dt,
                         const char* what) {
  if (a.dt != dt) {
    TypeError(std::string(name) + " has dtype " + a.dtype_name + ": expected " +
              what);
  }
}

// Non-negative strides and a contiguous last dimension.
inline void RequireLayout(const Arr& a, const char* name) {
  for (size_t i = 0; i < a.strides.size(); ++i) {
    if (a.strides[i] < 0) {
      TypeError(std::string(name) + " has a negative stride (" +
                std::to_string(a.strides[i]) +
                "): simdattn takes non-negative strides");
    }
  }
  if (!a.shape.empty() && a.shape.back() > 1 && a.strides.back() != 1) {
    TypeError(std::string(name) + "'s last dimension is not contiguous " +
              "(stride " + std::to_string(a.strides.back()) +
              "): simdattn needs stride 1 there (call .contiguous())");
  }
}

template <typename T>
inline simdattn::Tensor4View<T> ToTensor4(py::handle obj, const char* name,
                                          bool writable, const char* dims) {
  Arr a = ToArr(obj, name, writable);
  if (a.ndim() != 4) {
    ValueError(std::string(name) + " must have 4 dimensions " + dims +
               ", got shape " + ShapeStr(a.shape));
  }
  RequireDtype(a, name, DT::kF32, "float32");
  RequireLayout(a, name);
  using U = std::remove_const_t<T>;
  return simdattn::Tensor4View<T>(static_cast<U*>(a.data), a.shape[0],
                                  a.shape[1], a.shape[2], a.shape[3],
                                  a.strides[0], a.strides[1], a.strides[2]);
}

// The options every attention entry point shares, and the vectors they
// point into (alive for the call).
struct Options {
  simdattn::AttentionOptions o;
  std::vector<float> sinks, slopes;
  std::vector<size_t> key_lengths, causal_offsets;
};

inline std::vector<float> HeadFloats(const std::vector<float>& v,
                                     const char* name, size_t heads) {
  if (v.size() != heads) {
    ValueError(std::string(name) + " has " + std::to_string(v.size()) +
               " values but q has " + std::to_string(heads) + " heads");
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      ValueError(std::string(name) + "[" + std::to_string(i) + "] is " +
                 std::to_string(v[i]) + ": must be finite");
    }
  }
  return v;
}

// v as sizes; ValueError naming `name` and the entry where one is negative.
inline std::vector<size_t> NonNegative(const std::vector<int64_t>& v,
                                       const char* name) {
  std::vector<size_t> r;
  r.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0) {
      ValueError(std::string(name) + "[" + std::to_string(i) + "] is " +
                 std::to_string(v[i]) + ": must be >= 0");
    }
    r.push_back(static_cast<size_t>(v[i]));
  }
  return r;
}

inline std::vector<size_t> PerBatch(const std::vector<int64_t>& v,
                                    const char* name, size_t batch) {
  if (v.size() != batch) {
    ValueError(std::string(name) + " has " + std::to_string(v.size()) +
               " values but the batch is " + std::to_string(batch));
  }
  return NonNegative(v, name);
}

inline void FillOptions(Options& opt, size_t batch, size_t q_heads,
                        std::optional<float> scale, bool causal, int64_t window,
                        float softcap,
                        const std::optional<std::vector<float>>& sinks,
                        const py::object& alibi) {
  if (scale && !std::isfinite(*scale)) {
    ValueError("scale is " + std::to_string(*scale) + ": must be finite");
  }
  if (window < 0) {
    ValueError("window is " + std::to_string(window) + ": must be >= 0");
  }
  if (!(softcap >= 0.0f) || !std::isfinite(softcap)) {
    ValueError("softcap is " + std::to_string(softcap) +
               ": must be finite and >= 0 (0: off)");
  }
  (void)batch;
  auto& m = opt.o.mask;
  opt.o.scale = scale;
  m.causal = causal;
  m.window = static_cast<size_t>(window);
  m.softcap = softcap;
  if (sinks) {
    opt.sinks = HeadFloats(*sinks, "sinks", q_heads);
    m.sinks = opt.sinks.data();
  }
  if (!alibi.is_none()) {
    if (py::isinstance<py::bool_>(alibi)) {
      if (alibi.cast<bool>()) opt.slopes = simdattn::AlibiSlopes(q_heads);
    } else {
      opt.slopes =
          HeadFloats(alibi.cast<std::vector<float>>(), "alibi", q_heads);
    }
    if (!opt.slopes.empty()) m.alibi_slopes = opt.slopes.data();
  }
}

// ValueError unless out is (batch, q_heads, q_tokens) of q times value_dim
// (`source` names where value_dim comes from).
inline void CheckOutShape(const Tensor4& out, const ConstTensor4& q,
                          size_t value_dim, const char* source) {
  const size_t want[4] = {q.dims[0], q.dims[1], q.dims[2], value_dim};
  if (!std::equal(want, want + 4, out.dims)) {
    ValueError("out has shape " +
               ShapeStr({int64_t(out.dims[0]), int64_t(out.dims[1]),
                         int64_t(out.dims[2]), int64_t(out.dims[3])}) +
               ": expected " +
               ShapeStr({int64_t(want[0]), int64_t(want[1]), int64_t(want[2]),
                         int64_t(want[3])}) +
               " (q's batch, heads and tokens, " + source + ")");
  }
}

inline float* LseOut(py::handle lse, const Tensor4& out) {
  if (lse.is_none()) return nullptr;
  Arr a = ToArr(lse, "lse", /*writable=*/true);
  RequireDtype(a, "lse", DT::kF32, "float32");
  const std::vector<int64_t> want = {static_cast<int64_t>(out.dims[0]),
                                     static_cast<int64_t>(out.dims[1]),
                                     static_cast<int64_t>(out.dims[2])};
  if (a.shape != want) {
    ValueError("lse has shape " + ShapeStr(a.shape) + ": expected " +
               ShapeStr(want) + " (batch, q_heads, q_tokens)");
  }
  const std::vector<int64_t> dense = {want[1] * want[2], want[2], 1};
  for (size_t i = 0; i < 3; ++i) {
    if (want[i] > 1 && a.strides[i] != dense[i]) {
      TypeError("lse is not contiguous: simdattn writes it densely");
    }
  }
  return static_cast<float*>(a.data);
}

inline simdattn::KVType ParseType(const std::string& name) {
  std::string names;
  for (int t = 0; t <= static_cast<int>(simdattn::kLastElementType); ++t) {
    const auto type = static_cast<simdattn::ElementType>(t);
    const char* n = simdattn::ElementTraitsOf(type).name;
    if (name == n) return type;
    names += std::string(names.empty() ? "" : ", ") + n;
  }
  ValueError("dtype '" + name + "' is not a cache type: one of " + names);
}

// RoPE options from Python's arguments; nullopt where theta is None.
inline std::optional<simdattn::RopeOptions> Rope(std::optional<float> theta,
                                                 int64_t rotary_dim,
                                                 int64_t rotary_offset,
                                                 bool interleaved) {
  if (!theta) return std::nullopt;
  if (rotary_dim < 0 || rotary_offset < 0) {
    ValueError("rotary_dim (" + std::to_string(rotary_dim) +
               ") and rotary_offset (" + std::to_string(rotary_offset) +
               ") must be >= 0");
  }
  simdattn::RopeOptions r;
  r.theta = *theta;
  r.rotary_dim = static_cast<size_t>(rotary_dim);
  r.rotary_offset = static_cast<size_t>(rotary_offset);
  r.pairing = interleaved ? simdattn::RopePairing::kInterleaved
                          : simdattn::RopePairing::kHalfSplit;
  return r;
}

// A module (attention.h) behind the torch drop-ins.
struct Module {
  std::unique_ptr<simdattn::AttentionModule> m;
};

// serving.cc's KVPages, VarlenPlan, write_kv_slots and varlen_attention;
// kernels.cc's PackedMatrix, matmul and apply_rope, and KVCache's export and
// import_.
void DefineServing(py::module_& m);
void DefineKernels(py::module_& m);
void DefineCacheTransfers(py::class_<simdattn::KVCache>& cache);

}  // namespace simdattn_python

#endif  // SIMDATTN_PYTHON_SRC_ARRAYS_H_
