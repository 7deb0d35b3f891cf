#include "api/plan_inputs.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "core/toml_reader.h"
#include "plan/plan_io.h"

namespace motley {
namespace {

bool IsBuiltinName(const std::string& ref) {
  return ref.find('/') == std::string::npos && !ref.ends_with(".toml") && !ref.ends_with(".json");
}

// A reference written in a plan file: relative paths are relative to the plan's folder.
std::string Resolve(const std::string& plan_path, const std::string& ref) {
  if (IsBuiltinName(ref)) return ref;
  std::filesystem::path p(ref);
  if (p.is_absolute()) return ref;
  return (std::filesystem::path(plan_path).parent_path() / p).lexically_normal().string();
}

}  // namespace

std::string ReferenceFromPlanAt(const std::string& plan_path, const std::string& ref) {
  if (ref.empty() || IsBuiltinName(ref) || std::filesystem::path(ref).is_absolute()) return ref;
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::absolute(ref, ec);
  const std::filesystem::path folder = std::filesystem::absolute(plan_path, ec).parent_path();
  if (ec) return ref;
  const std::filesystem::path relative =
      file.lexically_normal().lexically_relative(folder.lexically_normal());
  return relative.empty() ? file.lexically_normal().string() : relative.string();
}

Result<PlanInputs> LoadPlanInputs(const std::string& plan_path, const std::string& cluster_flag,
                                  const std::string& model_flag) {
  MOTLEY_ASSIGN_OR_RETURN(Plan plan, LoadPlanFile(plan_path));
  return PlanInputsFor(std::move(plan), plan_path, cluster_flag, model_flag);
}

Result<PlanInputs> PlanInputsFor(Plan plan, const std::string& plan_path, const std::string& cluster_flag,
                                 const std::string& model_flag) {
  PlanInputs in;
  in.plan = std::move(plan);
  const std::string cluster_ref = !cluster_flag.empty() ? cluster_flag : Resolve(plan_path, in.plan.cluster);
  const std::string model_ref = !model_flag.empty() ? model_flag : Resolve(plan_path, in.plan.model);
  if (cluster_ref.empty())
    return Status::InvalidArgument(
        fmt::format("{}: the plan names no cluster; pass --cluster FILE", plan_path));
  if (model_ref.empty())
    return Status::InvalidArgument(
        fmt::format("{}: the plan names no model; pass --model NAME|FILE", plan_path));
  MOTLEY_ASSIGN_OR_RETURN(in.cluster, LoadCluster(cluster_ref));
  MOTLEY_ASSIGN_OR_RETURN(in.model, LoadModel(model_ref));
  MOTLEY_RETURN_IF_ERROR(ValidatePlan(in.plan, in.cluster, in.model).WithPrefix(plan_path + ": "));
  return in;
}

Result<Profile> LoadAnyProfile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  if (text.find("motley-profile-1") != std::string::npos) return ParseProfileJson(text, path);
  if (text.find("deepspeedllama") != std::string::npos) return ImportZorseMeasured(text, path);
  return Status::InvalidArgument(fmt::format(
      "{}: error: neither a motley profile (\"format\": \"motley-profile-1\") nor the Zorse measurements "
      "(model_latencies.json)",
      path));
}

}  // namespace motley
