#include "runtime/executor.h"

#include <cstdint>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {
namespace {

// The virtual stage that owns a parameter, by its Hugging Face name.
int OwnerOf(const std::string& name, const std::vector<VirtualStage>& vstages, int num_layers) {
  static const std::regex layer(R"(^model\.layers\.(\d+)\.)");
  std::smatch m;
  int at = -1;
  if (std::regex_search(name, m, layer)) {
    at = std::stoi(m[1].str());
  } else if (name.rfind("model.embed_tokens.", 0) == 0) {
    at = 0;
  } else {
    at = num_layers - 1;  // the final norm and the LM head
  }
  for (size_t v = 0; v < vstages.size(); ++v)
    if (vstages[v].layers.begin <= at && at < vstages[v].layers.end) return static_cast<int>(v);
  return -1;
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(const Plan& plan, const Schedule& schedule, const Cluster& cluster,
                                                   LlamaModel model, Communicator* comm, const ExecutorConfig& config) {
  const int world = comm->world_size();
  if (static_cast<int>(schedule.programs.size()) != world)
    return Status::InvalidArgument(fmt::format("the plan has {} devices but {} processes were started; launch one "
                                               "process per device (motley launch --nproc {})",
                                               schedule.programs.size(), world, schedule.programs.size()));
  for (size_t g = 0; g < plan.groups.size(); ++g)
    if (plan.groups[g].tp_degree > 1) {
      if (Status s = CheckTensorParallelDegree(model->spec(), plan.groups[g].tp_degree); !s.ok())
        return Status::InvalidArgument(fmt::format("group {}: {}", g, s.message()));
      if (model->spec().tie_embeddings)
        return Status::InvalidArgument(fmt::format(
            "group {} has tp_degree = {} and the model ties its embeddings; tensor parallelism needs an untied model",
            g, plan.groups[g].tp_degree));
    }
  if (!plan.activation_checkpointing && (plan.offload_params || plan.offload_activations || plan.zero_stage == 3))
    return Status::InvalidArgument(
        "the plan offloads or shards parameters (offload_params, offload_activations or zero_stage = 3) with "
        "activation_checkpointing = false; the runtime recomputes ministages from their boundaries in that case — "
        "set activation_checkpointing = true");
  if (plan.offload_params && plan.zero_stage == 0)
    return Status::InvalidArgument("offload_params needs zero_stage >= 1 (the offloaded state is the rank's shard)");

  auto ex = std::unique_ptr<Executor>(new Executor());
  ex->plan_ = plan;
  ex->schedule_ = schedule;
  ex->cluster_ = &cluster;
  ex->model_ = model;
  ex->comm_ = comm;
  ex->config_ = config;
  ex->rank_ = comm->rank();
  const Program& prog = schedule.programs[ex->rank_];
  ex->emulation_ = DeviceEmulation(cluster, prog.device);
  ex->vstages_ = VirtualStages(plan);
  for (size_t v = 0; v < ex->vstages_.size(); ++v)
    ex->vstage_of_layer_begin_[ex->vstages_[v].layers.begin] = static_cast<int>(v);
  ex->sharded_params_ = plan.zero_stage == 3 || plan.offload_params;
  ex->copies_ = std::make_unique<CopyEngine>(config.device, config.cpu_copy_threads);

  const ModelSpec& spec = model->spec();
  if (spec.tie_embeddings && ex->vstages_.size() > 1)
    return Status::InvalidArgument(
        "the model ties its embeddings (tie_embeddings = true) and the plan splits it into several ministages; "
        "tied weights across ministages are not supported yet — use one ministage or an untied model");

  // This rank's group and position in it.
  int group = -1, first_rank = 0, dp_index = 0;
  for (size_t g = 0, r = 0; g < plan.groups.size(); ++g) {
    const int n = static_cast<int>(plan.groups[g].devices.size());
    if (ex->rank_ >= static_cast<int>(r) && ex->rank_ < static_cast<int>(r) + n) {
      group = static_cast<int>(g);
      first_rank = static_cast<int>(r);
    }
    r += n;
  }
  MOTLEY_CHECK_GE(group, 0);
  for (const EmulatedStraggler& s : config.stragglers)
    if (s.rank >= world)
      return Status::InvalidArgument(fmt::format(
          "[[emulation.stragglers]] names rank {} but the run has {} ranks (0..{}); name one of them", s.rank, world,
          world - 1));
  // Devices of a group are teams of tp_degree consecutive ranks (tensor parallelism inside a team,
  // data parallelism across teams between ranks of the same tensor-parallel index).
  const int tp = plan.groups[group].tp_degree;
  ex->tp_degree_ = tp;
  ex->tp_index_ = (ex->rank_ - first_rank) % tp;
  ex->first_rank_ = first_rank;
  dp_index = (ex->rank_ - first_rank) / tp;
  ex->dp_index_ = dp_index;
  const int dp_size = static_cast<int>(plan.groups[group].devices.size()) / tp;

  // Parameters by virtual stage; other stages' parameters are freed here.
  std::map<int, std::vector<NamedParameter>> owned;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      const int v = OwnerOf(p.key(), ex->vstages_, static_cast<int>(spec.num_layers));
      MOTLEY_CHECK_GE(v, 0);
      ex->vstage_params_[v].push_back({p.key(), p.value().sizes().vec()});
      if (ex->vstages_[v].group == group) {
        const int k = LayerWeightIndex(p.key());
        if (tp > 1 && k >= 0 && IsSplitWeight(k))  // this rank's slice of the matrix
          p.value().set_data(SliceLayerWeight(spec, k, p.value(), ex->tp_index_, tp).contiguous().clone());
        owned[v].push_back({p.key(), p.value()});
      } else {
        p.value().set_data(torch::empty({0}, p.value().options()));
      }
    }
  }
  for (auto& [v, params] : owned) {
    auto state = std::make_unique<MinistageState>(std::move(params), dp_size, dp_index, plan.zero_stage >= 1,
                                                  ex->copies_.get(), /*shard_in_flat=*/!ex->sharded_params_);
    // Offloaded between visits: the ministages the program prefetches (a group's first stays; lower.cc).
    bool prefetched = false;
    for (const Op& op : prog.ops)
      prefetched = prefetched || (op.kind == OpKind::kParamPrefetch &&
                                  ex->vstage_of_layer_begin_.at(op.layer_begin) == v);
    if (plan.offload_params && prefetched) state->Offload();
    if (ex->sharded_params_) state->ReleaseFlat();
    ex->ministages_[v] = std::move(state);
  }

