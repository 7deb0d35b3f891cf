#include "runtime/train/divergence.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/train/checkpoint.h"

namespace motley {
namespace fs = std::filesystem;

std::string DivergedStep(int64_t step, double loss, double grad_norm, const std::vector<int>& ranks,
                         const std::string& in) {
  std::string what;
  if (!std::isfinite(loss)) what = fmt::format("the loss is {}", loss);
  if (!std::isfinite(grad_norm))
    what += fmt::format("{}the gradient norm is {}", what.empty() ? "" : " and ", grad_norm);
  if (what.empty()) what = "a rank's own loss or gradient norm is not finite";
  std::string where;
  if (ranks.size() == 1)
    where =
        fmt::format(" (rank {}'s own {} {} not finite)", ranks.front(), in, in == "loss" ? "was" : "were");
  if (ranks.size() > 1)
    where = fmt::format(" (ranks {}: their own {} not finite)", fmt::join(ranks, ", "),
                        in == "loss" ? "losses were" : "gradients were");
  return fmt::format("step {}: {}{}", step, what, where);
}

std::string LastGoodCheckpoint(const std::string& run_dir, const std::string& resumed_from) {
  std::error_code ec;
  for (const std::string& where : {run_dir, resumed_from}) {
    if (where.empty() || !fs::is_directory(where, ec)) continue;
    // (A folder that holds no checkpoint resolves to itself, which is not one.)
    if (Result<std::string> dir = ResolveCheckpointDir(where); dir.ok() && CheckpointStep(*dir).ok())
      return *dir;
  }
  return "";
}

bool RollsBack(const DivergenceConfig& config, const std::string& good, int64_t rollbacks) {
  return config.action == "rollback" && !good.empty() && rollbacks < config.max_rollbacks;
}

Status StopDiverged(const std::string& what, const std::string& good, const DivergenceConfig& config,
                    int64_t rollbacks) {
  std::string next;
  if (good.empty()) {
    next =
        "there is no checkpoint of this run to go back to: give [checkpoint] interval_steps so that one is "
        "kept, "
        "lower [optimizer] lr, and start again";
  } else {
    const Result<int64_t> step = CheckpointStep(good);
    next = fmt::format("the last good checkpoint is {}{}; ", good,
                       step.ok() ? fmt::format(" (step {})", *step) : std::string());
    next +=
        config.action == "rollback"
            ? fmt::format(
                  "the run rolled back {} times ([divergence] max_rollbacks) — resume from it with a lower "
                  "[optimizer] lr, or skip the data further",
                  rollbacks)
            : "resume from it with a lower [optimizer] lr (--resume), or set [divergence] action = "
              "\"rollback\" "
              "to go back and on by itself";
  }
  return Status::Infeasible(
      fmt::format("{} — no rank applied it and no checkpoint is written after it; {}", what, next));
}

TrainerState RolledBack(const DivergenceConfig& config, const TrainerState& now, const TrainerState& loaded,
                        int64_t diverged_step) {
  TrainerState s = now;
  s.step = loaded.step;
  s.updates = loaded.updates;
  s.tokens_seen = loaded.tokens_seen;
  s.loss_scale = loaded.loss_scale;
  s.loss_scale_good_steps = loaded.loss_scale_good_steps;
  s.lr_factor = now.lr_factor * config.lr_factor;
  // Step k draws the windows of step k + skip: the replayed steps take those after the diverged one's.
  if (config.skip_data) s.data_skip_steps = now.data_skip_steps + (diverged_step - loaded.step);
  s.rollbacks = now.rollbacks + 1;
  return s;
}

std::string RolledBackMessage(const std::string& what, const std::string& good, const TrainerState& s,
                              const DivergenceConfig& config) {
  return fmt::format(
      "{} — rolled back to {} (step {}); the learning rate is now {}x the schedule's{} (rollback {} of {})",
      what, good, s.step, s.lr_factor,
      config.skip_data ? fmt::format(", the data {} steps further on", s.data_skip_steps) : "", s.rollbacks,
      config.max_rollbacks);
}

nlohmann::json DivergedEvent(int64_t step, double loss, double grad_norm, const std::vector<int>& ranks,
                             const std::string& in, bool rolls_back) {
  nlohmann::json j = {{"event", "diverged"},
                      {"step", step},
                      {"loss", fmt::format("{}", loss)},  // (as text: JSON has no NaN)
                      {"grad_norm", fmt::format("{}", grad_norm)},
                      {"action", rolls_back ? "rollback" : "stop"}};
  if (!ranks.empty()) j["ranks"] = ranks, j["in"] = in;
  return j;
}

nlohmann::json RollbackEvent(int64_t step, const std::string& good, const TrainerState& s) {
  return {{"event", "rollback"},      {"step", step},
          {"to_step", s.step},        {"checkpoint", good},
          {"lr_factor", s.lr_factor}, {"data_skip_steps", s.data_skip_steps},
          {"rollbacks", s.rollbacks}};
}

}  // namespace motley
