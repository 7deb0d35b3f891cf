// The runtime against the simulator on memory: each rank's measured peak (the memory ledger counts
// every byte of its tensors) beside the simulator's prediction for the same schedule, as
// `motley train --plan` prints them. A plan the planner judged to fit must not run out of memory.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "core/file_io.h"

namespace motley_test {
namespace {

// The simulator's prediction per rank (MiB), from the per-rank table `motley train --plan` prints.
std::vector<double> PredictedMib(const std::string& output) {
  static const std::regex row(R"(rank \d+ .* \(([0-9.]+) (KiB|MiB|GiB)\)\n)");
  std::vector<double> out;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator();
       ++it) {
    const double x = std::stod((*it)[1]);
    const std::string unit = (*it)[2];
    out.push_back(unit == "KiB" ? x / 1024 : unit == "GiB" ? x * 1024 : x);
  }
  return out;
}

// Each rank's peak over the steps of a run after the first (MiB), from its metrics: the smallest
// and the largest step's. The simulator predicts a step in the steady state, holding what the steps
// before left (a gradient shard is made at the first reduction and kept): the first step holds
// less. How much a step holds at its peak moves by a buffer with timing — whether a collective
// finished before a compute op's layers ran or during them — so the prediction is checked against
// both: memory the simulator misses shows in every step (the smallest peak stays within 10% above
// the prediction), and memory it invents in none (the largest stays within 10% below).
struct MeasuredPeaks {
  std::vector<double> smallest, largest;
};
MeasuredPeaks MeasuredMib(const std::string& metrics_path) {
  MeasuredPeaks out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("ranks") || j.value("step", 0) < 2) continue;
    for (const auto& r : j["ranks"]) {
      const size_t rank = r["rank"].get<size_t>();
      const double mib = r["peak_memory_bytes"].get<double>() / (1 << 20);
      if (out.smallest.size() <= rank) {
        out.smallest.resize(rank + 1, 1e300);
        out.largest.resize(rank + 1, 0);
      }
      out.smallest[rank] = std::min(out.smallest[rank], mib);
      out.largest[rank] = std::max(out.largest[rank], mib);
    }
  }
  return out;
}

// A model whose training state outweighs its activations (13M parameters, 32-token sequences),
// and two emulated CPU devices to train it on.
constexpr const char* kParameterHeavyModel = R"(name = "llama-13m"
hidden_size = 512
num_layers = 4
num_heads = 8
num_kv_heads = 4
ffn_size = 1536
vocab_size = 256
max_seq_len = 64
rope_theta = 10000.0
norm_eps = 1e-5
tie_embeddings = false
)";
constexpr const char* kTwoCpus = R"(name = "two"
[device_types.emu-cpu]
memory = "4GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
[[nodes]]
name = "n"
device = "emu-cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
[nodes.emulation]
speed_factor = 1.0
)";

// The default job's three example plans (a pipeline, Poplar's uneven batches, the even split).
// Checkpointing keeps each layer's input and recomputes one layer at a time, as the simulator
// counts it (before: the runtime recomputed a whole ministage at once and used 31-54% more than
// predicted); Gloo's reduce-scatter, an all-to-all, holds a gradient-sized buffer on CPU ranks.
TEST(MemoryPrediction, EachRanksPeakIsWithinTenPercentOfTheSimulators) {
  TempDir dir;
  // And the even split as two tensor-parallel teams of two (Megatron's layout: each rank its share
  // of the heads' and the MLP's activations, the layer boundaries and the logits on every rank).
  std::string tp2 = motley::ReadFileToString(Example("plans/local-even-dp.toml")).value();
  tp2.replace(tp2.find("tp_degree = 1"), 13, "tp_degree = 2");
  tp2.replace(tp2.find("num_microbatches = [4, 4, 4, 4]"), 31,
              "num_microbatches = [8, 8, 8, 8]");  // a team's batch
  dir.Write("local-even-tp2.toml", tp2);
  for (const std::string plan : {"local-zorse", "local-poplar", "local-even-dp", "local-even-tp2"}) {
    const std::string metrics = dir.Join(plan + ".jsonl");
    const std::string file =
        plan == "local-even-tp2" ? dir.Join(plan + ".toml") : Example("plans/" + plan + ".toml");
    CliRun r = Motley("launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train default --plan " + file +
                          " --steps 4 --no-checkpoint --no-validation --metrics " + metrics,
                      false, dir.path().string());  // its run folder there, not beside another test's
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> predicted = PredictedMib(r.output);
    const MeasuredPeaks measured = MeasuredMib(metrics);
    ASSERT_EQ(predicted.size(), 4u) << r.output;
    ASSERT_EQ(measured.smallest.size(), 4u) << r.output;
    for (size_t rank = 0; rank < 4; ++rank) {
      EXPECT_LE(measured.smallest[rank], 1.10 * predicted[rank]) << plan << " rank " << rank << "\n"
                                                                 << r.output;
      // Of the ranks the simulator predicts alike (a group's members, one program), the one that
      // reaches a collective first holds its buffer through the compute op after it (the
      // simulator's timing); a later one may find it done and freed before that op begins (a
      // reduce-scatter's gradients, 1.75 MiB of local-zorse's 18.8 — rank 0 of the pair steadily
      // so on a loaded machine, rank 1 never). Which one is which is timing: the prediction is
      // invented only if none of them holds it in any step.
      double largest_alike = 0;
      for (size_t peer = 0; peer < 4; ++peer)
        if (std::abs(predicted[peer] - predicted[rank]) <= 0.01 * predicted[rank])
          largest_alike = std::max(largest_alike, measured.largest[peer]);
      EXPECT_GE(largest_alike, 0.90 * predicted[rank]) << plan << " rank " << rank << "\n" << r.output;
    }
  }
}

