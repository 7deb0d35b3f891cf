// Measuring a local (emulated) cluster's links from a single `motley` process: launches one rank
// per device running `motley profile --cluster C --links-only -o FILE` (profile/link_probe.h) and
// reads the result back. On a real cluster, run `motley profile --links` under your launcher.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/profile.h"

namespace motley {

/// `cluster_ref`: a built-in cluster name or an absolute path; `work_dir`: where the result file goes.
Result<std::vector<ProfileLink>> MeasureLinksLocally(const std::string& cluster_ref, int num_devices,
                                                     const std::string& work_dir);

}  // namespace motley
