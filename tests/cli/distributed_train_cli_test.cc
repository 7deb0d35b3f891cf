// The correctness contract across processes (DESIGN.md): every lossless plan — data parallelism
// at every ZeRO stage with uneven batches, pipelines (GPipe, 1F1B, Zorse's interleaved ministages)
// with asymmetric groups, uneven microbatch counts, custom routing, 1..L ministages, tensor-parallel
// teams (alone, with ZeRO across teams, in a pipeline beside a tp1 group), parameter and
// activation offload, with and without gradient clipping — run by `motley launch` as 2-6 ranks,
// ends 5 steps with the parameters and AdamW moments of a single-process run within 1e-5.
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

// A safetensors file's F32 tensors (enough for comparing checkpoints).
std::map<std::string, std::vector<float>> ReadF32Safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::vector<float>> out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__" || e["dtype"] != "F32") continue;
    const size_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), bytes.data() + 8 + n + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

// The largest norm-wise relative error ||a - b|| / ||b|| over the tensors of two files; -1 when
// they differ in names or sizes; infinity when either holds a NaN or an infinity. (Reassociation
// alone — the single-process trainer with microbatches of 4 against the whole batch — gives ~3e-6
// on this setup; the element-wise max is ~3e-5 because Adam magnifies noise in elements whose
// gradients are near zero.)
double MaxRelativeDifference(const std::string& a_path, const std::string& b_path) {
  auto a = ReadF32Safetensors(a_path), b = ReadF32Safetensors(b_path);
  if (a.size() != b.size() || a.empty()) return -1;
  double worst = 0;
  for (const auto& [name, y] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.size() != y.size()) return -1;
    double norm = 0, diff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      norm += static_cast<double>(y[i]) * y[i];
      diff += static_cast<double>(it->second[i] - y[i]) * (it->second[i] - y[i]);
    }
    const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    if (!std::isfinite(relative)) return std::numeric_limits<double>::infinity();  // NaN compares as nothing
    worst = std::max(worst, relative);
  }
  return worst;
}

constexpr char kCluster[] = R"(name = "cpu6"
[device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "test"
[[nodes]]
name = "a"
device = "cpu"
count = 6
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)";

constexpr char kModel[] = R"(name = "eq4"
hidden_size = 32
num_layers = 4
num_heads = 4
num_kv_heads = 2
ffn_size = 64
vocab_size = 256
max_seq_len = 64
)";

std::string Job(const std::string& dir, double clip, bool checkpointing) {
  return "model = \"model.toml\"\ncluster = \"cluster.toml\"\n[training]\nsteps = 5\nseq_len = 16\n"
         "global_batch_sequences = 12\nprecision = \"fp32\"\nseed = 7\nactivation_checkpointing = " +
         std::string(checkpointing ? "true" : "false") +
         "\n[data]\ntrain = \"builtin\"\nvalidation_interval_steps = 0\nvalidation_sequences = 4\n"
         "[optimizer]\nlr = 1e-2\ngrad_clip_norm = " + std::to_string(clip) +
         "\n[lr_schedule]\nwarmup_steps = 2\n[checkpoint]\ndir = \"" + dir + "\"\n";
}

struct PlanCase {
  const char* name;
  int ranks;
  double clip;  // the job's grad_clip_norm
  bool checkpointing;
  const char* body;  // the plan after its header
};

