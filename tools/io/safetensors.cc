#include "tools/io/safetensors.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/io/io_util.h"
#include "tools/join.h"

namespace simdattn::io {
namespace {

using Json = nlohmann::json;

// The reference implementation's limit; a real header is a few KB per
// thousand tensors, so anything larger is corrupt or hostile.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
// The deepest valid nesting is tensor entry -> shape array (depth 2); the
// bound stops absurd nesting before it costs memory.
constexpr int kMaxJsonDepth = 3;

std::string ListString(const std::vector<size_t>& values) {
  return "[" + tools::Join(values, ", ") + "]";
}

std::string RangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Bytes per element of every dtype the format defines; 0 for unknown ones.
size_t DtypeSize(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8},
  };
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

// Assembled byte by byte, so the result does not depend on host endianness
// or on the alignment of `p`.
template <typename UInt>
UInt LoadLittleEndian(const unsigned char* p) {
  UInt value = 0;
  for (size_t i = 0; i < sizeof(UInt); ++i) {
    value |= static_cast<UInt>(p[i]) << (8 * i);
  }
  return value;
}

float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE binary16 to float; exact (every half is a float).
float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {  // Inf or NaN; keep the NaN payload.
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {
    return BitsToFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  }
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

// double to float, rounding to nearest. A plain cast of a finite double
// beyond float's range is undefined behaviour, so overflow is spelled out.
float DoubleToFloat(double d) {
  if (std::isnan(d)) return std::numeric_limits<float>::quiet_NaN();
  // Half an ulp of FLT_MAX above it still rounds down to FLT_MAX.
  const double limit = static_cast<double>(FLT_MAX) + std::ldexp(1.0, 103);
  if (std::fabs(d) >= limit) {
    return d > 0 ? std::numeric_limits<float>::infinity()
                 : -std::numeric_limits<float>::infinity();
  }
  if (std::fabs(d) > static_cast<double>(FLT_MAX)) {
    return d > 0 ? FLT_MAX : -FLT_MAX;
  }
  return static_cast<float>(d);
}

// One header entry after validation.
struct Entry {
  std::string name;
  std::string dtype;
  size_t dtype_size = 0;
  std::vector<size_t> shape;
  size_t count = 0;             // Elements.
  uint64_t begin = 0, end = 0;  // Relative to the start of the data section.
};

// A non-negative integer that fits in uint64_t, or a failure naming `what`.
// nlohmann keeps integers as int64/uint64 and everything else (1.0, 1e3,
// integers past 2^64) as double: only the first two are accepted.
uint64_t NonNegativeInteger(const std::string& path, const std::string& what,
                            const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  Fail(path, what + " is " + Printable(value.dump()) +
                 ", not a non-negative integer");
}

Entry ParseEntry(const std::string& path, const std::string& name,
                 const Json& info, uint64_t data_size) {
  const std::string tensor = "tensor '" + Printable(name) + "'";
  if (!info.is_object()) Fail(path, tensor + " entry is not a JSON object");
  for (const auto& item : info.items()) {
    if (item.key() != "dtype" && item.key() != "shape" &&
        item.key() != "data_offsets") {
      Fail(path,
           tensor + " has unexpected key '" + Printable(item.key()) + "'");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(key)) {
      Fail(path, tensor + " is missing '" + std::string(key) + "'");
    }
  }

  Entry entry;
  entry.name = name;
  const Json& dtype = info["dtype"];
  if (!dtype.is_string()) Fail(path, tensor + " dtype is not a string");
  entry.dtype = dtype.get<std::string>();
  entry.dtype_size = DtypeSize(entry.dtype);
  if (entry.dtype_size == 0) {
    Fail(path, tensor + " has unknown dtype '" + Printable(entry.dtype) + "'");
  }

  const Json& shape = info["shape"];
  if (!shape.is_array()) Fail(path, tensor + " shape is not an array");
  // The true product: a 0 anywhere makes it 0 even after an overflow, and
  // every dimension is checked even after one (a malformed later dimension
  // deserves its own message).
  size_t count = 1;
  bool overflow = false, has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const uint64_t dim = NonNegativeInteger(
        path, tensor + " shape[" + std::to_string(i) + "]", shape[i]);
    if (dim > std::numeric_limits<size_t>::max()) overflow = true;
    const size_t d = static_cast<size_t>(dim);
    entry.shape.push_back(d);
    if (d == 0) {
      has_zero = true;
    } else if (count > std::numeric_limits<size_t>::max() / d) {
      overflow = true;
    } else {
      count *= d;
    }
  }
  if (has_zero) {
    count = 0;
    overflow = false;
  }
  // Converted dtypes become 4-byte floats, so bound by the larger size.
  if (overflow || count > std::numeric_limits<size_t>::max() /
                              std::max(entry.dtype_size, sizeof(float))) {
    Fail(path, tensor + " shape " + ListString(entry.shape) +
                   " has more elements than memory can hold");
  }
  entry.count = count;

  const Json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    Fail(path, tensor + " data_offsets is not an array of two integers");
  }
  entry.begin =
      NonNegativeInteger(path, tensor + " data_offsets[0]", offsets[0]);
  entry.end = NonNegativeInteger(path, tensor + " data_offsets[1]", offsets[1]);
  const std::string range = RangeString(entry.begin, entry.end);
  if (entry.end < entry.begin) {
    Fail(path, tensor + " data_offsets " + range + " end before they begin");
  }
  const uint64_t bytes = uint64_t{count} * entry.dtype_size;
  if (entry.end - entry.begin != bytes) {
    Fail(path, tensor + " data_offsets " + range + " do not match shape " +
                   ListString(entry.shape) + " of " + entry.dtype + " (" +
                   std::to_string(bytes) + " bytes)");
  }
  if (entry.end > data_size) {
    Fail(path, tensor + " data_offsets " + range +
                   " run past the end of the data section (" +
                   std::to_string(data_size) + " bytes)");
  }
  return entry;
}

