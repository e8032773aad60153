// Lists as one line of text, for the tools' messages, tables and names.
// Header-only: the program and tools/measure both use it.
#ifndef SIMDATTN_TOOLS_JOIN_H_
#define SIMDATTN_TOOLS_JOIN_H_

#include <string>
#include <type_traits>
#include <vector>

namespace simdattn {
namespace tools {

// The items, numbers in decimal, with `separator` between them:
// Join({"AVX2", "SSE4"}, ", ") is "AVX2, SSE4"; Join({1, 64}, "x") is "1x64".
template <typename T>
std::string Join(const std::vector<T>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    if constexpr (std::is_arithmetic_v<T>) {
      out += std::to_string(items[i]);
    } else {
      out += items[i];
    }
  }
  return out;
}

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_JOIN_H_
