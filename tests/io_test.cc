// Builds as add_executable(io_test tests/io_test.cc) linking simdattn_io and
// GTest::gtest_main, with the compile definition
// SIMDATTN_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data".
//
// Tests of tools/io: .npy round trips, the PyTorch golden files in
// tests/data/golden (read back and recomputed in double precision, which also
// pins down their layouts), and hostile files, each of which must give a
// std::runtime_error whose single-line message starts with the path.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/io/npy.h"
#include "tools/io/safetensors.h"

#ifndef SIMDATTN_TEST_DATA_DIR
#error "compile with -DSIMDATTN_TEST_DATA_DIR=\"<source>/tests/data\""
#endif

namespace simdattn::io {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kGoldenDir = std::string(SIMDATTN_TEST_DATA_DIR) + "/golden";

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string U16(uint32_t v) {
  return std::string{static_cast<char>(v & 0xff),
                     static_cast<char>((v >> 8) & 0xff)};
}
std::string U32(uint32_t v) { return U16(v & 0xffff) + U16(v >> 16); }
std::string U64(uint64_t v) {
  return U32(static_cast<uint32_t>(v)) + U32(static_cast<uint32_t>(v >> 32));
}

std::string F32Bytes(const std::vector<float>& values) {
  std::string out;
  for (const float f : values) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    out += U32(bits);
  }
  return out;
}

