// Fuzzes the safetensors reader with arbitrary files. Every input must either
// load or fail with std::runtime_error (anything else escapes and is a
// crash); what loads must be consistent: each tensor's values match its
// shape, names are sorted and unique, and a state_dict made of it loads
// into (or is rejected by) a module with std::invalid_argument only.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "simdattn/attention.h"
#include "tests/fuzz/memory_file.h"
#include "tools/io/module_spec.h"
#include "tools/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdattn::fuzz::MemoryFile input("safetensors_fuzzer_input");
  input.Write(data, size);
  std::vector<std::string> names;
  try {
    const simdattn::io::SafeTensors file =
        simdattn::io::SafeTensors::Load(input.path());
    names = file.Names();
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0 && !(names[i - 1] < names[i])) std::abort();
      const simdattn::io::Tensor& t = file.Get(names[i]);
      size_t count = 1;
      for (const size_t dim : t.shape) count *= dim;
      if (t.data.size() != count) std::abort();
    }
    // A file is a state_dict: a small CausalAttention must accept it or
    // reject it by name, never read past a tensor.
    simdattn::CausalAttention module(2, 2, 2, 0.0f, true);
    try {
      module.LoadStateDict(simdattn::io::StateDictOf(file));
    } catch (const std::invalid_argument&) {
    }
  } catch (const std::runtime_error&) {
    return 0;  // Rejected with a message: the expected outcome for junk.
  }
  return 0;
}