const PlanCase kPlans[] = {
    {"dp2-zero2-uneven", 2, 0, true, R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)"},
    {"dp3-zero0-last-batch", 3, 1, true, R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2]
microbatch_size = [3, 3, 2]
num_microbatches = [2, 1, 2]
last_microbatch_size = [2, 0, 0]
)"},
    {"dp2-zero1-4-ministages-no-checkpointing", 2, 1, false, R"(schedule = "gpipe"
zero_stage = 1
activation_checkpointing = false
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)"},
    {"dp3-zero3-uneven", 3, 0, true, R"(schedule = "gpipe"
zero_stage = 3
[[groups]]
ministages = [[0, 2], [2, 4]]
devices = [0, 1, 2]
microbatch_size = [2, 4, 2]
num_microbatches = [2, 1, 2]
)"},
    {"poplar-dp5-zero2-accumulation-last-batch", 5, 1, true, R"(zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2, 3, 4]
microbatch_size = [2, 1, 3, 1, 2]
num_microbatches = [2, 1, 1, 2, 2]
last_microbatch_size = [1, 0, 0, 0, 1]
)"},
    {"poplar-dp4-zero3-per-layer-prefetch", 4, 0, true, R"(zero_stage = 3
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1, 2, 3]
microbatch_size = [3, 2, 1, 1]
num_microbatches = [2, 1, 2, 2]
)"},
    {"pipeline2-gpipe", 2, 0, true, R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[2, 4]]
devices = [1]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"pipeline3-1f1b-asymmetric", 3, 1, true, R"(schedule = "1f1b"
zero_stage = 2
[[groups]]
ministages = [[0, 1]]
devices = [0]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[1, 3]]
devices = [1]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[3, 4]]
devices = [2]
microbatch_size = [2]
num_microbatches = [6]
)"},
    {"interleaved-offload-uneven", 3, 0, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
offload_activations = true
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [3, 1]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [2]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"interleaved-zero3-routing-6-ranks", 6, 1, true, R"(schedule = "interleaved"
zero_stage = 3
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [4, 2]
[[groups]]
ministages = [[1, 2]]
devices = [2, 3, 4]
microbatch_size = [2, 2, 2]
num_microbatches = [2, 2, 2]
routing = [3, 2, 4, 2, 3, 4]
[[groups]]
ministages = [[3, 4]]
devices = [5]
microbatch_size = [2]
num_microbatches = [6]
)"},
    {"interleaved-4-ranks-1-and-3-offload", 4, 1, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
[[groups]]
ministages = [[0, 1]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[1, 2], [2, 3], [3, 4]]
devices = [1, 2, 3]
microbatch_size = [3, 3, 3]
num_microbatches = [2, 1, 1]
)"},
    {"tp2-zero0", 2, 1, true, R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 2], [2, 4]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
)"},
    {"tp2-dp2-zero2-uneven-no-checkpointing", 4, 0, false, R"(schedule = "gpipe"
zero_stage = 2
activation_checkpointing = false
[[groups]]
ministages = [[0, 4]]
tp_degree = 2
devices = [0, 1, 2, 3]
microbatch_size = [4, 4, 2, 2]
num_microbatches = [2, 2, 2, 2]
)"},
    {"pipeline-tp2-then-tp1-offload", 3, 1, true, R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
[[groups]]
ministages = [[0, 1], [2, 3]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [4, 4]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [2]
microbatch_size = [3]
num_microbatches = [4]
)"},
    {"interleaved-5-ranks-zero1-activation-offload", 5, 0, true, R"(schedule = "interleaved"
zero_stage = 1
offload_activations = true
[[groups]]
ministages = [[0, 2]]
devices = [0, 1, 2]
microbatch_size = [2, 2, 2]
num_microbatches = [2, 2, 2]
[[groups]]
ministages = [[2, 4]]
devices = [3, 4]
microbatch_size = [2, 2]
num_microbatches = [3, 3]
)"},
};

class DistributedEquivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    dir_->Write("cluster.toml", kCluster);
    dir_->Write("model.toml", kModel);
    // Single-process references, one per (clipping, checkpointing) setting.
    for (double clip : {0.0, 1.0})
      for (bool ckpt : {true, false}) {
        const std::string name = Reference(clip, ckpt);
        dir_->Write(name + ".toml", Job(dir_->Join(name), clip, ckpt));
        CliRun r = Motley("train " + name + ".toml --single-process --metrics " + name + ".jsonl", false,
                          dir_->path().string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
      }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Reference(double clip, bool ckpt) {
    return std::string("ref-clip") + (clip > 0 ? "1" : "0") + (ckpt ? "" : "-nockpt");
  }
  static TempDir* dir_;
};
TempDir* DistributedEquivalence::dir_ = nullptr;

