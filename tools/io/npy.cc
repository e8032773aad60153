#include "tools/io/npy.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/io/io_util.h"
#include "tools/join.h"

namespace simdattn::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// NumPy's own reader refuses headers over 10000 bytes unless told otherwise;
// a valid float32 header is ~128 bytes plus ~21 per dimension. The bound only
// keeps a hostile length from making us allocate much.
constexpr uint64_t kMaxHeaderSize = uint64_t{1} << 20;
// NumPy pads so that the data starts at a multiple of this (memory mapping).
constexpr size_t kAlignment = 64;

// Python's spelling of a tuple, as in the header: (), (3,), (2, 3).
std::string TupleString(const std::vector<size_t>& shape) {
  return "(" + tools::Join(shape, ", ") + (shape.size() == 1 ? ",)" : ")");
}

// False when the product of the dimensions does not fit in size_t.
bool ElementCount(const std::vector<size_t>& shape, size_t* count) {
  size_t n = 1;
  for (const size_t dim : shape) {
    if (dim != 0 && n > std::numeric_limits<size_t>::max() / dim) return false;
    n *= dim;
  }
  *count = n;
  return true;
}

void SwapBytes4(void* data, size_t count) {
  auto* bytes = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i, bytes += 4) {
    std::swap(bytes[0], bytes[3]);
    std::swap(bytes[1], bytes[2]);
  }
}

