// The `simdattn` program as a user runs it: the PyTorch round trip of
// `simdattn run`, bad files and bad flags.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "simdattn/kernels.h"
#include "simdattn/targets.h"
#include "tools/io/npy.h"
#include "tools/io/safetensors.h"

// oneDNN's JIT and libgomp are not built with the sanitizers: under them,
// --compare would report their internals, not ours.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SIMDATTN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SIMDATTN_SANITIZED 1
#endif
#endif

namespace simdattn {
namespace {

namespace fs = std::filesystem;
const std::string kGolden = std::string(SIMDATTN_TEST_DATA_DIR) + "/golden/";

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr together.
};

// The CLI with `args`, after `environment` (VAR=value ...) where given.
Result Simdattn(const std::string& args, const std::string& environment = "") {
  const std::string command = (environment.empty() ? "" : environment + " ") +
                              std::string(SIMDATTN_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  Result result{-1, ""};
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("simdattn_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(CliTest, RunRoundTripMatchesPyTorch) {
  struct Case {
    std::string name, flags;
  };
  for (const Case& c :
       {Case{"multi_head_attention_toy", "--module mha --heads 2"},
        Case{"mha_wrapper_toy", "--module MultiHeadAttentionWrapper"},
        Case{"self_attention_v1_toy", "--module SelfAttention_v1"},
        Case{"causal_attention_toy", "--module causal"}}) {
    SCOPED_TRACE(c.name);
    const Result r = Simdattn("run " + c.flags + " --weights " + kGolden +
                              c.name + ".safetensors" + " --input " + kGolden +
                              c.name + ".input.npy --output " + Path("y.npy") +
                              " --attn-weights " + Path("a.npy"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const io::NpyArray y = io::ReadNpy(Path("y.npy"));
    const io::NpyArray expected = io::ReadNpy(kGolden + c.name + ".output.npy");
    ASSERT_EQ(y.shape, expected.shape);
    for (size_t i = 0; i < y.data.size(); ++i) {
      EXPECT_NEAR(y.data[i], expected.data[i], 1e-5) << i;
    }
    const io::NpyArray a = io::ReadNpy(Path("a.npy"));
    EXPECT_EQ(a.shape.size(), 4u);
  }
}

// A golden state_dict rewritten in BF16: --keep-dtype holds it in 16 bits
// (fewer weight bytes reported) and gives the bits of the widened run.
TEST_F(CliTest, RunKeepDtypeMatchesTheWidenedWeights) {
  const std::string name = kGolden + "multi_head_attention_toy";
  const io::SafeTensors golden = io::SafeTensors::Load(name + ".safetensors");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const std::string& tensor : golden.Names()) {
    const io::Tensor& t = golden.Get(tensor);
    const size_t begin = data.size();
    for (float x : t.data) {
      const uint16_t bits = ToBFloat16(x).bits;
      data.push_back(static_cast<char>(bits & 0xFF));
      data.push_back(static_cast<char>(bits >> 8));
    }
    header[tensor] = {{"dtype", "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::ofstream file(Path("bf16.safetensors"), std::ios::binary);
  for (int byte = 0; byte < 8; ++byte) {
    file.put(static_cast<char>((uint64_t{text.size()} >> (8 * byte)) & 0xFF));
  }
  file << text << data;
  file.close();
  const std::string run = "run --module mha --heads 2 --weights " +
                          Path("bf16.safetensors") + " --input " + name +
                          ".input.npy --output ";
  const Result widened = Simdattn(run + Path("wide.npy"));
  const Result kept = Simdattn(run + Path("kept.npy") + " --keep-dtype");
  ASSERT_EQ(widened.exit_code, 0) << widened.output;
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  const auto bytes = [](const std::string& output) {
    return std::stoul(output.substr(output.find("weights: ") + 9));
  };
  EXPECT_LT(bytes(kept.output), bytes(widened.output)) << kept.output;
  EXPECT_EQ(io::ReadNpy(Path("kept.npy")).data,
            io::ReadNpy(Path("wide.npy")).data);
  // bf16 arithmetic: near the float32 result, not equal to it.
  const Result bf16 = Simdattn(run + Path("bf16.npy") + " --compute bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const std::vector<float> y16 = io::ReadNpy(Path("bf16.npy")).data;
  const std::vector<float> y32 = io::ReadNpy(Path("wide.npy")).data;
  ASSERT_EQ(y16.size(), y32.size());
  double worst = 0.0;
  for (size_t i = 0; i < y16.size(); ++i) {
    worst = std::max(worst, double{std::abs(y16[i] - y32[i])});
  }
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.05);
  const Result bad = Simdattn(run + Path("x.npy") + " --compute fp8");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--compute"), std::string::npos) << bad.output;
}

TEST_F(CliTest, BadFilesExitTwoWithOneLineNamingTheFile) {
  const std::string weights = kGolden + "multi_head_attention_toy.safetensors";
  const std::string input = kGolden + "multi_head_attention_toy.input.npy";
  // A truncated state_dict.
  {
    std::ifstream in(weights, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(Path("cut.safetensors"), std::ios::binary)
        << bytes.substr(0, bytes.size() / 2);
  }
  std::ofstream(Path("garbage.npy"), std::ios::binary) << "not an npy file";
  const std::vector<std::string> runs = {
      "--weights " + Path("cut.safetensors") + " --input " + input,
      "--weights " + weights + " --input " + Path("garbage.npy"),
      "--weights " + weights + " --input " + Path("missing.npy"),
      // The wrong module for the file: its tensors are missing or extra.
      "--weights " + kGolden + "self_attention_v1_toy.safetensors --input " +
          input,
  };
  for (const std::string& files : runs) {
    const Result r = Simdattn("run --module mha --heads 2 " + files +
                              " --output " + Path("y.npy"));
    EXPECT_EQ(r.exit_code, 2) << files << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1)
        << r.output;
  }
  const Result heads =
      Simdattn("run --module mha --heads 3 --weights " + weights + " --input " +
               input + " --output " + Path("y.npy"));
  EXPECT_EQ(heads.exit_code, 2);
  EXPECT_NE(heads.output.find("not divisible by num_heads (3)"),
            std::string::npos)
      << heads.output;
}

TEST_F(CliTest, HelpAndBadFlags) {
  for (const char* cmd :
       {"--help", "info --help", "demo --help", "run --help"}) {
    EXPECT_EQ(Simdattn(cmd).exit_code, 0) << cmd;
  }
  EXPECT_NE(Simdattn("demo --bogus").exit_code, 0);
  EXPECT_NE(
      Simdattn("run --module mha --dropout 2 --weights a --input b --output c")
          .exit_code,
      0);
  EXPECT_NE(Simdattn("").exit_code, 0);
  const Result info = Simdattn("info");
  EXPECT_EQ(info.exit_code, 0);
  EXPECT_NE(info.output.find("dispatch picks"), std::string::npos);
}

// Usage errors of any kind (a value out of range, an unknown option, a
// missing value or subcommand) exit 2 with one line, as bad files do, not
// with CLI11's own codes; --help and --version still exit 0.
TEST_F(CliTest, UsageErrorsExitTwoWithOneLine) {
  EXPECT_EQ(Simdattn("--version").exit_code, 0);
  const std::string files = " --weights a --input b --output c";
  for (const std::string& bad : std::vector<std::string>{
           "run --module mha --train --dropout -0.5" + files,
           "run --module mha --dropout 2" + files, "demo --bogus",
           "run --module mha --bogus 1" + files, "run --module" + files,
           "run --module mha --weights a --input b --output",
           "run --module mha", "bench --threads", "bench --reps 0",
           "bench --op nope", "nope", std::string()}) {
    const Result r = Simdattn(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1)
        << bad << "\n"
        << r.output;
    EXPECT_EQ(r.output.rfind("simdattn: ", 0), 0u) << bad << "\n" << r.output;
  }
}

// The module name is checked before the files are read: an unknown one is
// reported as such, not as a tensor the file lacks.
TEST_F(CliTest, UnknownModuleIsReportedBeforeTheFiles) {
  for (const std::string& files : std::vector<std::string>{
           // Its W_query is no nn.Linear: the old order reported that.
           "--weights " + kGolden + "self_attention_v1_toy.safetensors" +
               " --input " + kGolden + "self_attention_v1_toy.input.npy",
           "--weights " + Path("missing.safetensors") + " --input " +
               Path("missing.npy")}) {
    const Result r = Simdattn("run --module MultiHeadAttentionV9 " + files +
                              " --output " + Path("y.npy"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1)
        << r.output;
    EXPECT_NE(r.output.find("unknown module 'MultiHeadAttentionV9'"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("tensor"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(Path("y.npy")));
  }
}

// Every op, on every target this CPU supports, at 1 and 2 threads, against
// the float64 references.
TEST_F(CliTest, BenchCheckPassesOnEveryTarget) {
  const Result r = Simdattn("bench --check --targets all --threads 1,2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checks passed"), std::string::npos) << r.output;
  for (const char* op : {"matmul", "softmax", "dropout", "mha", "attention",
                         "decode", "append", "serve"}) {
    EXPECT_NE(r.output.find(op), std::string::npos) << op;
  }
}

// The attention variants' tokens: listed, and checked at a shape of the
// user's on every target.
TEST_F(CliTest, BenchListsAndChecksTheAttentionVariants) {
  const Result list = Simdattn("bench --list");
  EXPECT_EQ(list.exit_code, 0) << list.output;
  for (const char* text : {"[_windowW][_softcapC][_sinks][_alibi]",
                           "2x4x67x16_kv2_causal_window9_softcap5_sinks_alibi",
                           "2x4x300x16_window40"}) {
    EXPECT_NE(list.output.find(text), std::string::npos) << text;
  }
  const Result r = Simdattn(
      "bench --check --targets all --threads 2 --op attention,decode "
      "--shape attention=1x4x90x16_kv2_window7_softcap20_sinks_alibi "
      "--shape decode=2x3x500x8_window64_alibi");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1x4x90x16_kv2_window7_softcap20_sinks_alibi"),
            std::string::npos)
      << r.output;
}

// A tiny run of every op: the JSON records carry the documented keys.
TEST_F(CliTest, BenchJsonRecordsHaveTheDocumentedKeys) {
  std::string flags =
      "bench --op all --shape matmul=32x32x32,softmax=1x2x16x16_causal "
      "--shape dropout=1x2x16x16 --shape mha=1x8x16x2 "
      "--shape attention=1x4x32x16_kv2_causal_dropout "
      "--shape decode=2x4x100x16 --shape append=2x3x37x8 "
      "--shape serve=4x2x16_ctx40_d3_p1x20_v2x3 --threads 1,2 "
      "--reps 2 --min-time 1 --format json --out " +
      Path("bench.json");
#ifndef SIMDATTN_SANITIZED
  flags += " --compare";
#endif
  const Result r = Simdattn(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // With --out, stdout still gets the table.
  EXPECT_NE(r.output.find("of peak"), std::string::npos) << r.output;
  std::ifstream in(Path("bench.json"));
  const nlohmann::json records = nlohmann::json::parse(in);
  ASSERT_TRUE(records.is_array());
  std::vector<std::string> ops;
  for (const nlohmann::json& rec : records) {
    SCOPED_TRACE(rec.dump());
    for (const char* key : {"op", "shape", "target", "threads", "library",
                            "median_ms", "min_ms", "peak_fraction"}) {
      ASSERT_TRUE(rec.contains(key)) << key;
    }
    const std::string library = rec["library"].get<std::string>();
    EXPECT_TRUE(library == "simdattn" || library == "onednn" ||
                library == "openblas");
    EXPECT_TRUE(rec["threads"] == 1 || rec["threads"] == 2);
    EXPECT_GT(rec["median_ms"].get<double>(), 0.0);
    EXPECT_LE(rec["min_ms"].get<double>(), rec["median_ms"].get<double>());
    EXPECT_NE(rec.contains("gflops"), rec.contains("gb_per_s"));
    const double rate = rec.contains("gflops") ? rec["gflops"].get<double>()
                                               : rec["gb_per_s"].get<double>();
    EXPECT_GT(rate, 0.0);
    ops.push_back(rec["op"].get<std::string>());
  }
  for (const char* op : {"matmul", "softmax", "dropout", "mha", "attention",
                         "decode", "append", "serve"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

// tune writes a plan file for the knobs and shapes asked; info lists its
// knobs where SIMDATTN_PLANS names it; bench --plans times simdattn under
// it beside the table; a file from another CPU is refused, naming both.
TEST_F(CliTest, TuneWritesAPlanThatInfoAndBenchLoad) {
  const std::string plans = Path("plans.txt");
  Result r = Simdattn(
      "tune --knob matmul_task_tiles --shape matmul=40x32x24 --threads 1 "
      "--reps 3 --min-time 1 --out " +
      plans);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("matmul=40x32x24: 4 "), std::string::npos)
      << r.output;
  std::ifstream in(plans);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\nmatmul_task_tiles "), std::string::npos) << text;
  EXPECT_EQ(text.find("matmul_panel_group"), std::string::npos) << text;

  r = Simdattn("info", "SIMDATTN_PLANS=" + plans);
  EXPECT_NE(r.output.find("matmul_task_tiles = "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": tuned (" + plans + ")"), std::string::npos)
      << r.output;

  r = Simdattn(
      "bench --op matmul --shape 40x32x24 --threads 1 --reps 2 "
      "--min-time 1 --plans " +
      plans);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("vs simdattn+plans"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("simdattn+plans"), std::string::npos) << r.output;

  const std::string other = Path("other.txt");
  std::ofstream(other) << "simdattn " << Version()
                       << "\ncpu Some other CPU\nmatmul_task_tiles 4\n";
  r = Simdattn("bench --op matmul --shape 40x32x24 --plans " + other);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tuned on \"Some other CPU\" by simdattn"),
            std::string::npos)
      << r.output;
  r = Simdattn("info", "SIMDATTN_PLANS=" + other);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SIMDATTN_PLANS not loaded"), std::string::npos)
      << r.output;
  EXPECT_NE(Simdattn("tune --knob bf16_decode_pairs").exit_code, 0);
}

TEST_F(CliTest, BenchBadFlagsExitNonZeroWithOneLine) {
  EXPECT_EQ(Simdattn("bench --help").exit_code, 0);
  EXPECT_EQ(Simdattn("bench --list").exit_code, 0);
  for (const char* bad : {"bench --op nope", "bench --threads 0",
                          "bench --format xml", "bench --reps 0"}) {
    EXPECT_NE(Simdattn(bad).exit_code, 0) << bad;
  }
  for (const char* bad :
       {"bench --targets NOPE", "bench --op matmul --shape 12x",
        "bench --shape 8x8x8", "bench --op mha --shape 1x8x10x3",
        "bench --op attention --shape 1x4x8x8_kv3",
        "bench --op decode --shape 1x4x8x8_causal",
        "bench --op attention --shape 1x4x8x8_window0",
        "bench --op decode --shape 1x4x8x8_softcap-1",
        "bench --op dropout --shape 1x2x8x8_sinks"}) {
    const Result r = Simdattn(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1)
        << bad << "\n"
        << r.output;
  }
}

}  // namespace
}  // namespace simdattn
