// Fixtures of the training tests that run the binary: comparing checkpoints, and the small model,
// CPU cluster and job the equivalence tests train (in fp64 unless a test asks for another precision).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/equivalence_model.h"

namespace motley_test {

// A safetensors file's F32 and F64 tensors, as doubles (enough for comparing checkpoints), with
// each tensor's dtype name.
struct SafetensorsValues {
  std::map<std::string, std::vector<double>> tensors;
  std::map<std::string, std::string> dtypes;
};
// A file of a consolidated checkpoint: `path` itself, or — when `path` names model.safetensors or
// optimizer.safetensors in a sharded checkpoint (a distributed run's) — that file of its export
// (`motley checkpoint export`, written once beside the run folder).
inline std::string ConsolidatedFile(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path file(path), checkpoint = file.parent_path();
  // (A run of islands' islands.safetensors is beside the shards, its outer momentum in them.)
  if (!fs::exists(checkpoint / "shards.json") ||
      (fs::exists(file) && file.filename() != "islands.safetensors"))
    return path;
  const fs::path run = checkpoint.parent_path();
  const fs::path out =
      run.parent_path() / ("exported-" + run.filename().string() + "-" + checkpoint.filename().string());
  if (!fs::exists(out / "trainer_state.json")) {
    const std::string cmd = std::string(MOTLEY_BIN) + " checkpoint export '" + checkpoint.string() + "' '" +
                            out.string() + "' > /dev/null";
    if (std::system(cmd.c_str()) != 0) return path;
  }
  return (out / file.filename()).string();
}

inline SafetensorsValues ReadSafetensors(const std::string& path) {
  std::ifstream in(ConsolidatedFile(path), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SafetensorsValues out;
  if (bytes.size() < 8) return out;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = e["dtype"];
    if (dtype != "F32" && dtype != "F64") continue;
    const size_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    const char* data = bytes.data() + 8 + n + begin;
    std::vector<double> v;
    if (dtype == "F32") {
      std::vector<float> f((end - begin) / 4);
      std::memcpy(f.data(), data, end - begin);
      v.assign(f.begin(), f.end());
    } else {
      v.resize((end - begin) / 8);
      std::memcpy(v.data(), data, end - begin);
    }
    out.tensors[name] = std::move(v);
    out.dtypes[name] = dtype;
  }
  return out;
}

// Whether every tensor of a safetensors file is F64 (an fp64 run's checkpoint).
inline bool AllF64(const std::string& path) {
  const SafetensorsValues v = ReadSafetensors(path);
  if (v.dtypes.empty()) return false;
  for (const auto& [name, dtype] : v.dtypes)
    if (dtype != "F64") return false;
  return true;
}

// The largest norm-wise relative error ||a - b|| / ||b|| over the tensors of two files; -1 when
// they differ in names or sizes; infinity when either holds a NaN or an infinity.
inline double MaxRelativeDifference(const std::string& a_path, const std::string& b_path) {
  auto a = ReadSafetensors(a_path).tensors, b = ReadSafetensors(b_path).tensors;
  if (a.size() != b.size() || a.empty()) return -1;
  double worst = 0;
  for (const auto& [name, y] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.size() != y.size()) return -1;
    double norm = 0, diff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      norm += y[i] * y[i];
      diff += (it->second[i] - y[i]) * (it->second[i] - y[i]);
    }
    const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    if (!std::isfinite(relative)) return std::numeric_limits<double>::infinity();  // NaN compares as nothing
    worst = std::max(worst, relative);
  }
  return worst;
}

// The largest relative difference of the outer momentum in two checkpoints' islands.safetensors, over
// `b`'s (-1: `a` lacks one, or `b` has none).
inline double MaxMomentumDifference(const std::string& a_path, const std::string& b_path) {
  const auto a = ReadSafetensors(a_path).tensors, b = ReadSafetensors(b_path).tensors;
  double worst = -1;
  for (const auto& [name, y] : b) {
    if (!name.starts_with("outer.")) continue;
    if (!a.count(name) || a.at(name).size() != y.size()) return -1;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      diff = std::max(diff, std::abs(a.at(name)[i] - y[i]));
      norm = std::max(norm, std::abs(y[i]));
    }
    if (norm == 0) return -1;
    worst = std::max(worst, diff / norm);
  }
  return worst;
}

inline std::string Job(const std::string& dir, double clip, bool checkpointing,
                       const std::string& precision = "fp64") {
  return "model = \"model.toml\"\ncluster = \"cluster.toml\"\n[training]\nsteps = 5\nseq_len = 16\n"
         "global_batch_sequences = 12\nprecision = \"" +
         precision +
         "\"\nseed = 7\nactivation_checkpointing = " + std::string(checkpointing ? "true" : "false") +
         "\n[data]\ntrain = \"builtin\"\nvalidation_interval_steps = 0\nvalidation_sequences = 4\n"
         "[optimizer]\nlr = 1e-2\ngrad_clip_norm = " +
         std::to_string(clip) + "\n[lr_schedule]\nwarmup_steps = 2\n[checkpoint]\ndir = \"" + dir + "\"\n";
}

}  // namespace motley_test