  // Communication groups, created by every rank in the order the schedule names them.
  std::map<std::vector<int32_t>, CommGroup*> groups;
  for (const Collective& c : schedule.collectives) {
    if (groups.count(c.ranks)) continue;
    MOTLEY_ASSIGN_OR_RETURN(CommGroup * g, comm->NewGroup(std::vector<int>(c.ranks.begin(), c.ranks.end())));
    groups[c.ranks] = g;
  }
  for (const Collective& c : schedule.collectives) {
    CommGroup* g = groups[c.ranks];
    ex->collective_group_.push_back(g->index >= 0 ? g : nullptr);
    // This rank's team: its layers run with the team's all-reduces inside.
    if (c.tensor_parallel && g->index >= 0 && !ex->tp_region_.reduce) {
      ex->tp_region_ = MakeTensorParallelRegion(comm, g, &ex->tp_clock_);
      if (config.tensor_parallel.mode != "off") {
        FlexTpTeam::Options o;
        o.config = config.tensor_parallel;
        o.spec = spec;
        o.tp = tp;
        o.index = ex->tp_index_;
        o.comm = comm;
        o.team = g;
        o.clock = &ex->tp_clock_;
        int64_t visits = 0, backwards = 0;
        for (const Op& op : schedule.programs[ex->rank_].ops) {
          if (op.kind != OpKind::kBackward) continue;
          const LayerRange& layers = ex->vstages_[ex->vstage_of_layer_begin_.at(op.layer_begin)].layers;
          backwards += layers.end - layers.begin;
        }
        for (const auto& [v, params] : owned) visits += ex->vstages_[v].layers.end - ex->vstages_[v].layers.begin;
        o.costs = FlexTpCostsFor(spec, tp, plan.seq_len, cluster, schedule.programs[c.ranks.front()].device,
                                 schedule.programs[c.ranks.back()].device, visits, backwards);
        ex->flextp_ = std::make_unique<FlexTpTeam>(std::move(o));
        FlexTpTeam* team = ex->flextp_.get();
        ex->tp_region_.layer_work = [team](int layer, const std::vector<torch::Tensor>& w) {
          return team->Work(layer, w);
        };
      }
      ex->model_->set_tensor_parallel(&ex->tp_region_);
    }
  }

  // Microbatches: their sizes from the first stage's forwards, their place in the global batch
  // in index order (the single-process run's order).
  std::map<int, int64_t> sizes;
  for (const Program& p : schedule.programs)
    for (const Op& op : p.ops)
      if (op.kind == OpKind::kForward && op.embedding) sizes[op.microbatch] = op.sequences;
  for (const auto& [m, n] : sizes) {
    MOTLEY_CHECK_EQ(m, static_cast<int>(ex->microbatch_size_.size()));
    ex->microbatch_first_.push_back(ex->batch_sequences_);
    ex->microbatch_size_.push_back(n);
    ex->batch_sequences_ += n;
  }