// A per-process scratch directory, removed when the tests end.
class TempDirEnvironment : public ::testing::Environment {
 public:
  static const std::string& Dir() { return dir_; }
  void SetUp() override {
    std::random_device rd;
    dir_ = (fs::path(::testing::TempDir()) /
            ("simdattn_io_test_" + std::to_string(rd()) + "_" +
             std::to_string(rd())))
               .string();
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  static std::string dir_;
};
std::string TempDirEnvironment::dir_;
const auto* const kTempEnv =
    ::testing::AddGlobalTestEnvironment(new TempDirEnvironment);

std::string TempPath(const std::string& name) {
  return (fs::path(TempDirEnvironment::Dir()) / name).string();
}

// Runs `read` and checks that it throws std::runtime_error with a one-line
// message that starts with "<path>: " and contains `fragment`.
template <typename Fn>
void ExpectError(const std::string& path, const std::string& fragment,
                 Fn read) {
  try {
    read();
    ADD_FAILURE() << path << ": no error; expected '" << fragment << "'";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message: " << message << "\nexpected fragment: " << fragment;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// ---------------------------------------------------------------------------
// .npy
// ---------------------------------------------------------------------------

std::string NpyFile(const std::string& dict, const std::string& data,
                    int major = 1) {
  std::string header = dict + "\n";
  std::string out =
      std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  out += major == 1 ? U16(static_cast<uint32_t>(header.size()))
                    : U32(static_cast<uint32_t>(header.size()));
  return out + header + data;
}

std::string Dict(const std::string& shape, const std::string& descr = "<f4",
                 const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran +
         ", 'shape': " + shape + ", }";
}

TEST(NpyTest, RoundTripsShapesAndSpecialValues) {
  const std::vector<std::vector<size_t>> shapes = {
      {}, {0}, {1}, {5}, {2, 3}, {3, 0, 2}, {2, 3, 4, 5}, {1, 1, 1, 1, 1, 7}};
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  for (const auto& shape : shapes) {
    size_t count = 1;
    for (const size_t d : shape) count *= d;
    std::vector<float> values(count);
    for (float& v : values) v = normal(rng);
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max()};
    for (size_t i = 0; i < count && i < std::size(specials); ++i) {
      values[i] = specials[i];
    }
    const std::string path = TempPath("round_trip.npy");
    WriteNpy(path, shape, values.data());
    // NumPy aligns the data to 64 bytes; so must we, for memory mapping.
    EXPECT_EQ((fs::file_size(path) - count * 4) % 64, 0u);
    const NpyArray read = ReadNpy(path);
    EXPECT_EQ(read.shape, shape);
    ASSERT_EQ(read.data.size(), count);
    if (count > 0) {
      EXPECT_EQ(std::memcmp(read.data.data(), values.data(), count * 4), 0);
    }
  }
}

TEST(NpyTest, WriteMatchesNumpyByteForByte) {
  for (const char* name :
       {"self_attention_v1_toy.input.npy", "mha_wrapper_toy.output.npy",
        "multi_head_attention_toy.attn_weights.npy",
        "simplified_t1_d3.input.npy"}) {
    const std::string original = kGoldenDir + "/" + name;
    const NpyArray array = ReadNpy(original);
    const std::string copy = TempPath("copy.npy");
    WriteNpy(copy, array.shape, array.data.data());
    EXPECT_EQ(ReadBytes(copy), ReadBytes(original)) << name;
  }
}

TEST(NpyTest, NullDataOnlyForEmptyArrays) {
  const std::string path = TempPath("empty.npy");
  WriteNpy(path, {0, 4}, nullptr);
  EXPECT_TRUE(ReadNpy(path).data.empty());
  ExpectError(path, "null pointer", [&] { WriteNpy(path, {2}, nullptr); });
  const float x = 1;
  const size_t big = std::numeric_limits<size_t>::max() / 2;
  ExpectError(path, "overflows", [&] { WriteNpy(path, {big, 3}, &x); });
  const std::string bad_dir = TempPath("no/such/dir/x.npy");
  ExpectError(bad_dir, "cannot open for writing",
              [&] { WriteNpy(bad_dir, {1}, &x); });
}

TEST(NpyTest, AcceptsVersionsAndHeaderSpellings) {
  const std::string data = F32Bytes({1, 2, 3, 4, 5, 6});
  const std::vector<std::string> dicts = {
      Dict("(2, 3)"),
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
      "{ 'shape' : ( 2 ,3 ) ,'fortran_order':False,'descr':'<f4' }   ",
      "{'descr':'<f4','fortran_order':False,'shape':(2,3,),}",
  };
  for (const std::string& dict : dicts) {
    for (const int major : {1, 2, 3}) {
      const std::string path = TempPath("spelling.npy");
      WriteBytes(path, NpyFile(dict, data, major));
      const NpyArray array = ReadNpy(path);
      EXPECT_EQ(array.shape, (std::vector<size_t>{2, 3})) << dict;
      EXPECT_EQ(array.data, (std::vector<float>{1, 2, 3, 4, 5, 6})) << dict;
    }
  }
  const std::string path = TempPath("scalar.npy");
  WriteBytes(path, NpyFile(Dict("()"), F32Bytes({7}), 1));
  EXPECT_TRUE(ReadNpy(path).shape.empty());
  EXPECT_EQ(ReadNpy(path).data, std::vector<float>{7});
}

TEST(NpyTest, RejectsHostileFiles) {
  const std::string six = F32Bytes({1, 2, 3, 4, 5, 6});
  struct Bad {
    const char* name;
    std::string bytes;
    const char* fragment;
  };
  const std::string magic("\x93NUMPY", 6);
  const std::vector<Bad> cases = {
      {"empty", "", "too short"},
      {"short", magic + "\x01", "too short"},
      {"magic", std::string("\x93NUMPX\x01\x00\x10\x00{}", 12), "bad magic"},
      {"version", magic + std::string("\x04\x00\x10\x00", 4) + "{}",
       "unsupported NPY format version 4.0"},
      {"minor", magic + std::string("\x01\x01\x10\x00", 4) + "{}",
       "version 1.1"},
      {"v2_short", magic + std::string("\x02\x00\x10\x00", 4),
       "too short for an NPY 2.0 header"},
      {"header_past_end", magic + std::string("\x01\x00\xff\x00", 4) + "{}",
       "runs past the end of the file"},
      {"header_absurd", magic + std::string("\x02\x00", 2) + U32(0xffffffff),
       "exceeds the limit"},
      {"truncated_data", NpyFile(Dict("(2, 3)"), six.substr(0, 20)),
       "data section has 20 bytes but shape (2, 3) of '<f4' needs 24"},
      {"trailing", NpyFile(Dict("(2, 3)"), six + "xy"),
       "2 bytes of trailing data"},
      {"f8", NpyFile(Dict("(3,)", "<f8"), six), "dtype '<f8' is not supported"},
      {"big_endian", NpyFile(Dict("(6,)", ">f4"), six), "big-endian"},
      {"fortran", NpyFile(Dict("(2, 3)", "<f4", "True"), six),
       "fortran_order is True"},
      {"fortran_word", NpyFile(Dict("(2, 3)", "<f4", "Yes"), six),
       "not True or False"},
      {"fortran_prefix", NpyFile(Dict("(2, 3)", "<f4", "Truest"), six),
       "not True or False"},
      {"missing_shape",
       NpyFile("{'descr': '<f4', 'fortran_order': False}", six),
       "key 'shape' is missing"},
      {"missing_descr", NpyFile("{'fortran_order': False, 'shape': (6,)}", six),
       "key 'descr' is missing"},
      {"extra_key",
       NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), "
               "'x': 1}",
               six),
       "unexpected key 'x'"},
      {"duplicate_key",
       NpyFile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
               "'shape': (6,)}",
               six),
       "duplicate key 'descr'"},
      {"negative", NpyFile(Dict("(-6,)"), six), "negative dimension"},
      {"float_dim", NpyFile(Dict("(6.0,)"), six), "not a decimal integer"},
      {"long_suffix", NpyFile(Dict("(6L,)"), six), "not a decimal integer"},
      {"leading_zero", NpyFile(Dict("(06,)"), six), "malformed dimension"},
      {"huge_dim", NpyFile(Dict("(99999999999999999999999,)"), six),
       "does not fit in size_t"},
      {"product_overflow", NpyFile(Dict("(4294967296, 4294967296, 2)"), six),
       "more elements than memory can hold"},
      {"one_tuple", NpyFile(Dict("(6)"), six), "needs a trailing comma"},
      {"list_shape", NpyFile(Dict("[6]"), six), "shape is not a tuple"},
      {"structured",
       NpyFile("{'descr': [('a', '<f4')], 'fortran_order': False, "
               "'shape': (6,)}",
               six),
       "structured dtypes are not supported"},
      {"escape", NpyFile(Dict("(6,)", "<f\\x34"), six),
       "unsupported backslash"},
      {"unterminated_string", NpyFile("{'descr': '<f4", six),
       "unterminated string"},
      {"unterminated_dict",
       NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)", six),
       "header ended"},
      {"trailing_text", NpyFile(Dict("(6,)") + " junk", six),
       "trailing characters"},
      {"not_a_dict", NpyFile("['descr']", six), "expected '{'"},
      {"nul_in_header", NpyFile(std::string("{\0}", 3), six), "expected"},
      {"non_string_key", NpyFile("{1: 2}", six), "expected a key"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.name);
    const std::string path = TempPath(std::string("bad_") + bad.name + ".npy");
    WriteBytes(path, bad.bytes);
    ExpectError(path, bad.fragment, [&] { ReadNpy(path); });
  }
  ExpectError(TempPath("missing.npy"), "no such file",
              [&] { ReadNpy(TempPath("missing.npy")); });
  ExpectError(TempDirEnvironment::Dir(), "not a regular file",
              [&] { ReadNpy(TempDirEnvironment::Dir()); });
}