// A plan at the edge of memory: the default job in fp64 for 48 sequences a step on devices of
// 96 MiB, Poplar's uneven batches in ZeRO-0, device 1 taking 13 sequences at once (91.5 MiB
// measured). It runs, and no rank holds more than predicted: memory the simulator misses makes
// the planner pick a plan that runs out (#23's escalation test did, once, on a loaded machine). One
// sequence more does not fit (96.5 MiB): the simulator says so and the plan is refused before the
// ranks start. Before a layer's backward counted the gradient of its output (core/model.h), device 1
// was predicted to hold 90.3 MiB with 13 sequences and 95.1 MiB with 14.
TEST(MemoryPrediction, APlanAtTheEdgeOfMemoryHoldsNoMoreThanPredicted) {
  TempDir dir;
  std::string cluster = motley::ReadFileToString(Example("clusters/local-emulated.toml")).value();
  for (const std::string from : {"memory = \"1GiB\"", "memory = \"512MiB\""})
    cluster.replace(cluster.find(from), from.size(), "memory = \"96MiB\"");
  dir.Write("c.toml", cluster);
  std::string job = motley::ReadFileToString(Example("jobs/default.toml")).value();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"cluster = \"local-emulated\"", "cluster = \"c.toml\""},
           {"global_batch_sequences = 32", "global_batch_sequences = 48"},
           {"precision = \"fp32\"", "precision = \"fp64\""}})
    job.replace(job.find(from), from.size(), to);
  const std::string job_path = dir.Write("job.toml", job);
  for (const int edge : {13, 14}) {
    const std::string plan = dir.Write(fmt::format("edge{}.toml", edge), fmt::format(R"(strategy = "manual"
model = "llama-1m"
cluster = "c.toml"
seq_len = 128
precision = "fp64"
zero_stage = 0
activation_checkpointing = true
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2, 3]
microbatch_size = [8, {0}, 6, 6]
num_microbatches = [3, 2, 1, 1]
last_microbatch_size = [2, {1}, 0, 0]
)",
                                                                                     edge, 18 - edge));
    const std::string metrics = dir.Join(fmt::format("edge{}.jsonl", edge));
    CliRun r = Motley("train " + job_path + " --plan " + plan +
                          " --steps 3 --no-checkpoint --no-validation --metrics " + metrics,
                      false, dir.path().string());
    if (edge == 14) {
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_CONTAINS(r.output, "the simulator predicts this plan runs out of memory");
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> predicted = PredictedMib(r.output);
    const MeasuredPeaks measured = MeasuredMib(metrics);
    ASSERT_EQ(predicted.size(), 4u) << r.output;
    ASSERT_EQ(measured.largest.size(), 4u) << r.output;
    EXPECT_GT(measured.largest[1], 0.9 * 96) << r.output;  // at the edge
    for (size_t rank = 0; rank < 4; ++rank)                // the prediction printed to 0.1 MiB
      EXPECT_LE(measured.largest[rank], predicted[rank] + 0.05) << "rank " << rank << "\n" << r.output;
  }
}