// The tensors must tile [0, data_size) exactly, as the format requires: an
// overlap would let one write alias another, and a gap or a tail is data no
// tensor accounts for (a sign of a corrupt or doctored file).
void CheckLayout(const std::string& path, std::vector<const Entry*> entries,
                 uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : entries) {
    if (e->begin < cursor) {
      Fail(path, "tensors '" + Printable(previous->name) + "' " +
                     RangeString(previous->begin, previous->end) + " and '" +
                     Printable(e->name) + "' " + RangeString(e->begin, e->end) +
                     " overlap");
    }
    if (e->begin > cursor) {
      Fail(path, "bytes " + RangeString(cursor, e->begin) +
                     " of the data section belong to no tensor");
    }
    cursor = e->end;
    previous = e;
  }
  if (cursor != data_size) {
    Fail(path, std::to_string(data_size - cursor) +
                   " bytes of trailing data after the last tensor (data "
                   "section of " +
                   std::to_string(data_size) + " bytes)");
  }
}

// Parses the header. Duplicate keys are an error (nlohmann would silently
// keep the last, hiding a second layout for the same name), and so is
// nesting deeper than any valid header has.
Json ParseHeader(const std::string& path, const std::string& text) {
  if (text.empty() || text[0] != '{') {
    Fail(path, "header does not start with '{'");
  }
  // nlohmann stops at a NUL as at the end of input, which would let bytes
  // after it pass unseen.
  const size_t nul = text.find('\0');
  if (nul != std::string::npos) {
    Fail(path,
         "header contains a NUL byte at header byte " + std::to_string(nul));
  }
  std::vector<std::set<std::string>> keys_by_depth;
  const Json::parser_callback_t check =
      [&](int depth, Json::parse_event_t event, Json& parsed) {
        if (event == Json::parse_event_t::object_start ||
            event == Json::parse_event_t::array_start) {
          if (depth >= kMaxJsonDepth) {
            Fail(path, "header JSON nests too deeply");
          }
          if (event == Json::parse_event_t::object_start) {
            keys_by_depth.resize(static_cast<size_t>(depth) + 1);
            keys_by_depth[static_cast<size_t>(depth)].clear();
          }
        } else if (event == Json::parse_event_t::key) {
          // Keys arrive one level deeper than their object's start.
          const size_t level = static_cast<size_t>(depth) - 1;
          if (depth < 1 || level >= keys_by_depth.size()) return true;
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!keys_by_depth[level].insert(key).second) {
            Fail(path, "header has duplicate key '" + Printable(key) + "'");
          }
        }
        return true;
      };
  try {
    return Json::parse(text, check);
  } catch (const Json::exception& e) {
    // e.what() quotes raw file bytes; the position is enough to find them.
    const auto* parse_error = dynamic_cast<const Json::parse_error*>(&e);
    Fail(path, "header is not valid JSON" +
                   (parse_error ? " (error at header byte " +
                                      std::to_string(parse_error->byte) + ")"
                                : std::string()));
  }
}

}  // namespace