// Every prefix of a valid file is invalid, and must say so without reading
// past its end (the sanitizer build checks the latter).
TEST(NpyTest, EveryTruncationIsAnError) {
  const std::string bytes =
      ReadBytes(kGoldenDir + "/self_attention_v1_toy.input.npy");
  ASSERT_FALSE(bytes.empty());
  const std::string path = TempPath("truncated.npy");
  for (size_t size = 0; size < bytes.size(); ++size) {
    WriteBytes(path, bytes.substr(0, size));
    EXPECT_THROW(ReadNpy(path), std::runtime_error) << size;
  }
}

// Random byte damage must give either a valid array or a runtime_error.
TEST(NpyTest, CorruptedBytesNeverEscapeAsOtherErrors) {
  const std::string bytes =
      ReadBytes(kGoldenDir + "/self_attention_v1_toy.input.npy");
  std::mt19937 rng(7);
  const std::string path = TempPath("corrupt.npy");
  for (int trial = 0; trial < 2000; ++trial) {
    std::string damaged = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      // Mostly the header, where the parsing is.
      const size_t at = rng() % (trial % 2 ? damaged.size() : 128);
      damaged[at] = static_cast<char>(rng());
    }
    WriteBytes(path, damaged);
    try {
      const NpyArray array = ReadNpy(path);
      size_t count = 1;
      for (const size_t d : array.shape) count *= d;
      EXPECT_EQ(array.data.size(), count);
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u);
    }
  }
}

// ---------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------

std::string SafetensorsFile(const std::string& header,
                            const std::string& data) {
  return U64(header.size()) + header + data;
}

TEST(SafeTensorsTest, ReadsSmallFileAndMetadata) {
  const std::string path = TempPath("small.safetensors");
  const std::string header =
      R"({"__metadata__": {"format": "pt"},)"
      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},)"
      R"( "a": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]},)"
      R"( "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [20, 20]},)"
      R"( "c": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]}}  )";
  WriteBytes(path, SafetensorsFile(header, F32Bytes({5, 6, 1, 2, 3})));
  const SafeTensors st = SafeTensors::Load(path);
  EXPECT_EQ(st.Names(), (std::vector<std::string>{"a", "b", "c", "e"}));
  EXPECT_EQ(st.Metadata().at("format"), "pt");
  EXPECT_EQ(st.Get("a").data, std::vector<float>{1});
  EXPECT_TRUE(st.Get("a").shape.empty());
  EXPECT_EQ(st.Get("b").data, (std::vector<float>{2, 3}));
  EXPECT_EQ(st.Get("c").data, (std::vector<float>{5, 6}));
  EXPECT_EQ(st.Get("c").shape, (std::vector<size_t>{1, 2}));
  EXPECT_TRUE(st.Get("e").data.empty());
  EXPECT_EQ(st.Get("e").dtype, "F32");
  EXPECT_EQ(st.Find("missing"), nullptr);
  ExpectError(path, "no tensor named 'missing'", [&] { st.Get("missing"); });

  const std::string empty = TempPath("empty.safetensors");
  WriteBytes(empty, SafetensorsFile("{}", ""));
  EXPECT_TRUE(SafeTensors::Load(empty).Names().empty());
}

