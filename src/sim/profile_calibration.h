// Profile calibration: Poplar's online profiling (issue #7 §4). The profiler times one device
// type at a time, alone; a real run of a plan shows what the devices take when they all run at
// once — processes competing for a shared host's cores and memory bandwidth, a GPU's clocks under
// sustained load. CalibrateProfile scales each device type's compute times (layers, head,
// optimizer) in the profile by the ratio of the compute the ranks of that type measured in the run
// to what the simulator predicted for the same plan with the same profile; plans simulated with the
// calibrated profile then carry what the run saw.
#pragma once

#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/status.h"
#include "plan/plan.h"
#include "sim/profile.h"
#include "sim/simulator.h"

namespace motley {

struct TypeCalibration {
  std::string device_type;
  int ranks = 0;
  double measured_compute_s = 0;   // summed over the type's ranks, per step
  double simulated_compute_s = 0;  // the simulator's compute busy time for the same ranks
  double scale = 1;                // measured / simulated: what the type's times were multiplied by
};

/// `measured_compute_s[r]`: rank r's measured compute time per step in a run of the plan that
/// `simulated` simulated with `*profile` (same rank numbering). Scales the profile entry each
/// device type's ranks used (found with `model`, `seq_len`, `precision`); types the profile does
/// not cover (costed by the roofline) are left out. An error when the two disagree by more than
/// 5x either way (the metrics are not of this plan) or when no rank could be calibrated.
Result<std::vector<TypeCalibration>> CalibrateProfile(Profile* profile, const SimResult& simulated,
                                                      const std::vector<double>& measured_compute_s,
                                                      const ModelSpec& model, int64_t seq_len,
                                                      Precision precision);

/// CalibrateProfile in rounds: simulate `plan` with the profile, scale, again — until the
/// simulated compute of every calibrated type matches what was measured (parts the profile does
/// not give, like a roofline-costed head, are left as they are, so one round undershoots). The
/// returned calibrations carry the first round's measured and simulated compute and the total scale.
Result<std::vector<TypeCalibration>> CalibrateToRun(Profile* profile, const Plan& plan,
                                                    const Cluster& cluster, const ModelSpec& model,
                                                    const std::vector<double>& measured_compute_s);

/// What CalibrateCommunication found and did.
struct CommCalibration {
  double measured_comm_s = 0;    // the run's communication a step, the mean over its ranks
  double simulated_comm_s = 0;   // the simulator's for the same ranks, before
  double calibrated_comm_s = 0;  // ... and after
  double overhead_added_s = 0;   // added to every link's per-call collective overhead (may be < 0)
  int links_added = 0;           // links the profile lacked, added with the cluster's figures
  bool clamped = false;          // the overhead could not go lower (the run communicated less)
};

/// Online profiling of the links: what a collective costs inside a real step — the runtime's
/// calls an op of the schedule makes, Gloo's threads among the ranks', a host's scheduling — is not
/// what a link probe times alone. Adds one amount to every link's per-call collective overhead in
/// `*profile` (the links the profile lacks first taken from the cluster) so that the simulated
/// communication of `plan` (mean over the ranks, waits included, as the runtime counts it) equals
/// `measured_comm_s` (per rank, a step). The overhead stays >= 0 on every link (`clamped` when that
/// bound stops it). Errors: sizes that disagree, a run without communication.
Result<CommCalibration> CalibrateCommunication(Profile* profile, const Plan& plan, const Cluster& cluster,
                                               const ModelSpec& model,
                                               const std::vector<double>& measured_comm_s);

}  // namespace motley