TEST_F(DistributedEquivalence, TheComparisonTellsDifferentTrainingApart) {
  // Clipping changes the updates: the measure must see it.
  const double d = MaxRelativeDifference(dir_->Join(Reference(1, true) + "/step-000005/model.safetensors"),
                                         dir_->Join(Reference(0, true) + "/step-000005/model.safetensors"));
  EXPECT_GT(d, 1e-3);
}

TEST_F(DistributedEquivalence, EveryPlanMatchesOneProcessAfterFiveSteps) {
  for (const PlanCase& c : kPlans) {
    SCOPED_TRACE(c.name);
    const std::string name = c.name;
    const std::string plan = dir_->Write(name + ".plan.toml", std::string("model = \"model.toml\"\ncluster = "
                                                                          "\"cluster.toml\"\nseq_len = 16\nprecision "
                                                                          "= \"fp32\"\n") + c.body);
    dir_->Write(name + ".toml", Job(dir_->Join(name), c.clip, c.checkpointing));
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan + " --metrics " + name + ".jsonl",
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ref = dir_->Join(Reference(c.clip, c.checkpointing) + "/step-000005/");
    const std::string got = dir_->Join(name + "/step-000005/");
    const double params = MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors");
    const double moments = MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors");
    EXPECT_GE(params, 0) << "the checkpoints differ in their tensors";
    EXPECT_LT(params, 1e-5);
    EXPECT_GE(moments, 0);
    EXPECT_LT(moments, 1e-5);
    // And the per-rank report: every rank computed and sent something.
    EXPECT_CONTAINS(r.output, "per rank, mean of a step");
    EXPECT_CONTAINS(r.output, "rank " + std::to_string(c.ranks - 1));
  }
}

// The asynchronous copy path a GPU takes (tickets, waits, gathers deferred until their shard
// arrives, host buffers reused) run on CPU: copies on worker threads, each a little late
// (copy_engine.h). Every plan with offload must still match one process.
TEST_F(DistributedEquivalence, OffloadWithAsynchronousCopiesMatchesOneProcess) {
  int offload_plans = 0;
  for (const PlanCase& c : kPlans) {
    if (std::string(c.body).find("offload_") == std::string::npos) continue;
    SCOPED_TRACE(c.name);
    ++offload_plans;
    const std::string name = std::string("async-") + c.name;
    const std::string plan = dir_->Write(name + ".plan.toml", std::string("model = \"model.toml\"\ncluster = "
                                                                          "\"cluster.toml\"\nseq_len = 16\nprecision "
                                                                          "= \"fp32\"\n") + c.body);
    dir_->Write(name + ".toml", Job(dir_->Join(name), c.clip, c.checkpointing));
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan + " --cpu-copy-threads",
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ref = dir_->Join(Reference(c.clip, c.checkpointing) + "/step-000005/");
    const std::string got = dir_->Join(name + "/step-000005/");
    EXPECT_GE(MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors"), 0);
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors"), 1e-5);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors"), 1e-5);
  }
  EXPECT_GE(offload_plans, 4);
}

