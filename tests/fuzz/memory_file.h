// The file readers take paths; the fuzzers hand them each input as an
// in-memory file (memfd), reached through /proc/self/fd, so that fuzzing
// does no disk I/O and leaves nothing behind.
#ifndef SIMDATTN_TESTS_FUZZ_MEMORY_FILE_H_
#define SIMDATTN_TESTS_FUZZ_MEMORY_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace simdattn::fuzz {

class MemoryFile {
 public:
  explicit MemoryFile(const char* name) : fd_(memfd_create(name, 0)) {
    if (fd_ < 0) std::abort();  // The fuzzer cannot run without it.
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents with `data`.
  void Write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n =
          pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }

  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace simdattn::fuzz

#endif  // SIMDATTN_TESTS_FUZZ_MEMORY_FILE_H_
