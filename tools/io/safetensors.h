// Reader for safetensors files (the format of PyTorch state_dicts saved with
// `safetensors`): u64 little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
//    "__metadata__": {"<key>": "<value>", ...}}
// then the tensors' little-endian bytes, offsets relative to the end of the
// header.
//
// Files are treated as untrusted. Load() validates the whole header before it
// reads any tensor data: known dtype, non-negative integer dimensions whose
// product fits, offsets inside the file that match shape x element size, and
// tensors that tile the data section exactly (no overlap, no hole, nothing
// after the last one). Every problem throws std::runtime_error with a one-line
// message "<path>: <what is wrong>".

#ifndef SIMDATTN_TOOLS_IO_SAFETENSORS_H_
#define SIMDATTN_TOOLS_IO_SAFETENSORS_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace simdattn::io {

struct Tensor {
  std::string dtype;          // As stored: "F32", or "F64"/"F16"/"BF16".
  std::vector<size_t> shape;  // Empty for a scalar (one element).
  std::vector<float> data;    // Row-major; F64/F16/BF16 converted to float.
};

class SafeTensors {
 public:
  // Reads every tensor. Tensors of dtype F32 are read as they are; F64, F16
  // and BF16 are converted to float (F64 rounds to nearest); any other dtype
  // (integers, bool, F8) is an error naming the tensor.
  static SafeTensors Load(const std::string& path);

  // The tensor called `name`, or null if there is none.
  const Tensor* Find(const std::string& name) const;
  // Like Find, but a missing tensor throws std::runtime_error naming the file.
  const Tensor& Get(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  // The "__metadata__" map (empty when the file has none).
  const std::map<std::string, std::string>& Metadata() const {
    return metadata_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace simdattn::io

#endif  // SIMDATTN_TOOLS_IO_SAFETENSORS_H_