TEST(SafeTensorsTest, ConvertsF64F16BF16) {
  const std::string path = TempPath("convert.safetensors");
  std::string f64;
  for (const double d : {0.1, -3.5, 1e300, -1e300, 3.4028235e38}) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    f64 += U64(bits);
  }
  // 1, -2, smallest subnormal, largest normal, +inf, NaN.
  const std::string f16 = U16(0x3c00) + U16(0xc000) + U16(0x0001) +
                          U16(0x7bff) + U16(0x7c00) + U16(0x7e00);
  const std::string bf16 = U16(0x3f80) + U16(0xc040);  // 1, -3
  const std::string header =
      R"({"d": {"dtype": "F64", "shape": [5], "data_offsets": [0, 40]},)"
      R"( "h": {"dtype": "F16", "shape": [6], "data_offsets": [40, 52]},)"
      R"( "b": {"dtype": "BF16", "shape": [2], "data_offsets": [52, 56]}})";
  WriteBytes(path, SafetensorsFile(header, f64 + f16 + bf16));
  const SafeTensors st = SafeTensors::Load(path);
  const auto& d = st.Get("d").data;
  EXPECT_EQ(d[0], 0.1f);
  EXPECT_EQ(d[1], -3.5f);
  EXPECT_EQ(d[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(d[3], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(d[4], std::numeric_limits<float>::max());  // Rounds down.
  const auto& h = st.Get("h").data;
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_EQ(h[4], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(h[5]));
  EXPECT_EQ(st.Get("b").data, (std::vector<float>{1, -3}));
  EXPECT_EQ(st.Get("b").dtype, "BF16");
}

TEST(SafeTensorsTest, RejectsHostileFiles) {
  // A tensor entry with the given fields, for brevity.
  const auto entry = [](const std::string& name, const std::string& dtype,
                        const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\": {\"dtype\": \"" + dtype +
           "\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}";
  };
  const std::string d16 = F32Bytes({1, 2, 3, 4});
  const auto one = [&](const std::string& shape, const std::string& offsets,
                       const std::string& data) {
    return SafetensorsFile("{" + entry("t", "F32", shape, offsets) + "}", data);
  };
  std::string deep = "{\"t\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  deep += "}";
  struct Bad {
    const char* name;
    std::string bytes;
    std::string fragment;
  };
  const std::vector<Bad> cases = {
      {"empty", "", "too short for the 8-byte header length (0 bytes)"},
      {"seven", std::string(7, '\0'), "too short"},
      {"absurd_header", U64(200'000'000) + "{}",
       "header length 200000000 exceeds the limit"},
      {"max_header", U64(~uint64_t{0}) + "{}", "exceeds the limit"},
      {"header_past_end", U64(100) + "{}",
       "header length 100 runs past the end of the file (10 bytes)"},
      {"not_json", SafetensorsFile("{abc", ""), "header is not valid JSON"},
      {"not_object", SafetensorsFile("[1, 2]", ""),
       "header does not start with '{'"},
      {"leading_space", SafetensorsFile(" {}", ""), "does not start with '{'"},
      {"empty_header", SafetensorsFile("", ""), "does not start with '{'"},
      {"bad_utf8", SafetensorsFile("{\"\xff\": 1}", ""), "not valid JSON"},
      {"nul_padding", SafetensorsFile(std::string("{}\0\0", 4), ""),
       "header contains a NUL byte at header byte 2"},
      {"nul_hides_junk", SafetensorsFile(std::string("{}\0{\"t\": 1}", 11), ""),
       "NUL byte"},
      {"shape_overflow_then_zero",
       one("[4294967296, 4294967296, 16, 0]", "[0, 16]", d16),
       "do not match shape [4294967296, 4294967296, 16, 0] of F32 (0 bytes)"},
      {"number_overflow", SafetensorsFile(R"({"t": 1e999})", ""),
       "not valid JSON"},
      {"entry_not_object", SafetensorsFile(R"({"t": 5})", ""),
       "tensor 't' entry is not a JSON object"},
      {"missing_dtype",
       SafetensorsFile(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})",
                       d16.substr(0, 4)),
       "tensor 't' is missing 'dtype'"},
      {"missing_offsets",
       SafetensorsFile(R"({"t": {"dtype": "F32", "shape": [1]}})", ""),
       "is missing 'data_offsets'"},
      {"missing_shape",
       SafetensorsFile(R"({"t": {"dtype": "F32", "data_offsets": [0, 4]}})",
                       ""),
       "is missing 'shape'"},
      {"extra_key",
       SafetensorsFile(R"({"t": {"dtype": "F32", "shape": [1], )"
                       R"("data_offsets": [0, 4], "x": 0}})",
                       d16.substr(0, 4)),
       "unexpected key 'x'"},
      {"dtype_not_string",
       SafetensorsFile(
           R"({"t": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", ""),
       "dtype is not a string"},
      {"unknown_dtype",
       SafetensorsFile("{" + entry("t", "F33", "[1]", "[0, 4]") + "}", d16),
       "unknown dtype 'F33'"},
      {"shape_not_array", one("4", "[0, 16]", d16), "shape is not an array"},
      {"negative_dim", one("[2, -2]", "[0, 16]", d16),
       "shape[1] is -2, not a non-negative integer"},
      {"float_dim", one("[4.0]", "[0, 16]", d16),
       "shape[0] is 4.0, not a non-negative integer"},
      {"exp_dim", one("[4e0]", "[0, 16]", d16), "not a non-negative integer"},
      {"string_dim", one("[\"4\"]", "[0, 16]", d16),
       "not a non-negative integer"},
      {"bool_dim", one("[true]", "[0, 16]", d16), "not a non-negative integer"},
      {"dim_past_u64", one("[18446744073709551616]", "[0, 16]", d16),
       "not a non-negative integer"},
      {"shape_overflow", one("[4294967296, 4294967296, 16]", "[0, 16]", d16),
       "has more elements than memory can hold"},
      {"shape_bytes_overflow", one("[4611686018427387904]", "[0, 16]", d16),
       "has more elements than memory can hold"},
      {"offsets_not_array", one("[4]", "16", d16),
       "data_offsets is not an array of two integers"},
      {"offsets_short", one("[4]", "[16]", d16),
       "data_offsets is not an array of two integers"},
      {"offsets_long", one("[4]", "[0, 16, 32]", d16),
       "data_offsets is not an array of two integers"},
      {"offsets_negative", one("[4]", "[-16, 0]", d16),
       "data_offsets[0] is -16, not a non-negative integer"},
      {"offsets_float", one("[4]", "[0, 16.5]", d16),
       "data_offsets[1] is 16.5, not a non-negative integer"},
      {"offsets_reversed", one("[0]", "[16, 0]", d16),
       "data_offsets [16, 0) end before they begin"},
      {"offsets_mismatch",
       SafetensorsFile(
           "{" + entry("W_query.weight", "F32", "[4, 5]", "[0, 64]") + "}",
           std::string(80, '\0')),
       "tensor 'W_query.weight' data_offsets [0, 64) do not match shape "
       "[4, 5] of F32 (80 bytes)"},
      {"offsets_past_data", one("[4]", "[0, 16]", d16.substr(0, 8)),
       "data_offsets [0, 16) run past the end of the data section (8 bytes)"},
      {"offsets_far_past_data",
       one("[4]", "[18446744073709551600, 18446744073709551615]", d16),
       "do not match shape"},
      {"offsets_huge_past_data",
       one("[4]", "[18446744073709551599, 18446744073709551615]", d16),
       "run past the end of the data section (16 bytes)"},
      {"overlap",
       SafetensorsFile("{" + entry("a", "F32", "[2]", "[0, 8]") + ", " +
                           entry("b", "F32", "[2]", "[4, 12]") + "}",
                       d16.substr(0, 12)),
       "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"same_range",
       SafetensorsFile("{" + entry("a", "F32", "[2]", "[0, 8]") + ", " +
                           entry("b", "F32", "[2]", "[0, 8]") + "}",
                       d16.substr(0, 8)),
       "overlap"},
      {"hole",
       SafetensorsFile("{" + entry("a", "F32", "[1]", "[0, 4]") + ", " +
                           entry("b", "F32", "[1]", "[8, 12]") + "}",
                       d16.substr(0, 12)),
       "bytes [4, 8) of the data section belong to no tensor"},
      {"trailing", one("[2]", "[0, 8]", d16.substr(0, 11)),
       "3 bytes of trailing data after the last tensor"},
      {"data_without_tensors", SafetensorsFile("{}", "abc"),
       "3 bytes of trailing data"},
      {"duplicate_tensor",
       SafetensorsFile("{" + entry("a", "F32", "[1]", "[0, 4]") + ", " +
                           entry("a", "F32", "[1]", "[4, 8]") + "}",
                       d16.substr(0, 8)),
       "header has duplicate key 'a'"},
      {"duplicate_field",
       SafetensorsFile(R"({"t": {"dtype": "F32", "dtype": "F32", )"
                       R"("shape": [1], "data_offsets": [0, 4]}})",
                       d16.substr(0, 4)),
       "duplicate key 'dtype'"},
      {"nested_shape", one("[[4]]", "[0, 16]", d16), "nests too deeply"},
      {"very_deep", SafetensorsFile(deep, ""), "nests too deeply"},
      {"metadata_not_object", SafetensorsFile(R"({"__metadata__": [1]})", ""),
       "__metadata__ is not a JSON object"},
      {"metadata_not_string",
       SafetensorsFile(R"({"__metadata__": {"k": 1}})", ""),
       "__metadata__ value of 'k' is not a string"},
      {"unsupported_dtype",
       SafetensorsFile("{" + entry("ids", "I64", "[2]", "[0, 16]") + "}", d16),
       "tensor 'ids' has dtype I64; only F32, F64, F16 and BF16"},
      {"newline_in_name",
       SafetensorsFile("{" + entry("a\\nb", "F33", "[1]", "[0, 4]") + "}",
                       d16.substr(0, 4)),
       "tensor 'a\\x0ab' has unknown dtype"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.name);
    const std::string path =
        TempPath(std::string("bad_") + bad.name + ".safetensors");
    WriteBytes(path, bad.bytes);
    ExpectError(path, bad.fragment, [&] { SafeTensors::Load(path); });
  }
  ExpectError(TempPath("missing.safetensors"), "no such file",
              [&] { SafeTensors::Load(TempPath("missing.safetensors")); });
  ExpectError(TempDirEnvironment::Dir(), "not a regular file",
              [&] { SafeTensors::Load(TempDirEnvironment::Dir()); });
}