// FlexTP's modes on tensor-parallel teams (issue #9 §6): `off` and `migrate` are exact with or
// without a straggler; the lossy modes never act without one (`semi` stays exact) and `resize`
// prunes (and so departs from exact training) with one.
TEST_F(DistributedEquivalence, TensorParallelModesKeepTheContract) {
  struct ModeCase {
    const char* name;
    const char* plan;  // a kPlans entry
    int ranks;
    const char* mode;
    int straggler;  // the slowed rank, or -1
    bool exact;
    double slowdown = 4;
    const char* slows = "compute";  // what the straggler's slowdown slows
  };
  const ModeCase cases[] = {
      {"off-straggler", "tp2-zero0", 2, "off", 1, true},
      {"migrate-straggler", "tp2-zero0", 2, "migrate", 1, true, 8},
      {"migrate-matmul-straggler", "tp2-zero0", 2, "migrate", 1, true, 8, "matmul"},  // FlexTP's kind
      {"migrate-no-straggler", "tp2-zero0", 2, "migrate", -1, true},
      {"migrate-straggler-dp2-zero2", "tp2-dp2-zero2-uneven-no-checkpointing", 4, "migrate", 3, true},
      {"semi-no-straggler", "tp2-zero0", 2, "semi", -1, true},
      {"resize-no-straggler", "tp2-zero0", 2, "resize", -1, true},
      {"resize-straggler", "tp2-zero0", 2, "resize", 1, false},
  };
  for (const ModeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const PlanCase* plan = nullptr;
    for (const PlanCase& p : kPlans)
      if (std::string(p.name) == c.plan) plan = &p;
    ASSERT_NE(plan, nullptr);
    const std::string name = std::string("mode-") + c.name;
    const std::string plan_file =
        dir_->Write(name + ".plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = "
                                                     "16\nprecision = \"fp32\"\n") + plan->body);
    std::string job = Job(dir_->Join(name), plan->clip, plan->checkpointing) + "[tensor_parallel]\nmode = \"" +
                      c.mode + "\"\n";
    // Without an emulated straggler, CPU timing noise alone must not count as one.
    if (c.straggler < 0) job += "straggler_threshold = 0.5\n";
    if (c.straggler >= 0)
      job += "[[emulation.stragglers]]\nrank = " + std::to_string(c.straggler) + "\nslowdown = " +
             std::to_string(c.slowdown) + "\nfrom_step = 2\nslows = \"" + c.slows + "\"\n";
    dir_->Write(name + ".toml", job);
    CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                          ".toml --plan " + plan_file + " --metrics " + name + ".jsonl",
                      false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ref = dir_->Join(Reference(plan->clip, plan->checkpointing) + "/step-000005/");
    const double params = MaxRelativeDifference(dir_->Join(name + "/step-000005/model.safetensors"),
                                                ref + "model.safetensors");
    EXPECT_GE(params, 0);
    // What the team did, from the metrics: units moved, units pruned.
    double moved = 0, pruned = 0;
    std::ifstream metrics(dir_->Join(name + ".jsonl"));
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("migrated_units")) continue;
      moved = std::max(moved, j["migrated_units"].get<double>());
      pruned = std::max(pruned, j["pruned_fraction"].get<double>());
    }
    const bool slowed = c.straggler >= 0 && std::string(c.mode) != "off";
    if (c.exact) {
      EXPECT_LT(params, 1e-5);
      EXPECT_EQ(pruned, 0);
      EXPECT_EQ(moved > 0, slowed) << "moved " << moved;
      // An 8x straggler on two ranks must hand over ~80% of its work, well beyond its MLP's share
      // (its 32 MLP units): the attention group moves too, and the training stays exact.
      if (slowed && c.slowdown >= 8 && std::string(c.slows) == "compute") {
        EXPECT_GT(moved, 32) << "attention groups stayed home";
      }
    } else {
      EXPECT_GT(pruned, 0);
      EXPECT_GT(params, 1e-4) << "pruning changes the training";
    }
  }
}

TEST_F(DistributedEquivalence, AMismatchedPlanIsOneClearError) {
  // The plan's batch differs from the job's.
  const std::string plan = dir_->Write("bad.plan.toml", std::string("model = \"model.toml\"\ncluster = "
                                                                    "\"cluster.toml\"\nseq_len = 16\nprecision = "
                                                                    "\"fp32\"\n[[groups]]\nministages = [[0, 4]]\n"
                                                                    "devices = [0, 1]\nmicrobatch_size = [4, 4]\n"
                                                                    "num_microbatches = [1, 1]\n"));
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train " + Reference(0, true) +
                        ".toml --plan " + plan,
                    false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "bad.plan.toml: the plan's microbatches add up to 8 sequences");
  // Started with fewer processes than the plan has devices.
  dir_->Write("ok.plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\n"
                                          "precision = \"fp32\"\n") + kPlans[0].body);
  r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train " + Reference(0, true) +
                 ".toml --plan ok.plan.toml",
             false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "the plan has 2 devices but 3 processes were started");
}

