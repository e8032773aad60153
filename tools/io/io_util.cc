#include "tools/io/io_util.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace simdattn::io {

void Fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string Printable(std::string_view text) {
  constexpr size_t kMaxChars = 64;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxChars; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  if (text.size() > kMaxChars) out += "...";
  return out;
}

bool HostIsLittleEndian() {
  const uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

InputFile::InputFile(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    Fail(path, "cannot open: no such file");
  }
  if (ec) Fail(path, "cannot open: " + ec.message());
  // Directories and pipes would "open" and then fail in odd ways.
  if (!fs::is_regular_file(status)) Fail(path, "not a regular file");
  size_ = fs::file_size(path, ec);
  if (ec) Fail(path, "cannot determine the file size: " + ec.message());
  in_.open(path, std::ios::binary);
  if (!in_) Fail(path, "cannot open for reading");
}

void InputFile::ReadAt(uint64_t offset, void* dst, uint64_t count) {
  if (count == 0) return;
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(count));
  if (!in_ || static_cast<uint64_t>(in_.gcount()) != count) {
    Fail(path_, "read of " + std::to_string(count) + " bytes at offset " +
                    std::to_string(offset) + " failed (file truncated?)");
  }
}

}  // namespace simdattn::io
