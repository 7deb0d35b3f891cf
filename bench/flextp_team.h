// The FlexTP bench's team (flextp_stragglers.cc): its shape and the files a run of it trains from —
// model, cluster, plan and job.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace motley_bench {

// The team's shape. The default — 4 ranks, 16 heads: 4 a rank, as a real model's team has several
// (Llama-7B at tp 4: 8). `--team gqa*`: 3 ranks of a grouped-query model with 3 key/value heads:
// each rank holds a single key/value group, as Llama 3 8B's ranks do at
// width 8 — where only query heads can move; its straggler is one rank 3x. `--team gqa`: 12 query
// heads, 4 to a key/value head as Llama 3's; `--team gqa-2`: 6, 2 to a key/value head; `--team
// gqa-8`: 24, 8 to a key/value head (Llama 3 70B's ranks at width 8); `--team mha-2`: gqa-2's
// shape with 6 key/value heads, its control (multi-head attention: heads move with their key and value).
struct Team {
  int ranks = 4;
  int hidden = 512, heads = 16, kv_heads = 16, ffn = 2048;
  double speed_factor = 4;  // the ranks share this machine's cores: each one's compute stretched that much
  int seq_len = 64;         // tokens a sequence; a step trains 512 tokens (8 sequences of 64) at any length
};

inline std::string ModelToml(const Team& t) {
  return fmt::format(R"(name = "flextp-bench"
hidden_size = {}
num_layers = 2
num_heads = {}
num_kv_heads = {}
ffn_size = {}
vocab_size = 256
max_seq_len = {}
)",
                     t.hidden, t.heads, t.kv_heads, t.ffn, std::max(128, t.seq_len));
}

inline std::string ClusterToml(const Team& t) {
  return fmt::format(R"(name = "cpu-team"
[device_types.cpu]
display_name = "one CPU process"
memory = "4GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "motley bench"
[[nodes]]
name = "a"
device = "cpu"
count = {}
interconnect = "nvlink"
intra_bandwidth = "10GB/s"
# The ranks share this machine's cores: every rank's compute is stretched to as many times its own,
# so the team is not bound by the oversubscription and its all-reduces take ~25% of a step (a GPU
# team over NVLink, FlexTP's setting, spends 10-30%); the stragglers' slowdowns multiply on top.
[nodes.emulation]
speed_factor = {}
)",
                     t.ranks, t.speed_factor);
}

inline std::string PlanToml(const Team& t) {
  std::string devices, sizes, twos;  // microbatches of 256 tokens, two a step
  for (int r = 0; r < t.ranks; ++r) {
    devices += fmt::format("{}{}", r ? ", " : "", r);
    sizes += fmt::format("{}{}", r ? ", " : "", 256 / t.seq_len);
    twos += r ? ", 2" : "2";
  }
  return fmt::format(R"(model = "model.toml"
cluster = "cluster.toml"
seq_len = {}
precision = "fp32"
schedule = "gpipe"
zero_stage = 0
activation_checkpointing = false
[[groups]]
ministages = [[0, 2]]
tp_degree = {}
devices = [{}]
microbatch_size = [{}]
num_microbatches = [{}]
)",
                     t.seq_len, t.ranks, devices, sizes, twos);
}

inline std::string Job(const Team& t, int steps, const std::string& mode, const std::vector<int>& slow,
                       double factor, const std::string& slows) {
  std::string j = fmt::format(
      R"(model = "model.toml"
cluster = "cluster.toml"
[training]
steps = {}
seq_len = {}
global_batch_sequences = {}
precision = "fp32"
seed = 3
activation_checkpointing = false
[data]
validation_interval_steps = 0
validation_sequences = 32
[optimizer]
lr = 3e-3
[tensor_parallel]
mode = "{}"
migration = "{}"
lend_attention = "{}"
semi_reference = "{}"
semi_solver = "{}"
decision_window_steps = {}
)",
      steps, t.seq_len, 512 / t.seq_len,
      mode.starts_with("migrate-") ? "migrate"
      : mode.starts_with("semi")   ? "semi"
                                   : mode,
      mode == "migrate-p2p" || mode == "migrate-proj" ? "point-to-point"
      : mode == "migrate-bcast"                       ? "broadcast-reduce"
                                                      : "auto",
      mode == "migrate-proj" ? "projections" : "heads", mode == "semi-fastest" ? "fastest" : "average",
      mode == "semi-search" ? "search" : "cost-model", mode == "semi-last-step" ? 1 : 3);
  for (int r : slow)
    j +=
        fmt::format("[[emulation.stragglers]]\nrank = {}\nslowdown = {}\nslows = \"{}\"\n", r, factor, slows);
  return j;
}

}  // namespace motley_bench