// A model whose training state outweighs its activations (13M parameters, 32-token sequences),
// as in real LLM training: ZeRO-2 groups of one and two ranks, offload off and on. Before the
// master shard became part of the flat parameter buffer (it was a copy), a reduce-scatter's output
// became the gradient shard, collectives were completed as soon as done and Gloo gathered in place
// (its all-gather holds a buffer as large as the parameters), the peaks were 1.10-1.32x the
// prediction.
TEST(MemoryPrediction, AParameterHeavyModelsPeakIsWithinTenPercentOfTheSimulators) {
  TempDir dir;
  dir.Write("m.toml", kParameterHeavyModel);
  dir.Write("c.toml", kTwoCpus);
  // With gradient clipping (every update after the global norm: the schedule holds every
  // ministage's gradients and, with offload, its shard until then) and without.
  for (const std::string clip : {"0.0", "1.0"}) {
    const std::string job = dir.Write("job" + clip + ".toml", R"(model = "m.toml"
cluster = "c.toml"
[training]
steps = 3
seq_len = 32
global_batch_sequences = 4
precision = "fp32"
activation_checkpointing = true
[data]
train = "builtin"
[optimizer]
grad_clip_norm = )" + clip + "\n");
    for (const std::string offload : {"false", "true"}) {
      for (const int ranks : {1, 2}) {
        const std::string name = std::to_string(ranks) + "-" + offload + "-clip" + clip;
        std::string text = R"(strategy = "manual"
model = "m.toml"
cluster = "c.toml"
seq_len = 32
precision = "fp32"
schedule = "interleaved"
zero_stage = 2
activation_checkpointing = true
[[groups]]
ministages = [[0, 2], [2, 4]]
tp_degree = 1
)";
        text += ranks == 1 ? "devices = [0]\nmicrobatch_size = [1]\nnum_microbatches = [4]\n"
                           : "devices = [0, 1]\nmicrobatch_size = [1, 1]\nnum_microbatches = [2, 2]\n";
        text = "offload_params = " + offload + "\noffload_activations = " + offload +
               "\ngradient_clipping = " + (clip == "0.0" ? "false" : "true") + "\n" + text;
        const std::string plan = dir.Write("p" + name + ".toml", text);
        const std::string metrics = dir.Join("m" + name + ".jsonl");
        CliRun r =
            Motley("launch --nproc " + std::to_string(ranks) + " -- " + std::string(MOTLEY_BIN) + " train " +
                       job + " --plan " + plan + " --no-checkpoint --no-validation --metrics " + metrics,
                   false, dir.path().string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const std::vector<double> predicted = PredictedMib(r.output);
        const MeasuredPeaks measured = MeasuredMib(metrics);
        ASSERT_EQ(predicted.size(), static_cast<size_t>(ranks)) << r.output;
        ASSERT_EQ(measured.smallest.size(), static_cast<size_t>(ranks)) << r.output;
        for (int rank = 0; rank < ranks; ++rank) {
          EXPECT_GT(predicted[rank], 150) << r.output;  // the training state dominates (16 B a parameter)
          EXPECT_LE(measured.smallest[rank], 1.10 * predicted[rank]) << name << ", rank " << rank << "\n"
                                                                     << r.output;
          EXPECT_GE(measured.largest[rank], 0.90 * predicted[rank]) << name << ", rank " << rank << "\n"
                                                                    << r.output;
        }
      }
    }
  }
}

// Cephalo's state shares (#24): the same parameter-heavy model in ZeRO-2 and ZeRO-3 data
// parallelism over two ranks, rank 0 holding 80% of the state: each rank's peak follows its share,
// as predicted.
TEST(MemoryPrediction, UnevenStateSharesShowInEachRanksPeakAsPredicted) {
  TempDir dir;
  dir.Write("m.toml", kParameterHeavyModel);
  dir.Write("c.toml", kTwoCpus);
  const std::string job = dir.Write("job.toml", R"(model = "m.toml"
cluster = "c.toml"
[training]
steps = 3
seq_len = 32
global_batch_sequences = 4
precision = "fp32"
[data]
train = "builtin"
[optimizer]
grad_clip_norm = 0.0
)");
  for (const int zero : {2, 3}) {
    const std::string name = "zero" + std::to_string(zero);
    const std::string plan = dir.Write(name + ".plan.toml", R"(strategy = "manual"
seq_len = 32
precision = "fp32"
gradient_clipping = false
zero_stage = )" + std::to_string(zero) + R"(
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1]
microbatch_size = [1, 1]
num_microbatches = [2, 2]
state_shares = [0.8, 0.2]
)");
    const std::string metrics = dir.Join(name + ".jsonl");
    CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train " + job + " --plan " + plan +
                          " --no-checkpoint --no-validation --metrics " + metrics,
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<double> predicted = PredictedMib(r.output);
    const MeasuredPeaks measured = MeasuredMib(metrics);
    ASSERT_EQ(predicted.size(), 2u) << r.output;
    ASSERT_EQ(measured.smallest.size(), 2u) << r.output;
    std::cout << name << ": predicted " << predicted[0] << " / " << predicted[1] << " MiB, measured "
              << measured.smallest[0] << ".." << measured.largest[0] << " / " << measured.smallest[1] << ".."
              << measured.largest[1] << " MiB\n";
    // The sharded state (ZeRO-2: gradients and moments, 12 bytes a parameter in fp32; ZeRO-3 the
    // parameters as well) is four times as large on rank 0 as on rank 1; the full parameters
    // (ZeRO-2), the gathered layers (ZeRO-3) and the activations are alike (here: 225 / 122 MiB and
    // 240 / 107 MiB predicted).
    EXPECT_GT(predicted[0], (zero == 2 ? 1.6 : 2.0) * predicted[1]) << r.output;
    EXPECT_GT(measured.smallest[0], (zero == 2 ? 1.6 : 2.0) * measured.largest[1]) << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LE(measured.smallest[rank], 1.10 * predicted[rank]) << name << ", rank " << rank << "\n"
                                                                 << r.output;
      EXPECT_GE(measured.largest[rank], 0.90 * predicted[rank]) << name << ", rank " << rank << "\n"
                                                                << r.output;
    }
  }
}

}  // namespace
}  // namespace motley_test
