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
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/io/npy.h"

namespace simdattn {
namespace {

namespace fs = std::filesystem;
const std::string kGolden = std::string(SIMDATTN_TEST_DATA_DIR) + "/golden/";

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr together.
};

Result Simdattn(const std::string& args) {
  const std::string command =
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
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(CliTest, RunRoundTripMatchesPyTorch) {
  struct Case {
    std::string name, flags;
  };
  for (const Case& c : {Case{"multi_head_attention_toy", "--module mha --heads 2"},
                        Case{"mha_wrapper_toy", "--module MultiHeadAttentionWrapper"},
                        Case{"self_attention_v1_toy", "--module SelfAttention_v1"},
                        Case{"causal_attention_toy", "--module causal"}}) {
    SCOPED_TRACE(c.name);
    const Result r = Simdattn(
        "run " + c.flags + " --weights " + kGolden + c.name + ".safetensors" +
        " --input " + kGolden + c.name + ".input.npy --output " + Path("y.npy") +
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
      "--weights " + kGolden + "self_attention_v1_toy.safetensors --input " + input,
  };
  for (const std::string& files : runs) {
    const Result r = Simdattn("run --module mha --heads 2 " + files +
                              " --output " + Path("y.npy"));
    EXPECT_EQ(r.exit_code, 2) << files << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  const Result heads = Simdattn("run --module mha --heads 3 --weights " + weights +
                                " --input " + input + " --output " + Path("y.npy"));
  EXPECT_EQ(heads.exit_code, 2);
  EXPECT_NE(heads.output.find("not divisible by num_heads (3)"), std::string::npos)
      << heads.output;
}

TEST_F(CliTest, HelpAndBadFlags) {
  for (const char* cmd : {"--help", "info --help", "demo --help", "run --help"}) {
    EXPECT_EQ(Simdattn(cmd).exit_code, 0) << cmd;
  }
  EXPECT_NE(Simdattn("demo --bogus").exit_code, 0);
  EXPECT_NE(Simdattn("run --module mha --dropout 2 --weights a --input b --output c")
                .exit_code,
            0);
  EXPECT_NE(Simdattn("").exit_code, 0);
  const Result info = Simdattn("info");
  EXPECT_EQ(info.exit_code, 0);
  EXPECT_NE(info.output.find("dispatch picks"), std::string::npos);
}

}  // namespace
}  // namespace simdattn
