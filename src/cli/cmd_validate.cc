// motley validate FILE...: exit 0 when every file is valid, 1 with every problem otherwise.
#include <cstdio>

#include <fmt/format.h>

#include "api/plan_inputs.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/config_file.h"
#include "core/toml_reader.h"
#include "plan/lower.h"
#include "plan/transfer_order.h"

namespace motley::cli {
namespace {

bool LooksLikePlan(const std::string& text) {
  return text.find("[[groups]]") != std::string::npos || text.find("\"groups\"") != std::string::npos;
}

// A plan is valid when it fits its model and cluster and lowers to a schedule.
Result<std::string> ValidatePlanFile(const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs in, LoadPlanInputs(file, "", ""));
  MOTLEY_ASSIGN_OR_RETURN(Schedule s, LowerPlan(in.plan, in.cluster, in.model));
  if (std::string problem = CheckTransferOrder(s); !problem.empty())
    return Status::Internal(fmt::format("{}: the plan's schedule cannot run: {}", file, problem));
  return fmt::format("plan: {} groups over {} devices, {} ops", in.plan.groups.size(), in.plan.num_devices(),
                     s.num_ops());
}

}  // namespace

int RunValidate(const std::vector<std::string>& args) {
  CLI::App app(
      "Check cluster, model and job files. Every problem is reported "
      "with file:line:column, the key and the fix.",
      "motley validate");
  std::vector<std::string> files;
  std::string kind_name;
  app.add_option("files", files, "cluster, model (.toml or Hugging Face config.json) or job files")
      ->required();
  app.add_option("--kind", kind_name, "treat every file as this kind instead of guessing from its keys")
      ->check(CLI::IsMember({"cluster", "offers", "model", "job", "plan"}));
  if (auto rc = ParseArgs(app, args)) return *rc;

  int num_invalid = 0;
  auto report = [&](const std::string& file, const Result<std::string>& summary) {
    if (summary.ok()) {
      fmt::print("ok       {}  ({})\n", file, *summary);
      return;
    }
    ++num_invalid;
    fmt::print("invalid  {}\n", file);
    std::fflush(stdout);
    fmt::print(stderr, "{}\n", summary.status().message());
  };
  for (const auto& file : files) {
    Result<std::string> text = ReadTextFile(file);
    if (text.ok() && (kind_name == "plan" || (kind_name.empty() && LooksLikePlan(*text)))) {
      report(file, ValidatePlanFile(file));
      continue;
    }
    Result<ConfigKind> kind = !text.ok()               ? Result<ConfigKind>(text.status())
                              : kind_name == "cluster" ? ConfigKind::kCluster
                              : kind_name == "model"   ? ConfigKind::kModel
                              : kind_name == "job"     ? ConfigKind::kJob
                              : kind_name == "offers"  ? ConfigKind::kOffers
                                                       : DetectConfigKind(*text, file);
    report(file, kind.ok() ? ValidateConfigText(*text, file, *kind) : Result<std::string>(kind.status()));
  }
  if (num_invalid > 0) {
    fmt::print(stderr, "{} of {} file(s) invalid\n", num_invalid, files.size());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace motley::cli
