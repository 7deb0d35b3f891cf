// End-to-end tests of the motley command line: run the built binary, check exit codes and output.
#include <sys/wait.h>
#include <unistd.h>
#include <cstdint>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"
#include "core/units.h"

namespace {

using namespace motley_test;

TEST(Cli, VersionAndHelp) {
  CliRun v = Motley("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_CONTAINS(v.output, "motley 0.1.0");
  CliRun h = Motley("--help");
  EXPECT_EQ(h.exit_code, 0);
  for (const char* cmd : {"demo", "validate", "catalog", "describe", "plan", "schedule", "simulate"})
    EXPECT_CONTAINS(h.output, cmd);
  for (const char* cmd : {"validate", "catalog", "describe", "demo"}) {
    CliRun sub = Motley(std::string(cmd) + " --help");
    EXPECT_EQ(sub.exit_code, 0) << cmd;
    EXPECT_CONTAINS(sub.output, std::string("motley ") + cmd);
  }
}

TEST(Cli, MistypedCommandAndFlagGetDidYouMean) {
  CliRun cmd = Motley("valdiate x.toml");
  EXPECT_EQ(cmd.exit_code, 2);
  EXPECT_CONTAINS(cmd.output, "unknown command 'valdiate'; did you mean 'validate'?");
  CliRun flag = Motley("describe --model llama-7b --jsn");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_CONTAINS(flag.output, "unknown flag '--jsn'; did you mean '--json'?");
  CliRun global = Motley("--verison");
  EXPECT_EQ(global.exit_code, 2);
  EXPECT_CONTAINS(global.output, "did you mean '--version'?");
}

TEST(Cli, ValidateAcceptsEveryExample) {
  std::string files;
  int count = 0;
  for (const auto& dir : {"clusters", "models", "jobs"}) {
    for (const auto& e : fs::directory_iterator(Example(dir))) {
      // The fine-tune example starts from a folder its README set-up writes first; validated after
      // that set-up in TrainCli.TheFineTuneExampleRunsAsTheReadmeSays.
      if (e.path().filename() == "finetune.toml") continue;
      files += " " + e.path().string();
      ++count;
    }
  }
  EXPECT_GE(count, 7 + 9 + 1);
  CliRun r = Motley("validate" + files);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("invalid"), std::string::npos) << r.output;
}

// One test per kind of bad input the issue names; each checks the exit code and the message.
class ValidateRejects : public ::testing::Test {
 protected:
  CliRun Validate(const std::string& name, const std::string& text) {
    CliRun r = Motley("validate " + dir_.Write(name, text));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_CONTAINS(r.output, "invalid");
    return r;
  }
  TempDir dir_;
};

TEST_F(ValidateRejects, UnknownKeyWithPositionValidKeysAndSuggestion) {
  CliRun r = Validate("c.toml", "[[nodes]]\nname = \"a\"\ndevcie = \"t4\"\n");
  EXPECT_CONTAINS(r.output,
                  "c.toml:3:1: error: unknown key 'devcie' in [nodes[0]]; did you mean 'device'? "
                  "Valid keys here: count, device,");
}

TEST_F(ValidateRejects, WrongType) {
  CliRun r = Validate("m.toml", "base = \"llama-7b\"\nnum_layers = \"32\"\n");
  EXPECT_CONTAINS(r.output,
                  "m.toml:2:14: error: num_layers: expected an integer, got a string (\"32\"); "
                  "write it like num_layers = 1");
}

TEST_F(ValidateRejects, MissingRequiredKey) {
  CliRun r = Validate("c.toml", "[[nodes]]\nname = \"a\"\n");
  EXPECT_CONTAINS(r.output,
                  "c.toml:1:1: error: missing required key 'nodes[0].device' in [nodes[0]]; add it");
}

TEST_F(ValidateRejects, HeadsNotDividingHiddenSize) {
  CliRun r = Validate("m.toml", "base = \"llama-13b\"\nnum_heads = 48\n");
  EXPECT_CONTAINS(r.output, "num_heads (48) must divide hidden_size (5120): 5120 / 48 = 106.67");
}

TEST_F(ValidateRejects, KvHeadsNotDividingHeads) {
  CliRun r = Validate("m.toml", "base = \"llama3-8b\"\nnum_kv_heads = 6\n");
  EXPECT_CONTAINS(r.output, "num_kv_heads (6) must divide num_heads (32): 32 / 6 = 5.33");
}

TEST_F(ValidateRejects, SizesNotPositive) {
  CliRun r = Validate("m.toml", "base = \"llama-7b\"\nvocab_size = 0\n");
  EXPECT_CONTAINS(r.output, "m.toml:2:14: error: vocab_size: 0 is out of range; it must be between 1 and");
  CliRun mem = Validate("c.toml",
                        "[device_types.x]\nbase = \"t4\"\nmemory = \"0GiB\"\n[[nodes]]\nname = \"a\"\n"
                        "device = \"x\"\n");
  EXPECT_CONTAINS(mem.output, "c.toml:3:10: error: device_types.x.memory: a size must be greater than zero");
}

TEST_F(ValidateRejects, BandwidthNotPositive) {
  CliRun r = Validate("c.toml", "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwidth = \"0Gbps\"\n");
  EXPECT_CONTAINS(r.output,
                  "c.toml:4:17: error: nodes[0].nic_bandwidth: a bandwidth must be greater than zero");
}

TEST_F(ValidateRejects, DuplicateNodeNames) {
  CliRun r = Validate("c.toml",
                      "[[nodes]]\nname = \"gpu\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n"
                      "[[nodes]]\nname = \"gpu\"\ndevice = \"l4\"\nnic_bandwidth = \"1Gbps\"\n");
  EXPECT_CONTAINS(r.output,
                  "c.toml:6:8: error: nodes[1].name: duplicate node name 'gpu' (first declared at ");
  EXPECT_CONTAINS(r.output, "c.toml:2:8); every node needs its own name");
}

TEST_F(ValidateRejects, UnknownDeviceType) {
  CliRun r = Validate("c.toml", "[[nodes]]\nname = \"a\"\ndevice = \"rtx4080\"\n");
  EXPECT_CONTAINS(r.output,
                  "c.toml:3:10: error: nodes[0].device: unknown device type 'rtx4080'; did you mean "
                  "'rtx4090'?");
}

TEST_F(ValidateRejects, JobProblemsAndItsExitCodeAmongGoodFiles) {
  std::string bad = dir_.Write("j.toml",
                               "model = \"llama-1m\"\ncluster = \"local-emulated\"\n[training]\n"
                               "seq_len = 100\nglobal_batch_tokens = 250\n");
  CliRun r = Motley("validate " + Example("clusters/zorse-a.toml") + " " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "ok       " + Example("clusters/zorse-a.toml"));
  EXPECT_CONTAINS(r.output, "global_batch_tokens (250) is not a multiple of seq_len (100)");
  EXPECT_CONTAINS(r.output, "1 of 2 file(s) invalid");
}

TEST_F(ValidateRejects, MissingFileAndUnrecognisedKind) {
  CliRun missing = Motley("validate /nonexistent/motley.toml");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_CONTAINS(missing.output, "/nonexistent/motley.toml: cannot open the file");
  CliRun kind = Validate("x.toml", "answer = 42\n");
  EXPECT_CONTAINS(kind.output, "cannot tell what kind of file this is");
}

TEST(Cli, CatalogListsEveryTypeWithSources) {
  CliRun text = Motley("catalog");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_CONTAINS(text.output, "h100-nvl");
  EXPECT_CONTAINS(text.output, "rtx4090");
  CliRun json = Motley("catalog --json", true);
  ASSERT_EQ(json.exit_code, 0);
  auto j = nlohmann::json::parse(json.output);
  EXPECT_EQ(j.size(), 17u);
  for (const auto& e : j) {
    EXPECT_FALSE(e["source"].get<std::string>().empty()) << e["name"];
    EXPECT_GT(e["peak_fp64_flops"].get<double>(), 0) << e["name"];  // every type has its fp64 figure
  }
  CliRun with_cluster = Motley("catalog --json --cluster " + Example("clusters/poplar-c.toml"), true);
  ASSERT_EQ(with_cluster.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(with_cluster.output).size(), 19u);  // adds a800-80gb and v100s-32gb
}

TEST(Cli, DescribeModelParameters) {
  struct Case {
    const char* model;
    double params;
  } cases[] = {{"llama-7b", 6.74e9}, {"llama-13b", 13.02e9}, {"llama-33b", 32.53e9}, {"llama-65b", 65.29e9}};
  for (const auto& c : cases) {
    CliRun r = Motley(std::string("describe --model ") + c.model + " --json", true);
    ASSERT_EQ(r.exit_code, 0) << c.model;
    auto j = nlohmann::json::parse(r.output);
    EXPECT_NEAR(j["parameters"].get<double>(), c.params, c.params * 0.01) << c.model;
    EXPECT_GT(j["flops_per_token"]["train_with_recompute"].get<double>(),
              j["flops_per_token"]["train"].get<double>());
    EXPECT_GT(j["memory"]["optimizer_bytes"].get<double>(), 0);
  }
  CliRun file = Motley("describe --model " + Example("models/llama-7b.toml") + " --json", true);
  ASSERT_EQ(file.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(file.output)["parameters"].get<int64_t>(), 6738415616);
}

TEST(Cli, DescribeCluster) {
  CliRun r = Motley("describe --cluster " + Example("clusters/zorse-c.toml") + " --json", true);
  ASSERT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_devices"], 128);
  EXPECT_EQ(j["regions"].size(), 2u);
  bool saw_region_link = false;
  for (const auto& l : j["links"]) {
    if (l["kind"] == "inter-region") {
      saw_region_link = true;
      EXPECT_DOUBLE_EQ(l["max_bandwidth_bytes_per_s"].get<double>(), 5e9 / 8);
    }
  }
  EXPECT_TRUE(saw_region_link);
  CliRun text = Motley("describe --cluster local-emulated");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_CONTAINS(text.output, "6x slower, 512 MiB");
  CliRun neither = Motley("describe");
  EXPECT_EQ(neither.exit_code, 2);
}

}  // namespace