TEST(SafeTensorsTest, EveryTruncationIsAnError) {
  const std::string bytes =
      ReadBytes(kGoldenDir + "/mha_wrapper_toy.safetensors");
  ASSERT_FALSE(bytes.empty());
  const std::string path = TempPath("truncated.safetensors");
  for (size_t size = 0; size < bytes.size(); ++size) {
    WriteBytes(path, bytes.substr(0, size));
    EXPECT_THROW(SafeTensors::Load(path), std::runtime_error) << size;
  }
}

TEST(SafeTensorsTest, CorruptedBytesNeverEscapeAsOtherErrors) {
  const std::string bytes =
      ReadBytes(kGoldenDir + "/multi_head_attention_toy.safetensors");
  ASSERT_GT(bytes.size(), 8u);
  const uint64_t header_end = 8 + (static_cast<unsigned char>(bytes[0]) |
                                   static_cast<unsigned char>(bytes[1]) << 8);
  std::mt19937 rng(11);
  const std::string path = TempPath("corrupt.safetensors");
  const char kJsonChars[] = "{}[]\",:0123456789-.eE \\u";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % header_end;
      // Half the time a JSON-significant character, which gets further into
      // the validation than random bytes do.
      damaged[at] = trial % 2 ? kJsonChars[rng() % (sizeof(kJsonChars) - 1)]
                              : static_cast<char>(rng());
    }
    WriteBytes(path, damaged);
    try {
      const SafeTensors st = SafeTensors::Load(path);
      for (const std::string& name : st.Names()) {
        size_t count = 1;
        for (const size_t d : st.Get(name).shape) count *= d;
        EXPECT_EQ(st.Get(name).data.size(), count);
      }
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------
// The PyTorch golden files: read back, and recomputed in double precision from
// the stored state_dicts, which checks the readers and pins down the layouts
// (nn.Linear weights are (out, in); SelfAttention_v1's W are (in, out);
// MultiHeadAttention's heads are consecutive column blocks of the
// projections; attn_weights are (b, h, T, T)).
// ---------------------------------------------------------------------------

struct Matrix {
  size_t rows = 0, cols = 0;
  std::vector<double> v;
  Matrix(size_t r, size_t c) : rows(r), cols(c), v(r * c) {}
  double& operator()(size_t r, size_t c) { return v[r * cols + c]; }
  double operator()(size_t r, size_t c) const { return v[r * cols + c]; }
};

// x (T, in) times W, with W stored (out, in) as nn.Linear does, or (in, out)
// as SelfAttention_v1's parameters are.
Matrix Project(const Matrix& x, const Tensor& w, bool w_is_out_in,
               const Tensor* bias) {
  EXPECT_EQ(w.shape.size(), 2u);
  const size_t out = w_is_out_in ? w.shape[0] : w.shape[1];
  const size_t in = w_is_out_in ? w.shape[1] : w.shape[0];
  EXPECT_EQ(in, x.cols);
  Matrix y(x.rows, out);
  for (size_t t = 0; t < x.rows; ++t) {
    for (size_t o = 0; o < out; ++o) {
      double sum = bias ? bias->data[o] : 0.0;
      for (size_t i = 0; i < in; ++i) {
        sum += x(t, i) * w.data[w_is_out_in ? o * in + i : i * out + o];
      }
      y(t, o) = sum;
    }
  }
  return y;
}

// softmax(q k^T * scale, causal) v over columns [col, col + width) of q, k, v;
// writes the weights (T, T) and the context into columns [col, col + width)
// of `context`.
void Attend(const Matrix& q, const Matrix& k, const Matrix& v, size_t col,
            size_t width, bool causal, Matrix* weights, Matrix* context) {
  const size_t T = q.rows;
  const double scale = 1.0 / std::sqrt(static_cast<double>(width));
  for (size_t i = 0; i < T; ++i) {
    const size_t keys = causal ? i + 1 : T;
    std::vector<double> s(keys);
    double max = -INFINITY;
    for (size_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (size_t c = col; c < col + width; ++c) dot += q(i, c) * k(j, c);
      s[j] = dot * scale;
      max = std::max(max, s[j]);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - max));
    for (size_t j = 0; j < T; ++j) (*weights)(i, j) = j < keys ? s[j] / sum : 0;
    for (size_t c = col; c < col + width; ++c) {
      double acc = 0;
      for (size_t j = 0; j < keys; ++j) acc += (*weights)(i, j) * v(j, c);
      (*context)(i, c) = acc;
    }
  }
}