// The device type every emulated test cluster below is made of.
constexpr char kCpuType[] = R"([device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "test"
)";

// A cluster of two devices on one node; `emulation` is the [[nodes.emulation]] tables.
std::string TwoDeviceCluster(const std::string& emulation) {
  return std::string("name = \"cpu2\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)" + emulation;
}

constexpr char kEvenDp2[] = R"(model = "model.toml"
cluster = "cluster.toml"
seq_len = 16
precision = "fp32"
zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [2, 2]
)";

constexpr char kPipeline2[] = R"(model = "model.toml"
cluster = "cluster.toml"
seq_len = 16
precision = "fp32"
schedule = "interleaved"
zero_stage = 2
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [1]
microbatch_size = [3]
num_microbatches = [4]
)";

TEST(DistributedTrain, AnEmulatedDeviceRunsOutOfMemoryWithTheGpuError) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("plan.toml", kEvenDp2);
  dir.Write("job.toml", Job(dir.Join("run"), 0, true));
  // Device 1 has 256 KiB: the step fails with the out-of-memory error, naming the rank and device.
  dir.Write("cluster.toml", TwoDeviceCluster("[[nodes.emulation]]\nspeed_factor = 1.0\n"
                                             "[[nodes.emulation]]\nspeed_factor = 1.0\nmemory = \"256KiB\"\n"));
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml",
                    false, dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "out of memory on rank 1 (device 1 of cpu2, emulated): tried to allocate");
  EXPECT_CONTAINS(r.output, "of the emulated capacity of 256 KiB in use");
}

TEST(DistributedTrain, Bf16ComputeRunsAcrossAPipeline) {
  // bf16 activations cross the pipeline; fp32 master weights, gradients and collectives.
  TempDir dir;
  dir.Write("model.toml", kModel);
  std::string plan = kPipeline2;
  plan.replace(plan.find("\"fp32\""), 6, "\"bf16\"");
  dir.Write("plan.toml", plan);
  dir.Write("cluster.toml", TwoDeviceCluster(""));
  std::string job = Job(dir.Join("run"), 1, true);
  job.replace(job.find("\"fp32\""), 6, "\"bf16\"");
  dir.Write("job.toml", job);
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "in bf16");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 5 steps");
}

TEST(DistributedTrain, TheTraceOfTheRealRunUsesTheSimulatorsFormat) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("plan.toml", kPipeline2);
  dir.Write("cluster.toml", TwoDeviceCluster(""));
  dir.Write("job.toml", Job(dir.Join("run"), 0, true));
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                        " train job.toml --plan plan.toml --trace trace.json --trace-step 3",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "trace: trace.json");
  std::ifstream in(dir.Join("trace.json"));
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::map<int, std::set<std::string>> kinds;  // per rank
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    kinds[e["pid"].get<int>()].insert(e["cat"].get<std::string>());
  }
  ASSERT_EQ(kinds.size(), 2u);
  for (auto& [rank, k] : kinds) {
    EXPECT_TRUE(k.count("forward") && k.count("backward") && k.count("optimizer_step")) << "rank " << rank;
    EXPECT_TRUE(k.count("send") && k.count("recv")) << "rank " << rank;
  }
}

TEST(DistributedTrain, AKilledRankMidStepStopsEveryRankWithItsName) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  const std::string plan = dir.Write("plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\n"
                                                              "seq_len = 16\nprecision = \"fp32\"\n") + kPlans[7].body);
  std::string job = Job(dir.Join("run"), 0, true);
  job.replace(job.find("steps = 5"), 9, "steps = 500");
  dir.Write("job.toml", job);
  const auto start = std::chrono::steady_clock::now();
  CliRun r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) +
                        " train job.toml --plan plan.toml --die-rank 1 --die-at-step 3",
                    false, dir.path().string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(seconds, 60);
  EXPECT_CONTAINS(r.output, "motley launch: failed: rank 1 was killed by signal 9");
  for (int k : {0, 2}) {
    const std::string prefix = "[rank " + std::to_string(k) + "] ";
    bool named = false;
    for (size_t at = 0; (at = r.output.find(prefix, at)) != std::string::npos; ++at) {
      const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
      named = named || line.find("1 stopped responding") != std::string::npos;
    }
    EXPECT_TRUE(named) << "rank " << k << " did not name rank 1:\n" << r.output;
  }
}

