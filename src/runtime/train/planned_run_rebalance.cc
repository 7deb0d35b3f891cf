// Live rebalancing of a planned run ([straggler_detection] rebalance; planned_run.h): every rank
// takes the same decision, rank 0 plans for the devices as measured (sim/replan.h), and at the step
// boundary every rank switches to the new plan — its new part of the state from the ranks that hold
// it, over c10d.
#include "runtime/train/planned_run.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/message_tags.h"
#include "core/shard_index.h"
#include "core/units.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/transfer_order.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/precision_dtypes.h"
#include "sim/profile.h"
#include "sim/replan.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// Rank 0's text to every rank ("" included).
Result<std::string> BroadcastText(Communicator& comm, const std::string& text) {
  torch::Tensor size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm.Broadcast(comm.world(), size, 0));
  const int64_t n = size.item<int64_t>();
  if (n == 0) return std::string();
  torch::Tensor bytes = torch::empty({n}, torch::kUInt8);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), static_cast<size_t>(n));
  MOTLEY_RETURN_IF_ERROR(comm.Broadcast(comm.world(), bytes, 0));
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(n));
}

// Every rank's text, by rank.
Result<std::vector<std::string>> AllGatherText(Communicator& comm, const std::string& text) {
  const int world = comm.world_size();
  torch::Tensor size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  torch::Tensor sizes = torch::empty({world}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), size, sizes));
  std::vector<int64_t> counts(static_cast<size_t>(world));
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += counts[r] = sizes[r].item<int64_t>();
  torch::Tensor mine = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  torch::Tensor all = torch::empty({total}, torch::kUInt8);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), mine, all, counts));
  std::vector<std::string> out;
  const char* at = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < world; ++r) {
    out.emplace_back(at, static_cast<size_t>(counts[r]));
    at += counts[r];
  }
  return out;
}

}  // namespace

// Every rank saw the same changes (the figures behind them are all-gathered), so all of them come
// here together: rank 0 plans for the devices as measured, every rank switches when it says so.
Status PlannedRun::Rebalance(const std::vector<StragglerMonitor::Change>& changes) {
  const int64_t step = state_.step;
  const StragglerDetectionConfig& config = job_.straggler_detection;
  // Against what the current plan was made for: a straggler's slowdown, a recovery's speed-up (a
  // norm measured slow), or nothing any more.
  for (const StragglerMonitor::Change& c : changes) {
    const int device = schedule_.programs[c.rank].device;
    const bool planned_slow = planned_slowdown_.count(device) > 0;
    changed_factor_[c.rank] = c.straggling != planned_slow ? c.slowdown : 1.0;
  }
  Cluster measured = job_.cluster;
  measured.measured_slowdown = planned_slowdown_;
  for (size_t r = 0; r < changed_factor_.size(); ++r) {
    const int device = schedule_.programs[r].device;
    auto it = measured.measured_slowdown.try_emplace(device, 1.0).first;
    it->second *= changed_factor_[r];
    if (std::abs(it->second - 1) < 1e-3) measured.measured_slowdown.erase(it);
  }
  std::string text, message;
  nlohmann::json event = {{"event", "rebalance"}, {"step", step}};
  if (lead_) {
    PlanRequest request = PlanRequestForJob(job_);
    request.activation_checkpointing = plan_.activation_checkpointing;
    std::optional<Profile> profile;
    std::string profile_path = options_.planned.profile_path;
    if (profile_path.empty() && !job_.plan.profile.empty())
      profile_path = fs::path(job_.plan.profile).is_absolute() || job_.file.empty()
                         ? job_.plan.profile
                         : (fs::path(job_.file).parent_path() / job_.plan.profile).string();
    if (!profile_path.empty()) {
      Result<Profile> p = LoadProfileFile(profile_path);
      if (p.ok()) profile = *p;
    }
    std::string slowdowns;
    nlohmann::json by_device = nlohmann::json::object();
    for (const auto& [device, f] : measured.measured_slowdown) {
      slowdowns += fmt::format("{}device {} {:.2f}x", slowdowns.empty() ? "" : ", ", device, f);
      by_device[std::to_string(device)] = f;
    }
    event["slowdowns"] = by_device;
    Result<Replanned> r = ReplanInPlace(plan_, measured, job_.model, profile ? &*profile : nullptr, request);
    if (!r.ok()) {
      message = fmt::format("no plan for the devices as measured ({}): {}; the run goes on with its plan",
                            slowdowns.empty() ? "as planned" : slowdowns, r.status().message());
    } else {
      event["predicted_step_s"] = r->predicted_step_s;
      event["current_step_s"] = r->current_step_s;
      if (r->predicted_step_s > r->current_step_s * (1 - config.rebalance_min_gain)) {
        message = fmt::format(
            "devices as measured ({}): a new plan ({}) would step in {} against the current plan's "
            "{}; not worth a switch ([straggler_detection] rebalance_min_gain {:.0f}%)",
            slowdowns.empty() ? "as planned" : slowdowns, r->why, FormatDuration(r->predicted_step_s),
            FormatDuration(r->current_step_s), 100 * config.rebalance_min_gain);
      } else {
        r->plan.flextp_mode = plan_.flextp_mode;
        text = PlanToToml(r->plan);
        const std::string path =
            (fs::path(job_.checkpoint.dir) / fmt::format("plan-step-{:06d}.toml", step)).string();
        MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(path, text));
        event["plan"] = path;
        message = fmt::format(
            "devices as measured ({}): switching to {} — predicted step {} (the current plan's: {}); "
            "the plan: {}",
            slowdowns.empty() ? "as planned" : slowdowns, r->why, FormatDuration(r->predicted_step_s),
            FormatDuration(r->current_step_s), path);
      }
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(text, BroadcastText(*comm_, text));
  event["switched"] = !text.empty();
  if (!text.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Plan next, ParsePlanToml(text, "the rebalanced plan"));
    const auto start = Clock::now();
    MOTLEY_RETURN_IF_ERROR(SwitchTo(next));
    event["switch_s"] = std::chrono::duration<double>(Clock::now() - start).count();
    event["schedule_hash"] = ScheduleHash(schedule_);  // the steps from here on ran this one
    planned_slowdown_ = measured.measured_slowdown;
    changed_factor_.assign(changed_factor_.size(), 1.0);
    std::vector<bool> slow;
    for (const Program& p : schedule_.programs) slow.push_back(planned_slowdown_.count(p.device) > 0);
    stragglers_->Restart(slow);
  }
  if (lead_) {
    event["message"] = message;
    MOTLEY_RETURN_IF_ERROR(metrics_.Write(event));
    observer_->OnRebalance(step, message);
  }
  return Status::Ok();
}