  // Per op: which full parameters go after it, and how prefetches and gathers treat the shard.
  const auto& ops = prog.ops;
  ex->release_after_.assign(ops.size(), {});
  ex->prefetch_with_moments_.assign(ops.size(), false);
  ex->param_gather_drops_shard_.assign(ops.size(), false);
  ex->returns_gradients_.assign(ops.size(), false);
  auto vstage = [&](const Op& op) { return ex->vstage_of_layer_begin_.at(op.layer_begin); };
  // Whether the ministage's optimizer step comes after op i before its next prefetch: the visit
  // op i prepares ends in the update (a backward visit), so the moments come in and the shard stays.
  auto updates_before_next_prefetch = [&](size_t i) {
    for (size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].ministage < 0 || vstage(ops[j]) != vstage(ops[i])) continue;
      if (ops[j].kind == OpKind::kParamPrefetch) return false;
      if (ops[j].kind == OpKind::kOptimizerStep) return true;
    }
    return false;
  };
  // What this rank's outputs feed: a send or its own next compute. (A tensor-parallel team's
  // members all compute a stage's output, and only some of them send it on.)
  const int64_t nm = static_cast<int64_t>(ex->microbatch_size_.size()), nv = static_cast<int64_t>(ex->vstages_.size());
  for (const Op& op : ops) {
    if (op.kind == OpKind::kSend) {
      ex->consumed_.insert({op.tag / nm / nv == 1, static_cast<int>(op.tag / nm % nv), op.tag % nm});
    } else if ((op.kind == OpKind::kForward && !op.embedding) || (op.kind == OpKind::kBackward && !op.head)) {
      ex->consumed_.insert({op.kind == OpKind::kBackward, vstage(op), op.microbatch});
    }
  }
  // FlexTP returns the gradients of borrowed units once per run of a stage's backwards: after the
  // last backward before something reads the stage's gradients (a reduction, the update) or the
  // step ends. (A team's ranks run the same ops, so they meet in the same returns.)
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::kBackward) continue;
    bool returns = true;
    for (size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].ministage < 0 || vstage(ops[j]) != vstage(ops[i])) continue;
      const bool reads = ops[j].kind == OpKind::kOptimizerStep || ops[j].kind == OpKind::kReduceScatter ||
                         (ops[j].kind == OpKind::kAllReduce && !schedule.collectives[ops[j].collective].tensor_parallel);
      if (reads || ops[j].kind == OpKind::kBackward) {
        returns = reads;
        break;
      }
    }
    ex->returns_gradients_[i] = returns;
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::kParamPrefetch) ex->prefetch_with_moments_[i] = updates_before_next_prefetch(i);
    if (ops[i].kind != OpKind::kAllGather || !ex->sharded_params_) continue;
    ex->param_gather_drops_shard_[i] = plan.offload_params && !updates_before_next_prefetch(i);
    size_t last = i;
    for (size_t j = i + 1; j < ops.size(); ++j) {
      if (ops[j].ministage < 0 || vstage(ops[j]) != vstage(ops[i])) continue;
      if (ops[j].kind == OpKind::kAllGather) break;
      if (IsCompute(ops[j].kind)) last = j;
    }
    ex->release_after_[last].push_back(vstage(ops[i]));
  }
  return ex;
}

Status Executor::LoadMoments(const std::map<std::string, torch::Tensor>& exp_avg,
                             const std::map<std::string, torch::Tensor>& exp_avg_sq) {
  // With tensor parallelism this rank holds slices: so do its moments.
  std::map<std::string, torch::Tensor> m1 = exp_avg, m2 = exp_avg_sq;
  if (tp_degree_ > 1)
    for (auto* m : {&m1, &m2})
      for (auto& [name, t] : *m)
        if (const int k = LayerWeightIndex(name); k >= 0 && IsSplitWeight(k))
          t = SliceLayerWeight(model_->spec(), k, t, tp_index_, tp_degree_);
  for (auto& [v, state] : ministages_) {
    const std::string missing = state->LoadMoments(m1, m2);
    if (!missing.empty())
      return Status::InvalidArgument(fmt::format("the checkpoint has no optimizer moments for {}", missing));
  }
  return Status::Ok();
}

