// A model larger than every device (issue #23): `motley train JOB` on an emulated cluster whose
// devices each hold less than a third of the model's fp32 training state measures the device type
// without building the whole model, plans a layout that fits, and trains with the loss falling.
#include <cstdint>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

// ~25M parameters: 8 layers of hidden size 512 (16 bytes of fp32 state a parameter: ~407 MB).
constexpr const char* kModel = R"(name = "llama-25m"
hidden_size = 512
num_layers = 8
num_heads = 8
num_kv_heads = 4
ffn_size = 1536
vocab_size = 256
max_seq_len = 256
rope_theta = 10000.0
norm_eps = 1e-5
tie_embeddings = false
)";

// Four emulated devices of 128 MiB, two of them twice as slow, two nodes on a 1 Gbit/s link.
constexpr const char* kCluster = R"(name = "small-emulated"
[device_types.emu-cpu]
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
[[nodes]]
name = "a"
device = "emu-cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
nic_bandwidth = "1Gbps"
[nodes.emulation]
speed_factor = 1.0
memory = "128MiB"
[[nodes]]
name = "b"
device = "emu-cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
nic_bandwidth = "1Gbps"
[nodes.emulation]
speed_factor = 2.0
memory = "128MiB"
)";

double Number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1].str());
}

TEST(BigModel, TrainsAModelWhoseStateIsThreeTimesAnyDevicesMemory) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  // The job's defaults otherwise: gradient clipping on, the planner's choice of strategy.
  dir.Write("job.toml", R"(model = "model.toml"
cluster = "cluster.toml"
[training]
steps = 12
seq_len = 64
global_batch_sequences = 8
precision = "fp32"
activation_checkpointing = true
seed = 7
[data]
train = "builtin"
validation_interval_steps = 12
validation_sequences = 8
[optimizer]
lr = 1e-3
[checkpoint]
dir = "ckpt"
[plan]
strategy = "auto"
)");
  const std::string cmd = "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") +
                          "' " + MOTLEY_BIN + " train job.toml 2>&1";
  CliRun r = RunCommandLine(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Measured without the whole model: one layer's limit, then the whole model's at every stage.
  EXPECT_CONTAINS(r.output, "profile: emu-cpu: largest microbatch of one layer that fits in 128 MiB");
  EXPECT_CONTAINS(r.output,
                  "profile: emu-cpu: largest microbatch of the whole model at ZeRO-3 over 4 devices");
  EXPECT_CONTAINS(r.output, "training 25.44M parameters on 4 ranks");
  // The state of one device's share in ZeRO-0 (16 bytes a parameter) is far beyond 128 MiB.
  EXPECT_GT(16 * 25.44e6, 3 * 128.0 * 1024 * 1024);
  const double first = Number(r.output, R"(validation loss ([0-9.]+) -> [0-9.]+)");
  const double last = Number(r.output, R"(validation loss [0-9.]+ -> ([0-9.]+))");
  ASSERT_GT(first, 0) << r.output;
  EXPECT_LT(last, first - 1.0) << r.output;
  // No rank went past its 128 MiB (the memory ledger refuses it; its peak is reported).
  const std::regex peak(R"(rank (\d)\s+[0-9.]+ms.*? ([0-9.]+) MiB \([0-9.]+ MiB\))");
  int ranks = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), peak), end; it != end; ++it) {
    EXPECT_LE(std::stod((*it)[2].str()), 128.0) << it->str();
    ++ranks;
  }
  EXPECT_EQ(ranks, 4) << r.output;
}

}  // namespace

namespace {

using namespace motley_test;

// A plan that overflows one device (#23): the rank out of memory says so, and every other rank stops
// at once naming it and its error — not at a collective's timeout, blaming the network.
TEST(BigModel, ARankOutOfMemoryStopsTheOthersNamingIt) {
  TempDir dir;
  std::string cluster =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/clusters/local-emulated.toml")
          .value();
  for (const std::string memory : {"memory = \"1GiB\"", "memory = \"512MiB\""})
    cluster.replace(cluster.find(memory), memory.size(), "memory = \"48MiB\"");
  dir.Write("c.toml", cluster);
  std::string plan =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-even-dp.toml").value();
  plan.replace(plan.find("cluster = \"local-emulated\""), 26, "cluster = \"c.toml\"");
  plan.replace(plan.find("microbatch_size = [2, 2, 2, 2]"), 30, "microbatch_size = [26, 2, 2, 2]");
  plan.replace(plan.find("num_microbatches = [4, 4, 4, 4]"), 31, "num_microbatches = [1, 4, 4, 4]");
  dir.Write("p.toml", plan);
  std::string job =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/jobs/default.toml").value();
  job.replace(job.find("cluster = \"local-emulated\""), 26, "cluster = \"c.toml\"");
  job.replace(job.find("global_batch_sequences = 32"), 27, "global_batch_sequences = 50");
  dir.Write("job.toml", job);
  CliRun r = Motley("launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train " + dir.Join("job.toml") +
                    " --plan " + dir.Join("p.toml") + " --steps 2 --no-checkpoint --no-validation");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "rank 0: out of memory on rank 0");
  EXPECT_CONTAINS(r.output, "rank 0 failed first: out of memory on rank 0");
  EXPECT_CONTAINS(r.output, "motley launch: failed: rank 0 exited with code 1");
  EXPECT_EQ(r.output.find("every rank still beats"), std::string::npos) << r.output;
}

}  // namespace