TEST(DistributedTrain, ResumingAPipelineContinuesExactlyAsTheUninterruptedRun) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  // Interleaved ministages with offload (moments on the host), checkpoints every 3 steps.
  const std::string plan = dir.Write("plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\n"
                                                              "seq_len = 16\nprecision = \"fp32\"\n") + kPlans[8].body);
  std::string job = Job(dir.Join("run"), 0, true);
  job.replace(job.find("steps = 5"), 9, "steps = 6");
  job += "interval_steps = 3\nkeep = 5\n";
  dir.Write("job.toml", job);
  const std::string launch = "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml ";
  CliRun r = Motley(launch + "--metrics full.jsonl", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::rename(dir.Join("run/step-000006"), dir.Join("uninterrupted"));
  r = Motley(launch + "--resume run/step-000003 --metrics resumed.jsonl", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "steps 4..6 of 6");
  EXPECT_EQ(MaxRelativeDifference(dir.Join("run/step-000006/model.safetensors"),
                                  dir.Join("uninterrupted/model.safetensors")),
            0);
  EXPECT_EQ(MaxRelativeDifference(dir.Join("run/step-000006/optimizer.safetensors"),
                                  dir.Join("uninterrupted/optimizer.safetensors")),
            0);
}

TEST(DistributedTrain, TrainOnAClusterMeasuresPlansLaunchesAndComparesWithThePrediction) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  // Two fast devices and one 3x slower with a quarter of the memory.
  std::string cluster = kCluster;
  cluster.replace(cluster.find("cpu6"), 4, "cpu3");
  cluster.replace(cluster.find("count = 6"), 9, "count = 2");
  dir.Write("cluster.toml", cluster + "nic_bandwidth = \"1Gbps\"\n[nodes.emulation]\nspeed_factor = 2.0\n"
                                "[[nodes]]\nname = \"b\"\ndevice = \"cpu\"\ncount = 1\ninterconnect = \"pcie\"\n"
                                "intra_bandwidth = \"10GB/s\"\nnic_bandwidth = \"1Gbps\"\n"
                                "[nodes.emulation]\nspeed_factor = 6.0\nmemory = \"512MiB\"\n");
  std::string job = Job(dir.Join("run"), 1, true);
  job.replace(job.find("steps = 5"), 9, "steps = 6");
  dir.Write("job.toml", job + "[plan]\nstrategy = \"poplar\"\n");
  const std::string cmd = "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") + "' " +
                          MOTLEY_BIN + " train job.toml 2>&1";
  CliRun r = RunCommandLine(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "3 devices in cpu3: measure, plan, then launch one rank per device");
  EXPECT_CONTAINS(r.output, "profile: cpu: largest microbatch that fits in 512 MiB");
  EXPECT_CONTAINS(r.output, "plan: poplar");
  EXPECT_CONTAINS(r.output, "why: ZeRO-");  // the stage and the allocation's reasoning
  EXPECT_CONTAINS(r.output, "(device:microbatches x sequences)");
  EXPECT_CONTAINS(r.output, "predicted step");
  EXPECT_CONTAINS(r.output, "the even split:");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 6 steps");
  EXPECT_CONTAINS(r.output, "(predicted ");
  EXPECT_TRUE(fs::exists(dir.Join("run/plan.toml")));
  EXPECT_TRUE(fs::exists(dir.Join("run/profile.json")));
  EXPECT_TRUE(fs::exists(dir.Join("run/step-000006/model.safetensors")));
  // Again: the profile comes from the cache. With a measured baseline (the even split), the
  // profile is calibrated on that run (online profiling) before the plan is chosen again.
  const std::string first_profile = motley::ReadFileToString(dir.Join("run/profile.json")).value();
  r = RunCommandLine(cmd.substr(0, cmd.size() - 5) + " --baseline-steps 4 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "profile: cpu: measured before");
  EXPECT_CONTAINS(r.output, "the even split first, for 4 steps");
  EXPECT_CONTAINS(r.output, "profile calibrated on the even split's run (compute cpu x");
  EXPECT_CONTAINS(r.output, "measured: poplar");
  EXPECT_NE(motley::ReadFileToString(dir.Join("run/profile.json")).value(), first_profile) << "the ranks read the calibrated profile";
}

}  // namespace

