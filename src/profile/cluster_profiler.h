// ProfileCluster: the profile of every distinct device type of a cluster for one model shape,
// sequence length and precision — measured once per (type, memory, model shape, sequence length,
// precision) and cached on disk, so planning a job again costs nothing.
//
// Cache: $MOTLEY_CACHE_DIR, else $XDG_CACHE_HOME/motley, else ~/.cache/motley; one JSON file per
// entry. On CPU-only machines every type is measured on this CPU (the emulated speed factors are
// the cost model's). Links are measured apart (profile/link_probe.h, `motley profile --links`);
// under a launcher each type is measured by its first device's rank (options.only_types).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "profile/layer_profiler.h"
#include "sim/profile.h"

namespace motley {

struct ClusterProfileOptions {
  LayerProfilerConfig layers;
  bool use_cache = true;
  std::function<void(const std::string&)> progress;  // what is being measured, or reused
  std::vector<std::string> only_types;               // measure these types only (empty: every type)
};

/// The device types of a cluster (catalog names), each with the first device of its type, in
/// device order: under a launcher, that device's rank measures the type.
std::vector<std::pair<std::string, int>> DeviceTypesByFirstDevice(const Cluster& cluster);

Result<Profile> ProfileCluster(const Cluster& cluster, const ModelSpec& model, int64_t seq_len,
                               Precision precision, const ClusterProfileOptions& options);

/// The cache directory (see above).
std::string ProfileCacheDir();

}  // namespace motley