SafeTensors SafeTensors::Load(const std::string& path) {
  InputFile file(path);
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    Fail(path, "file too short for the 8-byte header length (" +
                   std::to_string(file_size) + " bytes)");
  }
  unsigned char length_bytes[8];
  file.ReadAt(0, length_bytes, 8);
  const uint64_t header_size = LoadLittleEndian<uint64_t>(length_bytes);
  if (header_size > kMaxHeaderSize) {
    Fail(path, "header length " + std::to_string(header_size) +
                   " exceeds the limit of " + std::to_string(kMaxHeaderSize) +
                   " bytes");
  }
  if (header_size > file_size - 8) {
    Fail(path, "header length " + std::to_string(header_size) +
                   " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  std::string text(static_cast<size_t>(header_size), '\0');
  file.ReadAt(8, text.data(), header_size);
  const Json header = ParseHeader(path, text);
  if (!header.is_object()) Fail(path, "header is not a JSON object");

  SafeTensors result;
  result.path_ = path;
  const uint64_t data_offset = 8 + header_size;
  const uint64_t data_size = file_size - data_offset;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      // The format allows only string values here.
      const Json& metadata = item.value();
      if (metadata.is_null()) continue;
      if (!metadata.is_object()) {
        Fail(path, "__metadata__ is not a JSON object");
      }
      for (const auto& kv : metadata.items()) {
        if (!kv.value().is_string()) {
          Fail(path, "__metadata__ value of '" + Printable(kv.key()) +
                         "' is not a string");
        }
        result.metadata_[kv.key()] = kv.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(ParseEntry(path, item.key(), item.value(), data_size));
  }
  std::vector<const Entry*> layout;
  for (const Entry& e : entries) layout.push_back(&e);
  CheckLayout(path, layout, data_size);

  // Unsupported dtypes are reported only now, so that a structurally broken
  // file is called broken rather than merely "unsupported".
  for (const Entry& e : entries) {
    if (e.dtype != "F32" && e.dtype != "F64" && e.dtype != "F16" &&
        e.dtype != "BF16") {
      Fail(path, "tensor '" + Printable(e.name) + "' has dtype " + e.dtype +
                     "; only F32, F64, F16 and BF16 can be read as float");
    }
  }

  // Every size below has been checked against the file.
  for (const Entry& e : entries) {
    Tensor tensor;
    tensor.dtype = e.dtype;
    tensor.shape = e.shape;
    tensor.data.resize(e.count);
    const uint64_t offset = data_offset + e.begin;
    if (e.dtype == "F32") {
      file.ReadAt(offset, tensor.data.data(), e.end - e.begin);
      if (!HostIsLittleEndian()) {
        for (float& v : tensor.data) {
          unsigned char b[4];
          std::memcpy(b, &v, 4);
          v = BitsToFloat(LoadLittleEndian<uint32_t>(b));
        }
      }
    } else {
      std::vector<unsigned char> raw(static_cast<size_t>(e.end - e.begin));
      file.ReadAt(offset, raw.data(), raw.size());
      const unsigned char* p = raw.data();
      for (size_t i = 0; i < e.count; ++i, p += e.dtype_size) {
        if (e.dtype == "F64") {
          const uint64_t bits = LoadLittleEndian<uint64_t>(p);
          double d;
          std::memcpy(&d, &bits, sizeof(d));
          tensor.data[i] = DoubleToFloat(d);
        } else if (e.dtype == "F16") {
          tensor.data[i] = HalfToFloat(LoadLittleEndian<uint16_t>(p));
        } else {  // BF16: the top half of a float.
          tensor.data[i] =
              BitsToFloat(uint32_t{LoadLittleEndian<uint16_t>(p)} << 16);
        }
      }
    }
    result.tensors_.emplace(e.name, std::move(tensor));
  }
  return result;
}

const Tensor* SafeTensors::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& SafeTensors::Get(const std::string& name) const {
  const Tensor* tensor = Find(name);
  if (tensor == nullptr) {
    Fail(path_, "no tensor named '" + Printable(name) + "'");
  }
  return *tensor;
}

std::vector<std::string> SafeTensors::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, tensor] : tensors_) names.push_back(name);
  return names;
}

}  // namespace simdattn::io