// The switch at a step boundary: the new plan's schedule, this rank's new part of the state from the
// ranks that hold it now (over c10d; nothing is written), then the new executor. Every rank keeps
// its device (ReplanInPlace).
Status PlannedRun::SwitchTo(const Plan& next_plan) {
  const int world = comm_->world_size(), me = comm_->rank();
  const TrainingConfig& tc = job_.training;
  MOTLEY_ASSIGN_OR_RETURN(Schedule next, LowerPlan(next_plan, job_.cluster, job_.model));
  if (std::string problem = CheckTransferOrder(next); !problem.empty())
    return Status::Internal(fmt::format("the rebalanced plan's schedule cannot run: {}", problem));
  for (int r = 0; r < world; ++r)
    if (next.programs[r].device != schedule_.programs[r].device)
      return Status::Internal(fmt::format("the rebalanced plan moves rank {} from device {} to {}", r,
                                          schedule_.programs[r].device, next.programs[r].device));
  std::map<std::string, torch::Tensor> whole[3];  // what this rank's new part holds: values, moments
  LlamaModel model(nullptr);
  {
    HostMemoryScope host;  // the state on its way is host memory, as a GPU rank stages it
    torch::NoGradGuard no_grad;
    // Parameter names from a model that holds none; then the model of this rank's new part only.
    std::vector<std::set<std::string>> needs;
    LlamaModel names(job_.model, tc.seed, std::set<std::string>{});
    for (int q = 0; q < world; ++q) needs.push_back(RankParameterNames(next, q, *names));
    model = LlamaModel(job_.model, tc.seed, needs[me], MasterDtype(tc.precision));
    model->set_precision(tc.precision);
    // Every rank's pieces, known to all: which elements of which parameter each owns now.
    std::vector<StatePiece> mine = executor_->OwnedState();
    nlohmann::json list = nlohmann::json::array();
    for (const StatePiece& p : mine)
      list.push_back({p.param, p.shape, p.tp_degree, p.tp_index, p.begin, p.values.numel()});
    MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> lists, AllGatherText(*comm_, list.dump()));
    ShardIndex index;
    std::vector<std::pair<int, size_t>> owner;  // per piece: (rank, index in its list)
    for (int r = 0; r < world; ++r) {
      const nlohmann::json theirs = nlohmann::json::parse(lists[r]);
      for (size_t i = 0; i < theirs.size(); ++i) {
        const nlohmann::json& p = theirs[i];
        index.parameters[p[0].get<std::string>()] = {p[1].get<std::vector<int64_t>>(), p[2].get<int>()};
        index.pieces.push_back({fmt::format("rank {}", r), p[0].get<std::string>(), p[3].get<int>(),
                                p[4].get<int64_t>(), p[5].get<int64_t>()});
        owner.push_back({r, i});
      }
    }
    MOTLEY_RETURN_IF_ERROR(ValidateShardIndex(index, "the state to move"));
    // Each piece to the ranks whose new part needs its parameter: receives first, then sends.
    const torch::Dtype dtype = executor_config_.master_dtype;
    std::vector<std::array<torch::Tensor, 3>> received(index.pieces.size());
    std::vector<PendingTransfer> pending;
    for (size_t i = 0; i < index.pieces.size(); ++i) {
      const ShardPiece& p = index.pieces[i];
      if (owner[i].first == me || !needs[me].count(p.param)) continue;
      for (int k = 0; k < 3; ++k) {
        received[i][k] = torch::empty({p.count}, dtype);
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer t, comm_->Recv(received[i][k], owner[i].first,
                                                               MessageTag(TagRange::kRebalance,
                                                                          3 * static_cast<int64_t>(i) + k)));
        pending.push_back(std::move(t));
      }
    }
    for (size_t i = 0; i < index.pieces.size(); ++i) {
      if (owner[i].first != me) continue;
      const StatePiece& p = mine[owner[i].second];
      const torch::Tensor parts[3] = {p.values, p.exp_avg, p.exp_avg_sq};
      for (int q = 0; q < world; ++q) {
        if (q == me || !needs[q].count(p.param)) continue;
        for (int k = 0; k < 3; ++k) {
          MOTLEY_ASSIGN_OR_RETURN(
              PendingTransfer t,
              comm_->Send(parts[k].contiguous(), q,
                          MessageTag(TagRange::kRebalance, 3 * static_cast<int64_t>(i) + k)));
          pending.push_back(std::move(t));
        }
      }
    }
    for (PendingTransfer& t : pending) MOTLEY_RETURN_IF_ERROR(t.Wait());
    // This rank's parameters, whole, from their pieces.
    std::map<std::string, std::vector<const ShardPiece*>> by_param;
    for (const ShardPiece& p : index.pieces) by_param[p.param].push_back(&p);
    for (const std::string& name : needs[me])
      for (int k = 0; k < 3; ++k) {
        auto elements = [&](const ShardPiece& p) -> Result<torch::Tensor> {
          const size_t i = static_cast<size_t>(&p - index.pieces.data());
          if (owner[i].first != me) return received[i][k];
          const StatePiece& own = mine[owner[i].second];
          return k == 0 ? own.values : k == 1 ? own.exp_avg : own.exp_avg_sq;
        };
        MOTLEY_ASSIGN_OR_RETURN(whole[k][name], AssembleParameter(job_.model, name, index.parameters.at(name),
                                                                  by_param[name], elements, dtype));
      }
    for (auto& p : model->named_parameters())
      if (auto it = whole[0].find(p.key()); it != whole[0].end()) p.value().copy_(it->second);
  }
  // The device holds one part at a time: the old one goes before the new one is built.
  executor_.reset();
  schedule_ = std::move(next);
  plan_ = next_plan;
  state_.plan_toml = PlanToToml(plan_);  // the checkpoints from here on record it (a resume takes it up)
  MOTLEY_ASSIGN_OR_RETURN(executor_,
                          Executor::Create(schedule_, job_.cluster, model, comm_.get(), executor_config_));
  return executor_->LoadMoments(whole[1], whole[2]);
}

Status PlannedRun::TakeUpResumedPlan() {
  if (options_.resume.empty()) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(options_.resume));
  MOTLEY_ASSIGN_OR_RETURN(const TrainerState saved, CheckpointTrainerState(dir));
  if (saved.plan_toml.empty()) return Status::Ok();
  MOTLEY_ASSIGN_OR_RETURN(
      Plan last, ParsePlanToml(saved.plan_toml, dir + "/trainer_state.json (the plan the run was last on)"));
  state_.plan_toml = saved.plan_toml;
  if (PlanToToml(last) == PlanToToml(plan_)) return Status::Ok();
  plan_ = std::move(last);
  resumed_plan_note_ = fmt::format(
      "resuming on the plan the run was last on — a live rebalance switched it from the one it was launched "
      "with; "
      "{} records it — not {}",
      dir, options_.planned.plan_path);
  return Status::Ok();
}

}  // namespace motley
