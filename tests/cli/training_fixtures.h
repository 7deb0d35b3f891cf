// Fixtures of the training tests that run the binary: comparing checkpoints, and the small model,
// CPU cluster and job the equivalence tests train.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace motley_test {

// A safetensors file's F32 tensors (enough for comparing checkpoints).
inline std::map<std::string, std::vector<float>> ReadF32Safetensors(const std::string& path) {
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
inline double MaxRelativeDifference(const std::string& a_path, const std::string& b_path) {
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

// The device type the emulated test clusters are made of.
inline constexpr char kCpuType[] = R"([device_types.cpu]
display_name = "one CPU process"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "test"
)";

// Six such devices on one node: the equivalence tests' cluster.
inline const std::string kCluster = std::string("name = \"cpu6\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 6
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)";

inline constexpr char kModel[] = R"(name = "eq4"
hidden_size = 32
num_layers = 4
num_heads = 4
num_kv_heads = 2
ffn_size = 64
vocab_size = 256
max_seq_len = 64
)";

inline std::string Job(const std::string& dir, double clip, bool checkpointing) {
  return "model = \"model.toml\"\ncluster = \"cluster.toml\"\n[training]\nsteps = 5\nseq_len = 16\n"
         "global_batch_sequences = 12\nprecision = \"fp32\"\nseed = 7\nactivation_checkpointing = " +
         std::string(checkpointing ? "true" : "false") +
         "\n[data]\ntrain = \"builtin\"\nvalidation_interval_steps = 0\nvalidation_sequences = 4\n"
         "[optimizer]\nlr = 1e-2\ngrad_clip_norm = " + std::to_string(clip) +
         "\n[lr_schedule]\nwarmup_steps = 2\n[checkpoint]\ndir = \"" + dir + "\"\n";
}

}  // namespace motley_test
