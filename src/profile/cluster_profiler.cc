#include "profile/cluster_profiler.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <torch/cuda.h>

#include "core/file_io.h"
#include "core/units.h"
#include "profile/reserve_probe.h"
#include "runtime/device/cuda_device.h"

namespace motley {
namespace fs = std::filesystem;

std::string ProfileCacheDir() {
  if (const char* d = std::getenv("MOTLEY_CACHE_DIR"); d != nullptr && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d)
    return (fs::path(d) / "motley").string();
  if (const char* h = std::getenv("HOME"); h != nullptr && *h)
    return (fs::path(h) / ".cache" / "motley").string();
  return ".motley-cache";
}

std::vector<std::pair<std::string, int>> DeviceTypesByFirstDevice(const Cluster& cluster) {
  std::vector<std::pair<std::string, int>> out;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const std::string& type = cluster.spec(d).name;
    if (std::none_of(out.begin(), out.end(), [&](const auto& t) { return t.first == type; }))
      out.push_back({type, d});
  }
  return out;
}

Result<Profile> ProfileCluster(const Cluster& cluster, const ModelSpec& model, int64_t seq_len,
                               Precision precision, const ClusterProfileOptions& options) {
  auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  // Distinct types, each with the smallest memory any of its devices offers.
  std::map<std::string, double> memory_of_type;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const std::string& type = cluster.spec(d).name;
    auto [it, inserted] = memory_of_type.try_emplace(type, cluster.memory_bytes(d));
    if (!inserted) it->second = std::min(it->second, cluster.memory_bytes(d));
  }
  Profile profile;
  for (const auto& [type, memory] : memory_of_type) {
    if (!options.only_types.empty() &&
        std::find(options.only_types.begin(), options.only_types.end(), type) == options.only_types.end())
      continue;
    const int64_t memory_bytes = static_cast<int64_t>(memory);
    // Emulated devices all run on this machine: measure under the others' load.
    LayerProfilerConfig layers = options.layers;
    if (cluster.emulated() && layers.background_speed_factors.empty()) {
      bool skipped_self = false;
      for (int d = 0; d < cluster.num_devices(); ++d) {
        const EmulationConfig* emu = cluster.emulation(d);
        if (!skipped_self && cluster.spec(d).name == type) {
          skipped_self = true;
          continue;
        }
        layers.background_speed_factors.push_back(emu != nullptr ? emu->speed_factor : 1.0);
      }
    }
    // On a host with GPUs, by itself (not under a launcher): each type on the GPU its first device
    // will train on (rank r = device r = local GPU r), as `motley train` launches them.
    if (options.only_types.empty() && ProfilingDevice().is_cuda() && !cluster.emulated())
      for (const auto& [t, first] : DeviceTypesByFirstDevice(cluster))
        if (t == type && first < static_cast<int>(torch::cuda::device_count()))
          SetCurrentDevice(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(first)));
    // What measured it is part of the key: a CPU's stand-in figures for a GPU type (an emulated or
    // CPU-only run, say on a cluster's login node sharing the home directory) are not the GPU's.
    const std::string key =
        fmt::format("v12|{}|on-{}|h{}|l{}|a{}|kv{}|f{}|v{}|t{}|s{}|{}|m{}|{}|r{}|c{}|bg{}|tp{}|dp{}|g{}",
                    type, ProfilingDevice().is_cuda() ? "cuda" : "cpu", model.hidden_size, model.num_layers,
                    model.num_heads, model.num_kv_heads, model.ffn_size, model.vocab_size,
                    model.tie_embeddings, seq_len, PrecisionName(precision), memory_bytes,
                    fmt::join(options.layers.microbatches, ","), options.layers.repeats,
                    options.layers.max_microbatch_cap, fmt::join(layers.background_speed_factors, ","),
                    fmt::join(layers.tp_degrees, ","), cluster.num_devices(), cluster.emulated());
    const fs::path file =
        fs::path(ProfileCacheDir()) / fmt::format("profile-{:016x}.json", std::hash<std::string>{}(key));
    if (options.use_cache && fs::exists(file)) {
      Result<Profile> cached = LoadProfileFile(file.string());
      if (cached.ok() && cached->entries.size() == 1) {
        say(fmt::format("{}: measured before ({})", type, file.string()));
        profile.entries.push_back(cached->entries[0]);
        continue;
      }
    }
    // Its limits for the whole model in data parallelism over every device of the cluster.
    const ProfileMemoryContext context{cluster.num_devices(), cluster.emulated()};
    // On a GPU, what it keeps beyond the tensors (reserve_probe.h), around the measurement.
    std::optional<ReserveProbe> reserve;
    if (ProfilingDevice().is_cuda() && !cluster.emulated()) {
      Result<ReserveProbe> r = ReserveProbe::Start(ProfilingDevice());
      if (r.ok()) reserve = *r;
    }
    MOTLEY_ASSIGN_OR_RETURN(
        ProfileEntry entry,
        ProfileDeviceType(type, model, seq_len, precision, memory_bytes, layers, context, options.progress));
    if (reserve) {
      entry.reserve = reserve->Finish();
      say(fmt::format("{}: reserve {} (context {}, communication {}, fragmentation {})", type,
                      FormatBytes(entry.reserve->total_bytes()), FormatBytes(entry.reserve->context_bytes),
                      FormatBytes(entry.reserve->communication_bytes),
                      FormatBytes(entry.reserve->fragmentation_bytes)));
    }
    Profile one;
    one.entries.push_back(entry);
    std::error_code ec;
    fs::create_directories(file.parent_path(), ec);
    if (!ec)
      (void)AtomicWriteFile(file.string(),
                            ProfileToJson(one).dump(1));  // a failed cache write only costs time
    profile.entries.push_back(std::move(entry));
  }
  return profile;
}

}  // namespace motley