namespace {

// GPU builds only (scripts/build-gpu.sh on a machine with a GPU): skipped where libtorch has no CUDA.
int CudaDevicesMotleySees() {
  const CliRun r = Motley("--version", true);
  const size_t at = r.output.find("CUDA, ");
  if (r.exit_code != 0 || at == std::string::npos) return 0;
  return std::atoi(r.output.c_str() + at + 6);
}
bool MotleySeesACudaDevice() { return CudaDevicesMotleySees() > 0; }

constexpr char kOneGpuCluster[] = R"(name = "gpu1"
[[nodes]]
name = "a"
device = "h100-sxm"
count = 1
interconnect = "nvlink"
)";

}  // namespace

TEST(DistributedTrainGpu, OffloadOnTheGpuTrainsTheSameModelAsWithoutIt) {
  if (!MotleySeesACudaDevice()) GTEST_SKIP() << "no CUDA device visible to this build of motley";
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kOneGpuCluster);
  // Four ministages on one GPU: with offload the shard, moments and boundaries go to pinned host
  // memory on side streams and come back; without it they stay. fp32, no clipping (interleaved updates).
  const std::string head =
      "model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\nprecision = \"fp32\"\n"
      "schedule = \"interleaved\"\nzero_stage = 2\nactivation_checkpointing = true\n";
  const std::string group =
      "[[groups]]\nministages = [[0, 1], [1, 2], [2, 3], [3, 4]]\ndevices = [0]\nmicrobatch_size = [4]\n"
      "num_microbatches = [3]\n";
  dir.Write("on.plan.toml", head + "offload_params = true\noffload_activations = true\n" + group);
  dir.Write("off.plan.toml", head + "offload_params = false\noffload_activations = false\n" + group);
  for (const char* name : {"ref", "on", "off"}) dir.Write(std::string(name) + ".toml", Job(dir.Join(name), 0, true));
  CliRun ref = Motley("train ref.toml --single-process --device cuda", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (const char* name : {"on", "off"}) {
    SCOPED_TRACE(name);
    CliRun r = Motley(std::string("train ") + name + ".toml --device cuda --plan " + name + ".plan.toml", false,
                      dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "CUDA");
    const std::string got = dir.Join(std::string(name) + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", dir.Join("ref/step-000005/model.safetensors")), 1e-5);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", dir.Join("ref/step-000005/optimizer.safetensors")),
              1e-5);
  }
  // Offload moves bytes, not values: on and off run the same kernels on the same values (a GPU's
  // atomics may still reorder a few sums).
  const double between = MaxRelativeDifference(dir.Join("on/step-000005/model.safetensors"),
                                               dir.Join("off/step-000005/model.safetensors"));
  EXPECT_GE(between, 0);
  EXPECT_LT(between, 1e-6);
}

