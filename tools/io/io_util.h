// What the .npy and safetensors readers share (internal to tools/io): the
// one-line error they throw, the escaping of file text in messages, the
// host's byte order and a size-checked input file.
#ifndef SIMDATTN_TOOLS_IO_IO_UTIL_H_
#define SIMDATTN_TOOLS_IO_IO_UTIL_H_

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace simdattn::io {

// Throws std::runtime_error("path: what").
[[noreturn]] void Fail(const std::string& path, const std::string& what);

// Text that came out of a file, made safe for a one-line message: anything
// but printable ASCII (including UTF-8 line separators) becomes \xNN, and
// long text is cut.
std::string Printable(std::string_view text);

bool HostIsLittleEndian();

// A regular file opened for reading, with its size known up front so that
// every length read from it can be checked before it is trusted. Errors
// (missing file, directory, pipe, short read) throw through Fail.
class InputFile {
 public:
  explicit InputFile(const std::string& path);

  uint64_t size() const { return size_; }

  // Reads bytes [offset, offset + count); the caller has checked that this
  // lies within size(), so a short read means the file changed under us.
  void ReadAt(uint64_t offset, void* dst, uint64_t count);

 private:
  std::string path_;
  uint64_t size_ = 0;
  std::ifstream in_;
};

}  // namespace simdattn::io

#endif  // SIMDATTN_TOOLS_IO_IO_UTIL_H_