const Tensor* Bias(const SafeTensors& st, const std::string& name) {
  return st.Find(name);  // Absent when qkv_bias is off.
}

// Expected (output (T, out), weights per head (T, T)) of one sequence.
void Reference(const std::string& module, const SafeTensors& st,
               const Json& args, const Matrix& x, Matrix* out,
               std::vector<Matrix>* weights) {
  const size_t T = x.rows;
  const auto linear_qkv = [&](const std::string& prefix, Matrix* q, Matrix* k,
                              Matrix* v) {
    *q = Project(x, st.Get(prefix + "W_query.weight"), true,
                 Bias(st, prefix + "W_query.bias"));
    *k = Project(x, st.Get(prefix + "W_key.weight"), true,
                 Bias(st, prefix + "W_key.bias"));
    *v = Project(x, st.Get(prefix + "W_value.weight"), true,
                 Bias(st, prefix + "W_value.bias"));
  };
  Matrix q(0, 0), k(0, 0), v(0, 0);
  if (module == "SimplifiedSelfAttention") {
    weights->assign(1, Matrix(T, T));
    *out = Matrix(T, x.cols);
    // Unscaled: Attend's 1/sqrt(width) is undone by pre-scaling q.
    Matrix q_scaled = x;
    for (double& e : q_scaled.v) e *= std::sqrt(static_cast<double>(x.cols));
    Attend(q_scaled, x, x, 0, x.cols, false, &(*weights)[0], out);
    return;
  }
  if (module == "SelfAttention_v1") {
    q = Project(x, st.Get("W_query"), false, nullptr);
    k = Project(x, st.Get("W_key"), false, nullptr);
    v = Project(x, st.Get("W_value"), false, nullptr);
  } else if (module != "MultiHeadAttentionWrapper") {
    linear_qkv("", &q, &k, &v);
  }
  if (module == "SelfAttention_v1" || module == "SelfAttention_v2" ||
      module == "CausalAttention") {
    weights->assign(1, Matrix(T, T));
    *out = Matrix(T, q.cols);
    Attend(q, k, v, 0, q.cols, module == "CausalAttention", &(*weights)[0],
           out);
  } else if (module == "MultiHeadAttentionWrapper") {
    const size_t heads = args["num_heads"].get<size_t>();
    const size_t d_out = args["d_out"].get<size_t>();
    weights->assign(heads, Matrix(T, T));
    *out = Matrix(T, heads * d_out);
    for (size_t h = 0; h < heads; ++h) {
      linear_qkv("heads." + std::to_string(h) + ".", &q, &k, &v);
      Matrix context(T, d_out);
      Attend(q, k, v, 0, d_out, true, &(*weights)[h], &context);
      for (size_t t = 0; t < T; ++t) {
        for (size_t c = 0; c < d_out; ++c)
          (*out)(t, h * d_out + c) = context(t, c);
      }
    }
  } else if (module == "MultiHeadAttention") {
    const size_t heads = args["num_heads"].get<size_t>();
    const size_t head_dim = q.cols / heads;
    weights->assign(heads, Matrix(T, T));
    Matrix context(T, q.cols);
    for (size_t h = 0; h < heads; ++h) {
      Attend(q, k, v, h * head_dim, head_dim, true, &(*weights)[h], &context);
    }
    *out = Project(context, st.Get("out_proj.weight"), true,
                   &st.Get("out_proj.bias"));
  } else {
    ADD_FAILURE() << "unknown module " << module;
  }
}

