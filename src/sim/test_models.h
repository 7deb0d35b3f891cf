// Models, clusters and plans shared by the simulator's tests.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cluster_parse.h"
#include "core/model.h"
#include "plan/plan.h"
#include "sim/profile.h"

namespace motley::test {

/// A model whose head is negligible next to its layers (vocabulary of 1): hidden 256, 4 heads,
/// ffn 1024, sequences up to 512.
inline ModelSpec LayerHeavyModel(int layers) {
  ModelSpec m;
  m.name = "layer-heavy";
  m.hidden_size = 256;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 4;
  m.ffn_size = 1024;
  m.vocab_size = 8;  // a head that costs nothing; divisible by every tensor-parallel degree up to 8
  m.max_seq_len = 512;
  return m;
}

// A cluster of `n` identical devices on one node with (almost) free links, so that compute alone
// shapes the timeline.
inline Cluster FastCluster(int n, const std::string& memory = "64GiB",
                           const std::string& intra_bandwidth = "1000TB/s") {
  std::string text = R"(
[network]
intra_node_latency = "1ns"
[device_types.unit]
memory = ")" + memory +
                     R"("
memory_bandwidth = "1000TB/s"
fp16_flops = "100TFLOPS"
fp32_flops = "100TFLOPS"
host_link = "1000TB/s"
[[nodes]]
name = "n"
device = "unit"
interconnect = "pcie"
intra_bandwidth = ")" +
                     intra_bandwidth + R"("
count = )" + std::to_string(n) +
                     "\n";
  return ParseClusterToml(text, "fast.toml").value();
}

/// A random plan over up to `num_devices` devices of a FastCluster: any plan family, ZeRO stage,
/// checkpointing, offload, clipping, uneven microbatch counts, tensor parallelism in pairs, routing,
/// uneven state shares.
inline Plan RandomPlan(std::mt19937& rng, int num_devices, const ModelSpec& m) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Plan p;
  p.seq_len = 16;
  p.precision = Precision::kBf16;
  const int kind = pick(0, 3);  // 0 data parallel, 1 gpipe, 2 1f1b, 3 interleaved
  p.schedule = kind == 2   ? PipelineSchedule::k1F1B
               : kind == 3 ? PipelineSchedule::kInterleaved
                           : PipelineSchedule::kGPipe;
  p.zero_stage = pick(0, 3);
  p.activation_checkpointing = pick(0, 3) > 0;
  p.offload_activations = pick(0, 1);
  p.offload_params = kind == 3 && p.zero_stage >= 2 && pick(0, 1);
  p.gradient_clipping = pick(0, 1);
  // Random groups over a random subset of the devices.
  std::vector<int> devices(num_devices);
  for (int d = 0; d < num_devices; ++d) devices[d] = d;
  std::shuffle(devices.begin(), devices.end(), rng);
  const int used = pick(1, num_devices);
  const int num_groups = kind == 0 ? 1 : pick(1, std::min<int>(used, static_cast<int>(m.num_layers / 2)));
  std::vector<std::vector<int>> groups(num_groups);
  for (int i = 0; i < used; ++i) groups[i < num_groups ? i : pick(0, num_groups - 1)].push_back(devices[i]);
  // Layers: each group at least 2 (so it can hold 2 ministages).
  std::vector<int> layers(num_groups, 2);
  for (int extra = m.num_layers - 2 * num_groups; extra > 0; --extra) ++layers[pick(0, num_groups - 1)];
  std::vector<int> ministages(num_groups);
  for (int g = 0; g < num_groups; ++g) ministages[g] = kind == 3 ? pick(1, layers[g]) : pick(1, 2);
  std::vector<std::vector<LayerRange>> ranges;
  if (kind == 3) {
    ranges = InterleavedMinistages(layers, ministages);
  } else {
    int begin = 0;
    for (int g = 0; g < num_groups; ++g) {
      ranges.push_back(SplitLayers(begin, layers[g], ministages[g]));
      begin += layers[g];
    }
  }
  const bool pipeline = num_groups > 1;
  const int64_t mbs = pick(1, 3);
  const int64_t total = pick(num_groups, 12);
  for (int g = 0; g < num_groups; ++g) {
    GroupPlan gp;
    gp.ministages = ranges[g];
    // Tensor parallelism in pairs now and then.
    gp.tp_degree = groups[g].size() % 2 == 0 && pick(0, 2) == 0 ? 2 : 1;
    const size_t runs = groups[g].size() / gp.tp_degree;
    // Uneven microbatch counts per run (some may get none) summing to `total`.
    std::vector<int64_t> counts(runs, 0);
    counts[0] = 1;
    for (int64_t k = 1; k < total; ++k) ++counts[pick(0, static_cast<int>(runs) - 1)];
    for (size_t run = 0; run < runs; ++run) {
      DevicePlan d{0, pipeline ? mbs : pick(1, 4), counts[run], 0};
      if (!pipeline && d.num_microbatches > 0 && pick(0, 1))
        d.last_microbatch_size = pick(1, static_cast<int>(d.microbatch_size));
      for (int k = 0; k < gp.tp_degree; ++k) {
        d.device = groups[g][run * gp.tp_degree + k];
        gp.devices.push_back(d);
      }
    }
    if (pipeline && pick(0, 1)) {
      // A random routing that respects the counts.
      std::vector<int> routing = BlockRouting(gp);
      std::shuffle(routing.begin(), routing.end(), rng);
      gp.routing = routing;
    }
    p.groups.push_back(gp);
  }
  // Uneven state shares (Cephalo) now and then, from a generator of their own (the plans the
  // tests drew before shares existed stay the same).
  std::mt19937 shares_rng(static_cast<unsigned>(total * 7919 + mbs * 31 + used * 3 + p.zero_stage));
  if (p.zero_stage >= 1 && shares_rng() % 2 == 0) {
    for (GroupPlan& gp : p.groups) {
      for (size_t i = 0; i < gp.devices.size(); i += gp.tp_degree) {
        const double weight = 1 + static_cast<double>(shares_rng() % 4);  // 1..4
        for (int k = 0; k < gp.tp_degree; ++k) gp.state_shares.push_back(weight);
      }
      double sum = 0;
      for (size_t i = 0; i < gp.state_shares.size(); i += gp.tp_degree) sum += gp.state_shares[i];
      for (double& s : gp.state_shares) s /= sum;
    }
  }
  return p;
}

// Per-layer times of 10 ms forward and 20 ms backward at any microbatch size.
inline Profile FlatProfile(const ModelSpec& m, int64_t seq_len) {
  ProfileEntry e;
  e.device_type = "unit";
  e.model = m.name;
  e.hidden_size = m.hidden_size;
  e.seq_len = seq_len;
  e.precision = Precision::kBf16;
  e.points = {{1, 10, 20}, {64, 10, 20}};
  Profile p;
  p.entries.push_back(e);
  return p;
}

}  // namespace motley::test
