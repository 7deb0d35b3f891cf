// CostModel: how long each op of a schedule takes on its device, from the profile when it has the
// device type and from the analytic roofline otherwise (cost_compute.h); links by alpha-beta.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "cost/comm_cost.h"
#include "plan/planner_costs.h"
#include "plan/schedule.h"
#include "sim/cost_compute.h"
#include "sim/profile.h"

namespace motley {

struct CostModelConfig {
  RooflineConfig roofline;  // for device types the profile does not cover
};

class CostModel : public PlannerCosts {
 public:
  /// REQUIRES: `cluster`, `model` and `profile` (may be null) outlive the cost model.
  CostModel(const Cluster& cluster, const ModelSpec& model, const Profile* profile, int64_t seq_len,
            Precision precision, bool activation_checkpointing, CostModelConfig config = {});
  CostModel(const CostModel&) = delete;  // network_ calls back into this one
  CostModel& operator=(const CostModel&) = delete;

  /// Compute ops (forward, backward, optimizer step) on `device`, including its emulated slowdown.
  double ComputeS(int device, const Op& op) const;
  /// One decoder layer on `sequences` sequences, without the slowdown (for planners and reports).
  double LayerForwardS(int device, double sequences) const override;
  double LayerBackwardS(int device, double sequences) const override;
  double Slowdown(int device) const override;
  /// Host <-> device copy over the device's host link.
  double CopyS(int device, double bytes) const;
  /// Point-to-point transfer over the link between two devices.
  double TransferS(int from, int to, double bytes) const override;
  /// A collective over `devices` (the group's order) by the algorithm of the library that runs it
  /// (cost/comm_cost.h): Gloo on emulated devices or where the profile's links were measured on
  /// Gloo, else NCCL.
  double CollectiveS(OpKind kind, const std::vector<int>& devices, double bytes) const override;
  /// The profile's measured limit (sim/profile.h MeasuredLimits) when it was measured for this
  /// model, degree and the device's memory.
  std::optional<int64_t> MeasuredMaxMicrobatch(int device, int zero_stage, int dp_degree) const override;
  /// Dense peak FLOP/s of a device in the training precision.
  double PeakFlops(int device) const;
  /// Whether a device's compute times come from the profile ("profile") or the roofline.
  std::string ComputeSource(int device) const;
  const Cluster& cluster() const { return cluster_; }
  const ModelSpec& model() const { return model_; }
  /// The profile's entry for a device's type, this model's shape, sequence length and precision;
  /// null without one.
  const ProfileEntry* Entry(int device) const;

 private:
  /// The cluster's link, replaced by the profile's measurement between the two nodes if it has one.
  Link LinkBetween(int a, int b) const;
  Link DerivedLinkBetween(int a, int b) const;  // the same, found afresh

  const Cluster& cluster_;
  const ModelSpec& model_;
  const Profile* profile_;
  int64_t seq_len_;
  Precision precision_;
  bool recompute_;
  CostModelConfig config_;
  std::vector<const ProfileEntry*> entry_by_device_;
  // Per device, found once (the planner asks for them in every op it costs): a decoder layer's
  // forward of one sequence on the roofline, and the peak at the model's precision.
  std::vector<double> roofline_layer_forward_s_;
  std::vector<double> peak_flops_;
  std::map<std::pair<int, int>, const ProfileLink*> measured_links_;  // (node, node), lower first
  Network network_;  // the links above, each node's network card, the collectives' library
  // Between two devices of a cluster without emulated ones the link depends only on their nodes:
  // found once per pair of nodes (the collectives' costs ask for every pair of ring neighbours).
  // Empty: found each time (emulated devices, or more than kMaxCachedNodes nodes).
  static constexpr size_t kMaxCachedNodes = 256;
  std::vector<Link> node_links_;  // [node a * nodes + node b]
};

}  // namespace motley