void ExpectNear(const std::vector<float>& actual, size_t offset,
                const Matrix& expected, const std::string& what) {
  int reported = 0;
  for (size_t i = 0; i < expected.v.size(); ++i) {
    const double e = expected.v[i];
    const double a = actual[offset + i];
    // float32 PyTorch against a float64 recomputation.
    if (!(std::fabs(a - e) <= 2e-5 + 1e-4 * std::fabs(e)) && reported++ < 3) {
      ADD_FAILURE() << what << "[" << i << "]: golden " << a << ", recomputed "
                    << e;
    }
  }
}

Json LoadIndex() {
  std::ifstream in(kGoldenDir + "/cases.json");
  EXPECT_TRUE(in.good()) << kGoldenDir << "/cases.json";
  return Json::parse(in);
}

TEST(GoldenTest, IndexListsEveryModuleAndFile) {
  const Json index = LoadIndex();
  ASSERT_TRUE(index["cases"].is_array());
  std::set<std::string> modules;
  for (const Json& c : index["cases"]) {
    modules.insert(c["module"].get<std::string>());
    for (const char* key : {"state_dict", "input", "output", "attn_weights"}) {
      EXPECT_TRUE(fs::is_regular_file(kGoldenDir + "/" +
                                      c["files"][key].get<std::string>()))
          << c["name"] << " " << key;
    }
  }
  EXPECT_EQ(modules, (std::set<std::string>{
                         "SimplifiedSelfAttention", "SelfAttention_v1",
                         "SelfAttention_v2", "CausalAttention",
                         "MultiHeadAttentionWrapper", "MultiHeadAttention"}));
}

