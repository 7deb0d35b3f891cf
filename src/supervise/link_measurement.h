// Measuring a cluster's links from a single `motley` process: launches one rank per device running
// `motley profile --cluster C --links-only -o FILE` (profile/link_probe.h) — here (an emulated
// cluster), or on the cluster's hosts through one agent a host (`motley train --hosts`) — and
// reads the result back. Otherwise run `motley profile --links` under your launcher.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/profile.h"
#include "supervise/launcher.h"

namespace motley {

/// `cluster_ref`: a built-in cluster name or an absolute path; `work_dir`: where the result file goes
/// (a folder every host can read when `hosts` are given); `hosts`, `remote`: where the ranks start
/// (none: here).
Result<std::vector<ProfileLink>> MeasureLinks(const std::string& cluster_ref, int num_devices,
                                              const std::string& work_dir,
                                              const std::vector<LaunchHost>& hosts = {},
                                              const std::string& remote = "");

}  // namespace motley
