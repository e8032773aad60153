// A progress line for the long commands (bench, tune).
#ifndef SIMDATTN_TOOLS_PROGRESS_H_
#define SIMDATTN_TOOLS_PROGRESS_H_

#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <string>

namespace simdattn {
namespace tools {

// One self-overwriting line on stderr, only on a terminal: pipes and CI
// logs get no carriage-return noise.
class Progress {
 public:
  explicit Progress(size_t total)
      : total_(total), enabled_(isatty(STDERR_FILENO) != 0) {}
  ~Progress() { Clear(); }
  void Step(const std::string& what) {
    ++done_;
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", done_, total_, what.c_str());
    std::fflush(stderr);
  }
  void Clear() {
    if (enabled_) std::fprintf(stderr, "\r\033[K"), std::fflush(stderr);
  }

 private:
  size_t total_, done_ = 0;
  bool enabled_;
};

}  // namespace tools
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_PROGRESS_H_
