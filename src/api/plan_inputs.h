// What `schedule` and `simulate` need: a plan and the cluster and model it runs on (named in the
// plan or given on the command line), and optionally a profile.
#pragma once

#include <optional>
#include <string>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/plan.h"
#include "sim/profile.h"

namespace motley {

struct PlanInputs {
  Plan plan;
  Cluster cluster;
  ModelSpec model;
};

/// Loads the plan, then the cluster and model: the flags when given, else the plan's own `cluster`
/// and `model` (paths relative to the plan file). Validates the plan against them.
/// A cluster or model reference (a built-in name or a file path as the user gave it, relative to
/// the working folder) as a plan file written to `plan_path` names it: file paths relative to the
/// plan's folder, as LoadPlanInputs reads them back.
std::string ReferenceFromPlanAt(const std::string& plan_path, const std::string& ref);

Result<PlanInputs> LoadPlanInputs(const std::string& plan_path, const std::string& cluster_flag,
                                  const std::string& model_flag);
/// The same for a plan already read (`plan_path`: where its references are relative to, and the
/// name its errors carry).
Result<PlanInputs> PlanInputsFor(Plan plan, const std::string& plan_path, const std::string& cluster_flag,
                                 const std::string& model_flag);

/// A motley profile, or the Zorse authors' model_latencies.json (imported on the fly).
Result<Profile> LoadAnyProfile(const std::string& path);

}  // namespace motley
