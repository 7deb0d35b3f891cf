// FlexTP's mode for a plan's tensor-parallel teams, chosen by the simulator: the plan's step when
// one of its devices straggles, under each mode the request allows (flextp_prediction.h models each
// mode's migration traffic, borrowed compute and pruned compute with the runtime's own balancer).
//
// A team without a straggler runs the same under every mode, so the choice is made on a probe: the
// device given (`motley plan --straggler D=F`), else the first device of the plan's first
// tensor-parallel team, 2x slower. "auto" picks among the exact modes — migrate when it beats the
// team waiting for its straggler (off) by more than 1%, else off; the lossy modes (resize, semi)
// are chosen only by name, since they change what is trained.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/job.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/plan.h"
#include "sim/profile.h"

namespace motley {

struct StragglerProbe {
  int device = -1;
  double factor = 2;  // times slower
};

struct FlexTpChoice {
  std::string mode;      // for the plan ("" when it has no tensor-parallel group)
  StragglerProbe probe;  // the straggler the modes were judged with
  std::vector<std::pair<std::string, double>> step_s;  // each mode judged, its predicted step with the probe
  double straggling_step_s = 0;  // ... under `mode` (the plan's mode when it has no team)
  std::string why;
};

/// `requested`: "auto", "off", "migrate", "resize" or "semi". `probe`: the straggler (none: the
/// first device of the plan's first tensor-parallel team, 2x; a plan without one is judged only
/// when a probe is given). Thresholds from `config` (its mode is ignored).
Result<FlexTpChoice> ChooseFlexTpMode(const Plan& plan, const Cluster& cluster, const ModelSpec& model,
                                      const Profile* profile, const std::string& requested,
                                      std::optional<StragglerProbe> probe,
                                      const TensorParallelConfig& config = {});

/// "D=F" (device D, F times slower) for a device of `cluster`; the error names the flag and the fix.
Result<StragglerProbe> ParseStragglerProbe(const std::string& text, const Cluster& cluster,
                                           const std::string& flag);

}  // namespace motley
