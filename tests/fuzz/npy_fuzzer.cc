// Fuzzes the .npy reader with arbitrary files. Every input must either load
// or fail with std::runtime_error (anything else escapes and is a crash).
// What loads must be consistent (data matches the shape) and survive a round
// trip through WriteNpy bit for bit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "tests/fuzz/memory_file.h"
#include "tools/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdattn::fuzz::MemoryFile input("npy_fuzzer_input");
  static simdattn::fuzz::MemoryFile output("npy_fuzzer_output");
  input.Write(data, size);
  simdattn::io::NpyArray array;
  try {
    array = simdattn::io::ReadNpy(input.path());
  } catch (const std::runtime_error&) {
    return 0;  // Rejected with a message: the expected outcome for junk.
  }
  size_t count = 1;
  for (const size_t dim : array.shape) count *= dim;  // Checked by the reader.
  if (array.data.size() != count) std::abort();

  simdattn::io::WriteNpy(output.path(), array.shape, array.data.data());
  const simdattn::io::NpyArray again = simdattn::io::ReadNpy(output.path());
  if (again.shape != array.shape || again.data.size() != array.data.size() ||
      (count != 0 && std::memcmp(again.data.data(), array.data.data(),
                                 count * sizeof(float)) != 0)) {
    std::abort();
  }
  return 0;
}
