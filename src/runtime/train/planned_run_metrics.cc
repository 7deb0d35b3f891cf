// A planned run's metrics line for each step (its lead rank's): the loss, the learning rate, the
// throughput and every rank's times. A live island's rank 0 that does not lead keeps its last lines
// (PlannedRunOptions::keep_unlogged_steps): when the first island is lost and this island takes the
// lead (LeadOutputs), the steps it trained since the lost lead's last line go into the run's metrics.
#include "runtime/train/planned_run.h"

#include <algorithm>

#include "core/metrics_file.h"

namespace motley {

Status PlannedRun::LogStep(const StepMetrics& m, const std::vector<RankStepTimes>& ranks) {
  if (!lead_ && (comm_->rank() != 0 || options_.planned.keep_unlogged_steps <= 0)) return Status::Ok();
  nlohmann::json per_rank = nlohmann::json::array(), straggling = nlohmann::json::array();
  for (const auto& r : ranks) {
    if (stragglers_->straggling(r.rank))
      straggling.push_back({{"rank", r.rank}, {"slowdown", stragglers_->slowdown(r.rank)}});
    per_rank.push_back({{"rank", r.rank},
                        {"slowdown", stragglers_->slowdown(r.rank)},
                        {"compute_s", r.compute_s},
                        {"comm_s", r.comm_s},
                        {"copy_s", r.copy_s},
                        {"idle_s", r.idle_s},
                        {"late_s", r.late_s},
                        {"bytes_sent", r.bytes_sent},
                        {"peak_memory_bytes", r.peak_memory_bytes}});
    if (m.flextp)  // what FlexTP's balance had this rank do, and the compute its cost model expected
      per_rank.back()["flextp"] = {
          {"predicted_compute_s", r.flextp.predicted_s},  {"prune_ratio", r.flextp.prune_ratio},
          {"units_given", r.flextp.units_given},          {"heads_given", r.flextp.heads_given},
          {"units_received", r.flextp.units_received},    {"heads_received", r.flextp.heads_received},
          {"lend_projections", r.flextp.lend_projections}};
  }
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"lr", m.lr},
                         {"tokens_per_s", m.tokens_per_s},
                         {"grad_norm", m.grad_norm},
                         {"step_time_s", m.step_time_s},
                         {"pruned_fraction", m.pruned_fraction},
                         {"migrated_units", m.migrated_units},
                         {"stragglers", straggling},
                         {"ranks", per_rank}};
  if (job_.training.loss_scaling) {
    line["loss_scale"] = m.loss_scale;
    line["skipped"] = m.skipped;
  }
  if (lead_) return metrics_.Write(line);
  unlogged_.push_back(std::move(line));
  if (static_cast<int64_t>(unlogged_.size()) > options_.planned.keep_unlogged_steps) unlogged_.pop_front();
  return Status::Ok();
}

Status PlannedRun::LogUnlogged(const std::string& metrics_path) {
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<MetricsLine> lines, ReadMetricsFile(metrics_path));
  int64_t last = -1;  // the last step the file has a line of (the lost lead's)
  for (const MetricsLine& l : lines)
    if (l.event.empty() && l.step) last = std::max(last, *l.step);
  for (const nlohmann::json& line : unlogged_)
    if (line["step"].get<int64_t>() > last) MOTLEY_RETURN_IF_ERROR(metrics_.Write(line));
  unlogged_.clear();
  return Status::Ok();
}

}  // namespace motley