TEST(GoldenTest, SeedToyNumbers) {
  // Seed 001: torch.manual_seed(123); SelfAttention_v1(3, 2)(inputs).
  const NpyArray in = ReadNpy(kGoldenDir + "/self_attention_v1_toy.input.npy");
  EXPECT_EQ(in.shape, (std::vector<size_t>{6, 3}));
  EXPECT_EQ(in.data[0], 0.43f);
  EXPECT_EQ(in.data[17], 0.55f);
  const NpyArray out =
      ReadNpy(kGoldenDir + "/self_attention_v1_toy.output.npy");
  EXPECT_EQ(out.shape, (std::vector<size_t>{6, 2}));
  EXPECT_NEAR(out.data[0], 0.2996, 5e-5);
  EXPECT_NEAR(out.data[1], 0.8053, 5e-5);
  EXPECT_NEAR(out.data[10], 0.2990, 5e-5);
  const SafeTensors mha =
      SafeTensors::Load(kGoldenDir + "/multi_head_attention_toy.safetensors");
  EXPECT_EQ(mha.Names(), (std::vector<std::string>{
                             "W_key.weight", "W_query.weight", "W_value.weight",
                             "mask", "out_proj.bias", "out_proj.weight"}));
  EXPECT_EQ(mha.Metadata().at("module"), "MultiHeadAttention");
  // The causal mask buffer: ones strictly above the diagonal.
  const Tensor& mask = mha.Get("mask");
  ASSERT_EQ(mask.shape, (std::vector<size_t>{6, 6}));
  for (size_t i = 0; i < 6; ++i) {
    for (size_t j = 0; j < 6; ++j) {
      EXPECT_EQ(mask.data[i * 6 + j], j > i ? 1.0f : 0.0f);
    }
  }
}

TEST(GoldenTest, RecomputedFromStateDicts) {
  const Json index = LoadIndex();
  for (const Json& c : index["cases"]) {
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string module = c["module"].get<std::string>();
    const Json& files = c["files"];
    const SafeTensors st = SafeTensors::Load(
        kGoldenDir + "/" + files["state_dict"].get<std::string>());
    const NpyArray input =
        ReadNpy(kGoldenDir + "/" + files["input"].get<std::string>());
    const NpyArray output =
        ReadNpy(kGoldenDir + "/" + files["output"].get<std::string>());
    const NpyArray weights =
        ReadNpy(kGoldenDir + "/" + files["attn_weights"].get<std::string>());
    EXPECT_EQ(input.shape, c["input_shape"].get<std::vector<size_t>>());
    EXPECT_EQ(output.shape, c["output_shape"].get<std::vector<size_t>>());
    EXPECT_EQ(weights.shape,
              c["attn_weights_shape"].get<std::vector<size_t>>());
    std::vector<std::string> names;
    for (const auto& item : c["state_dict"].items()) {
      names.push_back(item.key());
      ASSERT_NE(st.Find(item.key()), nullptr) << item.key();
      EXPECT_EQ(st.Find(item.key())->shape,
                item.value().get<std::vector<size_t>>());
      EXPECT_EQ(st.Find(item.key())->dtype, "F32");
    }
    EXPECT_EQ(st.Names(), names);  // Both sorted.
    EXPECT_EQ(st.Metadata().at("module"), module);

    const bool batched = input.shape.size() == 3;
    const size_t batch = batched ? input.shape[0] : 1;
    const size_t T = input.shape[batched ? 1 : 0];
    const size_t d_in = input.shape.back();
    const size_t d_out = output.shape.back();
    ASSERT_EQ(weights.shape.size(), 4u);
    const size_t heads = weights.shape[1];
    for (size_t b = 0; b < batch; ++b) {
      Matrix x(T, d_in);
      for (size_t i = 0; i < T * d_in; ++i) {
        x.v[i] = input.data[b * T * d_in + i];
      }
      Matrix out(0, 0);
      std::vector<Matrix> w;
      Reference(module, st, c["args"], x, &out, &w);
      ASSERT_EQ(out.cols, d_out);
      ASSERT_EQ(w.size(), heads);
      ExpectNear(output.data, b * T * d_out, out, name + " output");
      for (size_t h = 0; h < heads; ++h) {
        ExpectNear(weights.data, (b * heads + h) * T * T, w[h],
                   name + " attn_weights");
      }
    }
  }
}

}  // namespace
}  // namespace simdattn::io