// Parses the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// NumPy writes it with repr() and reads it with ast.literal_eval; this accepts
// the subset repr() produces for a plain dtype: single- or double-quoted
// strings without escapes, True/False, tuples of decimal integers, optional
// trailing commas and any whitespace. Exactly the three keys must appear.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text)
      : path_(path), text_(text) {}

  void Parse(std::string* descr, bool* fortran_order,
             std::vector<size_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    Expect('{');
    for (;;) {
      SkipSpace();
      if (Consume('}')) break;
      const size_t key_pos = pos_;
      const std::string key = ParseString("a key");
      SkipSpace();
      Expect(':');
      SkipSpace();
      bool* seen = nullptr;
      if (key == "descr") {
        if (Peek() != '\'' && Peek() != '"') {
          Error("descr is not a string (structured dtypes are not supported)");
        }
        *descr = ParseString("the descr string");
        seen = &have_descr;
      } else if (key == "fortran_order") {
        *fortran_order = ParseBool();
        seen = &have_fortran;
      } else if (key == "shape") {
        *shape = ParseShape();
        seen = &have_shape;
      } else {
        pos_ = key_pos;
        Error("unexpected key '" + Printable(key) + "'");
      }
      if (*seen) {
        pos_ = key_pos;
        Error("duplicate key '" + key + "'");
      }
      *seen = true;
      SkipSpace();
      if (Consume('}')) break;
      Expect(',');
    }
    SkipSpace();
    if (pos_ != text_.size()) Error("trailing characters after the dict");
    if (!have_descr) Error("key 'descr' is missing");
    if (!have_fortran) Error("key 'fortran_order' is missing");
    if (!have_shape) Error("key 'shape' is missing");
  }

 private:
  [[noreturn]] void Error(const std::string& what) const {
    Fail(path_, "malformed npy header: " + what + " (at header byte " +
                    std::to_string(pos_) + ")");
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           std::strchr(" \t\n\r\f\v", text_[pos_]) != nullptr &&
           text_[pos_] != '\0') {
      ++pos_;
    }
  }

  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void Expect(char c) {
    if (Consume(c)) return;
    if (pos_ >= text_.size()) {
      Error(std::string("expected '") + c + "' but the header ended");
    }
    Error(std::string("expected '") + c + "', found '" +
          Printable(text_.substr(pos_, 1)) + "'");
  }

  std::string ParseString(const char* what) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') Error(std::string("expected ") + what);
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      // The keys and dtype strings NumPy writes never need escapes or line
      // breaks; accepting them would mean reimplementing Python's rules.
      if (text_[pos_] == '\n' || text_[pos_] == '\r') {
        Error("unterminated string");  // As Python would call it.
      }
      if (text_[pos_] == '\\') Error("unsupported backslash in a string");
      ++pos_;
    }
    if (pos_ >= text_.size()) Error("unterminated string");
    const std::string value(text_.substr(start, pos_ - start));
    ++pos_;
    return value;
  }

  // The identifier starting at pos_ (letters, digits, underscores).
  std::string_view Word() const {
    size_t end = pos_;
    while (end < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[end])) ||
            text_[end] == '_')) {
      ++end;
    }
    return text_.substr(pos_, end - pos_);
  }

  bool ParseBool() {
    const std::string_view word = Word();
    if (word == "True" || word == "False") {
      pos_ += word.size();
      return word == "True";
    }
    Error("fortran_order is not True or False");
  }

  size_t ParseDimension() {
    if (Peek() == '-') Error("negative dimension in shape");
    // Everything up to the next separator, so that "6.0" or "6L" is reported
    // as a bad dimension rather than as a missing comma.
    size_t end = pos_;
    while (end < text_.size() &&
           std::strchr(" \t\n\r\f\v,)", text_[end]) == nullptr) {
      ++end;
    }
    const std::string_view word = text_.substr(pos_, end - pos_);
    if (word.empty()) Error("expected a dimension in shape");
    // Python 3 has no leading zeros, no 'L' suffix; '_' separators and other
    // bases are legal Python but never written by NumPy.
    if (word.size() > 1 && word[0] == '0') Error("malformed dimension");
    size_t value = 0;
    for (const char c : word) {
      if (c < '0' || c > '9') {
        Error("dimension '" + Printable(word) + "' is not a decimal integer");
      }
      const size_t digit = static_cast<size_t>(c - '0');
      if (value > (std::numeric_limits<size_t>::max() - digit) / 10) {
        Error("dimension " + Printable(word) + " does not fit in size_t");
      }
      value = value * 10 + digit;
    }
    pos_ += word.size();
    return value;
  }

  std::vector<size_t> ParseShape() {
    if (!Consume('(')) Error("shape is not a tuple");
    std::vector<size_t> dims;
    bool trailing_comma = false;
    for (;;) {
      SkipSpace();
      if (Consume(')')) break;
      // Bounds the vector by the header text, which is itself bounded.
      dims.push_back(ParseDimension());
      SkipSpace();
      trailing_comma = Consume(',');
      if (!trailing_comma) {
        SkipSpace();
        Expect(')');
        break;
      }
    }
    // In Python "(3)" is the int 3, not a tuple; NumPy rejects it too.
    if (dims.size() == 1 && !trailing_comma) {
      Error("shape (" + std::to_string(dims[0]) +
            ") is not a tuple (a 1-tuple needs a trailing comma)");
    }
    return dims;
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

NpyArray ReadNpy(const std::string& path) {
  InputFile file(path);
  const uint64_t file_size = file.size();
  constexpr uint64_t kMinSize = kMagicSize + 2 + 2;  // Version 1.0 prefix.
  if (file_size < kMinSize) {
    Fail(path, "file too short for an NPY header (" +
                   std::to_string(file_size) + " bytes)");
  }
  unsigned char prefix[12] = {};
  file.ReadAt(0, prefix, kMinSize);
  if (std::memcmp(prefix, kMagic, kMagicSize) != 0) {
    Fail(path, "not an NPY file (bad magic string)");
  }
  const int major = prefix[6], minor = prefix[7];
  uint64_t header_size = 0;
  uint64_t prefix_size = 0;
  if (major == 1 && minor == 0) {
    header_size = prefix[8] | (uint64_t{prefix[9]} << 8);
    prefix_size = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (file_size < 12) {
      Fail(path, "file too short for an NPY " + std::to_string(major) +
                     ".0 header (" + std::to_string(file_size) + " bytes)");
    }
    file.ReadAt(10, prefix + 10, 2);
    header_size = prefix[8] | (uint64_t{prefix[9]} << 8) |
                  (uint64_t{prefix[10]} << 16) | (uint64_t{prefix[11]} << 24);
    prefix_size = 12;
  } else {
    Fail(path, "unsupported NPY format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (1.0, 2.0, 3.0 are)");
  }
  if (header_size > kMaxHeaderSize) {
    Fail(path, "header length " + std::to_string(header_size) +
                   " exceeds the limit of " + std::to_string(kMaxHeaderSize) +
                   " bytes");
  }
  if (header_size > file_size - prefix_size) {
    Fail(path, "header length " + std::to_string(header_size) +
                   " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  // Version 3.0 allows UTF-8 in the header, 1.0/2.0 latin-1; only ASCII can
  // occur in a header this parser accepts, so the bytes are parsed as they are.
  std::string header(static_cast<size_t>(header_size), '\0');
  file.ReadAt(prefix_size, header.data(), header_size);

  std::string descr;
  bool fortran_order = false;
  NpyArray array;
  HeaderParser(path, header).Parse(&descr, &fortran_order, &array.shape);
  if (descr != "<f4") {
    if (descr == ">f4") {
      Fail(path, "big-endian float32 ('>f4') is not supported");
    }
    Fail(path, "dtype '" + Printable(descr) +
                   "' is not supported (only little-endian float32 '<f4')");
  }
  if (fortran_order) {
    Fail(path, "fortran_order is True; only C order is supported");
  }

  size_t count = 0;
  if (!ElementCount(array.shape, &count) ||
      count > std::numeric_limits<size_t>::max() / sizeof(float)) {
    Fail(path, "shape " + TupleString(array.shape) +
                   " has more elements than memory can hold");
  }
  const uint64_t data_offset = prefix_size + header_size;
  const uint64_t available = file_size - data_offset;
  const uint64_t needed = uint64_t{count} * sizeof(float);
  if (available < needed) {
    Fail(path, "data section has " + std::to_string(available) +
                   " bytes but shape " + TupleString(array.shape) +
                   " of '<f4' needs " + std::to_string(needed) +
                   " (truncated file?)");
  }
  if (available > needed) {
    Fail(path, std::to_string(available - needed) +
                   " bytes of trailing data after the array of shape " +
                   TupleString(array.shape));
  }
  // Only now is the size known to be backed by the file.
  array.data.resize(count);
  file.ReadAt(data_offset, array.data.data(), needed);
  if (!HostIsLittleEndian()) SwapBytes4(array.data.data(), count);
  return array;
}

void WriteNpy(const std::string& path, const std::vector<size_t>& shape,
              const float* data) {
  size_t count = 0;
  if (!ElementCount(shape, &count) ||
      count > std::numeric_limits<size_t>::max() / sizeof(float)) {
    Fail(path, "cannot write shape " + TupleString(shape) +
                   ": the element count overflows");
  }
  if (data == nullptr && count != 0) {
    Fail(path, "cannot write " + std::to_string(count) +
                   " elements from a null pointer");
  }
  // The same text NumPy's repr() gives, so files compare equal byte for byte.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " +
                     TupleString(shape) + ", }";
  int major = 1;
  size_t prefix_size = kMagicSize + 2 + 2;
  // +1 for the terminating newline; 1.0 stores the length in 16 bits.
  if (prefix_size + dict.size() + 1 + kAlignment > 0xffff) {
    major = 2;
    prefix_size = kMagicSize + 2 + 4;
  }
  const size_t unpadded = prefix_size + dict.size() + 1;
  dict.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  dict += '\n';
  const uint64_t header_size = dict.size();

  std::string prefix(kMagic, kMagicSize);
  prefix += static_cast<char>(major);
  prefix += '\0';
  for (size_t i = 0; i < prefix_size - kMagicSize - 2; ++i) {
    prefix += static_cast<char>((header_size >> (8 * i)) & 0xff);
  }

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) Fail(path, "cannot open for writing");
  out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  if (count == 0) {
    // Nothing to write, and `data` may be null.
  } else if (HostIsLittleEndian()) {
    out.write(reinterpret_cast<const char*>(data),
              static_cast<std::streamsize>(count * sizeof(float)));
  } else {
    // Swap in chunks to keep the scratch small.
    std::vector<float> chunk;
    constexpr size_t kChunk = 4096;
    for (size_t i = 0; i < count; i += kChunk) {
      const size_t n = std::min(kChunk, count - i);
      chunk.assign(data + i, data + i + n);
      SwapBytes4(chunk.data(), n);
      out.write(reinterpret_cast<const char*>(chunk.data()),
                static_cast<std::streamsize>(n * sizeof(float)));
    }
  }
  out.flush();
  if (!out) Fail(path, "write failed");
}

}  // namespace simdattn::io
