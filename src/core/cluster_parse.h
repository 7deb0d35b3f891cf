// Reading a cluster file (TOML) into a validated Cluster. Every problem in the file is reported at
// once, each naming file:line:column, the key and the fix.
#pragma once

#include <string>
#include <string_view>

#include "core/cluster.h"
#include "core/status.h"
#include "core/toml_reader.h"

namespace motley {

/// `file` names the text in messages.
Result<Cluster> ParseClusterToml(std::string_view text, const std::string& file);
Result<Cluster> LoadClusterFile(const std::string& path);
/// A cluster file path, or the name of a built-in example cluster ("local-emulated", "zorse-a").
Result<Cluster> LoadCluster(const std::string& name_or_path);

/// The parts of a cluster file another file shares (an offers file, offers.h): the built-in catalog
/// with the file's [device_types.NAME] tables; a [[nodes]] entry's device, count, interconnect,
/// intra_bandwidth and nic_bandwidth into `node` (returning its type, or nullptr when unknown); the
/// [network] table.
GpuCatalog ParseCatalog(TomlTable& root);
const GpuSpec* ReadNodeDevices(TomlTable& t, const GpuCatalog& catalog, NodeSpec* node);
void ParseNetwork(TomlTable& t, NetworkConfig* net);

}  // namespace motley