Result<Executor::FullState> Executor::GatherFullState() {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();  // offloaded shards and moments are read on the host below
  FullState out;
  const int64_t tag_base = 1 << 28;
  for (size_t v = 0; v < vstages_.size(); ++v) {
    const auto& names = vstage_params_.at(static_cast<int>(v));
    // The group's first rank assembles the ministage and hands it to rank 0. With tensor
    // parallelism each rank holds slices (`local` shapes) and the first team's ranks send theirs to it.
    int leader = 0;
    for (int g = 0, r = 0; g <= vstages_[v].group; ++g) {
      leader = r;
      r += static_cast<int>(plan_.groups[g].devices.size());
    }
    const int tp = plan_.groups[vstages_[v].group].tp_degree;
    int64_t numel = 0, local_numel = 0;
    std::vector<std::vector<int64_t>> local;
    for (const auto& [name, shape] : names) {
      const int k = LayerWeightIndex(name);
      local.push_back(tp > 1 && k >= 0 ? SliceShape(model_->spec(), k, shape, tp) : shape);
      numel += c10::multiply_integers(shape);
      local_numel += c10::multiply_integers(local.back());
    }
    std::vector<torch::Tensor> full(3);  // params, exp_avg, exp_avg_sq
    if (auto it = ministages_.find(static_cast<int>(v)); it != ministages_.end()) {
      MinistageState& s = *it->second;
      std::vector<torch::Tensor> parts = {s.MasterShard(), s.Moment(0), s.Moment(1)};
      CommGroup* g = nullptr;
      for (size_t c = 0; c < schedule_.collectives.size() && g == nullptr; ++c)
        if (collective_group_[c] != nullptr && !schedule_.collectives[c].tensor_parallel &&
            schedule_.collectives[c].kind != OpKind::kGradNorm &&  // over every rank, not the group
            schedule_.collectives[c].ranks.front() == leader + tp_index_)
          g = collective_group_[c];
      for (int k = 0; k < 3; ++k) {
        torch::Tensor part = parts[k].to(torch::kCPU).contiguous();
        if (s.sharded() && g != nullptr && g->size() > 1) {
          full[k] = torch::empty({s.padded_numel()}, part.options());
          MOTLEY_RETURN_IF_ERROR(comm_->AllGather(*g, part, full[k]));
        } else {
          full[k] = part;
        }
        full[k] = full[k].narrow(0, 0, local_numel).contiguous();
      }
    }
    if (tp > 1 && rank_ >= leader && rank_ < leader + tp) {  // the first team joins its slices
      const int64_t tp_tag = tag_base + (int64_t{1} << 26) + 3 * static_cast<int64_t>(v);
      if (rank_ != leader) {
        for (int k = 0; k < 3; ++k) {
          MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Send(full[k], leader, tp_tag + k));
          MOTLEY_RETURN_IF_ERROR(p.Wait());
        }
      } else {
        for (int k = 0; k < 3; ++k) {
          std::vector<torch::Tensor> slices = {full[k]};
          for (int j = 1; j < tp; ++j) {
            slices.push_back(torch::empty({local_numel}, config_.master_dtype));
            MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Recv(slices.back(), leader + j, tp_tag + k));
            MOTLEY_RETURN_IF_ERROR(p.Wait());
          }
          std::vector<torch::Tensor> joined;
          int64_t at = 0;
          for (size_t i = 0; i < names.size(); ++i) {
            const int64_t n = c10::multiply_integers(local[i]);
            std::vector<torch::Tensor> parts;
            for (const auto& s : slices) parts.push_back(s.narrow(0, at, n).view(local[i]));
            const int w = LayerWeightIndex(names[i].first);
            joined.push_back((w >= 0 ? JoinLayerWeight(model_->spec(), w, parts) : parts[0]).reshape(-1));
            at += n;
          }
          full[k] = torch::cat(joined);
        }
      }
    }
    if (rank_ == leader && rank_ != 0) {
      for (int k = 0; k < 3; ++k) {
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Send(full[k], 0, tag_base + 3 * static_cast<int64_t>(v) + k));
        MOTLEY_RETURN_IF_ERROR(p.Wait());
      }
    } else if (rank_ == 0 && leader != 0) {
      for (int k = 0; k < 3; ++k) {
        full[k] = torch::empty({numel}, config_.master_dtype);
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Recv(full[k], leader, tag_base + 3 * static_cast<int64_t>(v) + k));
        MOTLEY_RETURN_IF_ERROR(p.Wait());
      }
    }
    if (rank_ != 0) continue;
    int64_t at = 0;
    for (const auto& [name, shape] : names) {
      const int64_t n = c10::multiply_integers(shape);
      out.params[name] = full[0].narrow(0, at, n).view(shape).clone();
      out.exp_avg[name] = full[1].narrow(0, at, n).view(shape).clone();
      out.exp_avg_sq[name] = full[2].narrow(0, at, n).view(shape).clone();
      at += n;
    }
  }
  return out;
}

}  // namespace motley