TEST(DistributedTrainGpu, PipelinesAndZeroGroupsOverNcclTrainTheSameModel) {
  // One rank per GPU over NCCL: activations and gradients both ways between pipeline stages (each
  // direction of a pair on its own NCCL group, matched in order), ZeRO-2 collectives with
  // offload, a 1F1B schedule whose steady state sends both ways at once.
  if (CudaDevicesMotleySees() < 2) GTEST_SKIP() << "needs two CUDA devices visible to this build of motley";
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", R"(name = "gpu2"
[[nodes]]
name = "a"
device = "h100-sxm"
count = 2
interconnect = "nvlink"
)");
  const std::string head = "model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\nprecision = \"fp32\"\n";
  dir.Write("pipeline.plan.toml", head + R"(schedule = "1f1b"
zero_stage = 0
[[groups]]
ministages = [[0, 2]]
devices = [0]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[2, 4]]
devices = [1]
microbatch_size = [2]
num_microbatches = [6]
)");
  dir.Write("zero.plan.toml", head + R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
offload_activations = true
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)");
  for (const char* name : {"ref", "pipeline", "zero"}) dir.Write(std::string(name) + ".toml", Job(dir.Join(name), 0, true));
  CliRun ref = Motley("train ref.toml --single-process --device cuda", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (const char* name : {"pipeline", "zero"}) {
    SCOPED_TRACE(name);
    CliRun r = Motley(std::string("launch --nproc 2 -- ") + MOTLEY_BIN + " train " + name + ".toml --device cuda --plan " +
                          name + ".plan.toml",
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string got = dir.Join(std::string(name) + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", dir.Join("ref/step-000005/model.safetensors")), 1e-5);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", dir.Join("ref/step-000005/optimizer.safetensors")),
              1e-5);
  }
}

TEST(ProfileLinks, MeasuresEachDistinctLinkOfAnEmulatedCluster) {
  // Two alike nodes of two devices joined by 200 Mbps (25 MB/s): three links to report (within
  // a, within b, a <-> b) from two measurements (within, between).
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", std::string("name = \"slow-pair\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
[[nodes]]
name = "b"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
)");
  CliRun r = Motley("profile --cluster cluster.toml --model model.toml --seq-len 16 --precision fp32 --links "
                    "--max-microbatch 2 --repeats 1 -o profile.json",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "a <-> b");
  std::ifstream in(dir.Join("profile.json"));
  const auto profile = nlohmann::json::parse(in);
  ASSERT_EQ(profile["links"].size(), 3u) << profile.dump();
  for (const auto& l : profile["links"]) {
    const std::string a = l["between"][0].get<std::string>();
    const std::string b = l["between"][1].get<std::string>();
    const double bandwidth = l["bandwidth_bytes_per_s"];
    SCOPED_TRACE(a + "-" + b);
    if (a != b) {
      // Paced to 25 MB/s, plus Gloo's own time: a little slower, never faster (up to fitting noise).
      EXPECT_GT(bandwidth, 0.6 * 25e6);
      EXPECT_LT(bandwidth, 1.2 * 25e6);
    } else {
      EXPECT_GT(bandwidth, 25e6);  // within a node: much faster than between
    }
    EXPECT_GE(static_cast<double>(l["latency_s"]), 0.0);
  }
}

TEST(ProfileLinks, UnderALauncherEachTypeIsMeasuredByItsFirstRankAtOnce) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", std::string("name = \"two-types\"\n") + kCpuType + R"([device_types.cpu-b]
base = "cpu"
memory = "1GiB"
[[nodes]]
name = "a"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
[[nodes]]
name = "b"
device = "cpu-b"
count = 1
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
)");
  CliRun r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) +
                        " profile --cluster cluster.toml --model model.toml --seq-len 16 --precision fp32 --links "
                        "--max-microbatch 2 --repeats 1 --no-cache -o profile.json",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 measured cpu, rank 2 (node b's device) cpu-b; rank 0 wrote both.
  EXPECT_CONTAINS(r.output, "[rank 0]   cpu: layer and head at microbatch 1");
  EXPECT_CONTAINS(r.output, "[rank 2]   cpu-b: layer and head at microbatch 1");
  std::ifstream in(dir.Join("profile.json"));
  const auto profile = nlohmann::json::parse(in);
  std::set<std::string> types;
  for (const auto& e : profile["entries"]) types.insert(e["device_type"].get<std::string>());
  EXPECT_EQ(types, (std::set<std::string>{"cpu", "cpu-b"}));
  EXPECT_EQ(profile["links"].size(), 2u);  // within a; a <-> b (b has one device)
  // The wrong number of ranks is one clear error.
  CliRun wrong = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                            " profile --cluster cluster.toml --model model.toml --seq-len 16 --links",
                        false, dir.path().string());
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_CONTAINS(wrong.output, "needs one rank per device of two-types (3 devices), but 2 ranks were started");
}
