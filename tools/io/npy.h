// NumPy .npy files of float32, for golden data and the command-line tools.
//
// Only what the tests and tools exchange with NumPy/PyTorch is supported:
// little-endian float32 ('<f4'), C order, format versions 1.0, 2.0 and 3.0.
// Files are treated as untrusted: every size is checked against the file
// before anything is allocated, and every problem throws std::runtime_error
// with a one-line message "<path>: <what is wrong>".

#ifndef SIMDATTN_TOOLS_IO_NPY_H_
#define SIMDATTN_TOOLS_IO_NPY_H_

#include <cstddef>
#include <string>
#include <vector>

namespace simdattn::io {

struct NpyArray {
  std::vector<size_t> shape;  // Empty for a 0-d array (one element).
  std::vector<float> data;    // Row-major (C order), product(shape) values.
};

// Reads a '<f4' C-order array. Throws std::runtime_error on anything else:
// other dtypes, Fortran order, a malformed header, or a data section that is
// shorter or longer than the shape says.
NpyArray ReadNpy(const std::string& path);

// Writes `data` (product(shape) floats; may be null only when that is 0) as
// version 1.0 (2.0 when the header would not fit 1.0's 16-bit length), with
// the header padded so that the data starts 64-byte aligned, as NumPy does.
// Throws std::runtime_error if the shape's size overflows or the write fails.
void WriteNpy(const std::string& path, const std::vector<size_t>& shape,
              const float* data);

}  // namespace simdattn::io

#endif  // SIMDATTN_TOOLS_IO_NPY_H_
