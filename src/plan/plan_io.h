// Plans as files: TOML (for people) and JSON (for tools). Both round-trip exactly, and both are
// read by the same strict reader, so a bad plan gets the same messages either way.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "plan/plan.h"

namespace motley {

Result<Plan> ParsePlanToml(std::string_view text, const std::string& file);
Result<Plan> ParsePlanJson(std::string_view text, const std::string& file);
/// By extension: .json is JSON, anything else TOML.
Result<Plan> LoadPlanFile(const std::string& path);

std::string PlanToToml(const Plan& plan);
nlohmann::json PlanToJson(const Plan& plan);

}  // namespace motley
