#include "runtime/executor/executor.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "core/check.h"
#include "core/message_tags.h"
#include "plan/state_shares.h"
#include "runtime/emulation/memory_ledger.h"

namespace motley {
namespace {

// The ministage that owns a parameter, by its Hugging Face name.
int OwnerOf(const std::string& name, const std::vector<ScheduleMinistage>& ministages, int num_layers) {
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
  for (size_t v = 0; v < ministages.size(); ++v)
    if (ministages[v].layer_begin <= at && at < ministages[v].layer_end) return static_cast<int>(v);
  return -1;
}

// A tied model in several ministages: the head's ministage holds its own copy of the embedding
// matrix (LlamaModelImpl::UntieHead), summed with the embedding's by the schedule
// (Collective::tied_embedding).
bool TiedCopies(const Schedule& schedule, const ModelSpec& spec) {
  return spec.tie_embeddings && schedule.ministages.size() > 1;
}
constexpr const char* kEmbedding = kEmbeddingWeight;
constexpr const char* kHead = kHeadWeight;

// The two copies are summed between ranks that hold the same vocabulary rows (plan validation says
// so too; a schedule from elsewhere is checked here).
Status ValidateTiedGroups(const Schedule& schedule, const ModelSpec& spec) {
  if (!TiedCopies(schedule, spec)) return Status::Ok();
  const ScheduleMinistage& first = schedule.ministages.front();
  const ScheduleMinistage& last = schedule.ministages.back();
  if (first.group != last.group && first.tp_degree != last.tp_degree)
    return Status::InvalidArgument(
        fmt::format("the model ties its embeddings (tie_embeddings = true) and group {} holds the embedding "
                    "with tp_degree {} "
                    "while group {} holds the head with tp_degree {}; give both groups the same tp_degree",
                    first.group, first.tp_degree, last.group, last.tp_degree));
  return Status::Ok();
}

}  // namespace

std::set<std::string> RankParameterNames(const Schedule& schedule, int rank, LlamaModelImpl& model) {
  std::set<std::string> names;
  const int group = schedule.programs.at(rank).group;
  const int num_layers = static_cast<int>(model.spec().num_layers);
  for (const auto& p : model.named_parameters()) {
    const int v = OwnerOf(p.key(), schedule.ministages, num_layers);
    if (v >= 0 && schedule.ministages[v].group == group) names.insert(p.key());
  }
  // The head's copy of a tied embedding is made from (and saved as) the embedding matrix.
  if (TiedCopies(schedule, model.spec()) && schedule.ministages.back().group == group) {
    names.insert(kEmbedding);
    names.erase(kHead);
  }
  return names;
}

namespace {

// What the runtime cannot run, said before anything is built: a plan for another number of
// processes, tensor parallelism the model does not split, offload without recomputation, tied
// groups that disagree, a straggler on a rank that does not exist.
Status CheckRunnable(const Schedule& schedule, const ModelSpec& spec, int world,
                     const ExecutorConfig& config) {
  MOTLEY_CHECK_MSG(schedule.represented_by.empty(),
                   "a schedule with one program per class of ranks is for the simulator alone");
  if (static_cast<int>(schedule.programs.size()) != world)
    return Status::InvalidArgument(
        fmt::format("the plan has {} devices but {} processes were started; launch one "
                    "process per device (motley launch --nproc {})",
                    schedule.programs.size(), world, schedule.programs.size()));
  for (const ScheduleMinistage& m : schedule.ministages)
    if (m.tp_degree > 1) {
      if (Status s = CheckTensorParallelDegree(spec, m.tp_degree); !s.ok())
        return Status::InvalidArgument(fmt::format("group {}: {}", m.group, s.message()));
    }
  bool offloads_activations = false;
  for (const Program& p : schedule.programs)
    for (const Op& op : p.ops) offloads_activations = offloads_activations || op.kind == OpKind::kActOffload;
  if (!schedule.activation_checkpointing && (schedule.sharded_params || offloads_activations))
    return Status::InvalidArgument(
        "the plan offloads or shards parameters (offload_params, offload_activations or zero_stage = 3) with "
        "activation_checkpointing = false; the runtime recomputes ministages from their boundaries in that "
        "case — "
        "set activation_checkpointing = true");
  if (Status s = ValidateTiedGroups(schedule, spec); !s.ok()) return s;
  for (const EmulatedStraggler& s : config.stragglers)
    if (s.rank >= world)
      return Status::InvalidArgument(fmt::format(
          "[[emulation.stragglers]] names rank {} but the run has {} ranks (0..{}); name one of them", s.rank,
          world, world - 1));

  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(const Schedule& schedule, const Cluster& cluster,
                                                   LlamaModel model, Communicator* comm,
                                                   const ExecutorConfig& config) {
  const ModelSpec& spec = model->spec();
  MOTLEY_RETURN_IF_ERROR(CheckRunnable(schedule, spec, comm->world_size(), config));
  std::optional<MemoryLedgerScope> ledger;  // this rank's buffers, counted by its ledger
  if (config.ledger != nullptr) ledger.emplace(config.ledger);
  auto ex = std::unique_ptr<Executor>(new Executor());
  ex->schedule_ = schedule;
  ex->cluster_ = &cluster;
  ex->model_ = model;
  ex->comm_ = comm;
  ex->config_ = config;
  ex->rank_ = comm->rank();
  const Program& prog = ex->schedule_.programs[ex->rank_];
  ex->emulation_ = DeviceEmulation(cluster, prog.device);
  ex->copies_ = std::make_unique<CopyEngine>(config.device, config.cpu_copy_threads, config.ledger);
  const auto& ministages = ex->schedule_.ministages;
  // Devices of a group are teams of tp_degree consecutive ranks (tensor parallelism inside a team,
  // data parallelism across teams between ranks of the same tensor-parallel index).
  const int group = prog.group;
  int tp = 1;
  for (const ScheduleMinistage& m : ministages)
    if (m.group == group) tp = m.tp_degree;
  ex->tp_degree_ = tp;
  ex->tp_index_ = prog.tp_index;

  // Parameters by ministage; other ministages' parameters are freed here. A tied model in several
  // ministages gives the head its own copy of the embedding matrix first (the schedule sums their
  // gradients).
  if (TiedCopies(schedule, spec)) model->UntieHead();
  std::map<int, std::vector<NamedParameter>> owned;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      const int v = OwnerOf(p.key(), ministages, static_cast<int>(spec.num_layers));
      MOTLEY_CHECK_GE(v, 0);
      const std::vector<int64_t> full = LlamaParameterShape(spec, p.key());
      ex->ministage_params_[v].push_back({p.key(), full});
      if (ministages[v].group == group) {
        // This rank's slice of the matrix (unless it was loaded as one: LoadModelWeights' WeightSlice).
        if (tp > 1 && IsSplitParameter(p.key()) && p.value().sizes().vec() == full)
          p.value().set_data(
              SliceParameter(spec, p.key(), p.value(), ex->tp_index_, tp).contiguous().clone());
        owned[v].push_back({p.key(), p.value()});
      } else {
        p.value().set_data(torch::empty({0}, p.value().options()));
      }
    }
  }
  // The state the program starts from (Program::resident): a shard not held lives on the host, full
  // parameters not held are gathered per visit.
  std::set<Buffer> resident(prog.resident.begin(), prog.resident.end());
  for (auto& [v, params] : owned) {
    auto state = std::make_unique<MinistageState>(
        std::move(params), prog.dp_size, prog.dp_index, schedule.sharded_optimizer, ex->copies_.get(),
        /*shard_in_flat=*/!schedule.sharded_params, schedule.ministages[v].state_shares,
        config.shard_source ? &config.shard_source : nullptr);
    MOTLEY_RETURN_IF_ERROR(state->source_status());
    if (schedule.sharded_optimizer && !resident.count(Buffer{BufferKind::kShard, static_cast<int16_t>(v)}))
      state->Offload();
    if (!resident.count(Buffer{BufferKind::kParams, static_cast<int16_t>(v)})) state->ReleaseFlat();
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
      ex->tp_region_ = MakeTensorParallelRegion(comm, g, &ex->tp_clock_, VocabBegin(spec, ex->tp_index_, tp),
                                                spec.vocab_size);
      if (schedule.flextp_mode != "off") {
        FlexTpTeam::Options o;
        o.config = config.tensor_parallel;  // its thresholds; the mode is the schedule's
        o.config.mode = schedule.flextp_mode;
        o.gpu = config.device.is_cuda();
        o.spec = spec;
        o.tp = tp;
        o.index = ex->tp_index_;
        o.comm = comm;
        o.team = g;
        o.clock = &ex->tp_clock_;
        o.device = config.device;
        o.dtype = config.compute_dtype.value_or(config.master_dtype);
        int64_t most_sequences = 1;
        for (int64_t n : schedule.microbatch_sequences) most_sequences = std::max(most_sequences, n);
        o.pretest_tokens = most_sequences * schedule.seq_len;
        // The migration's transfers, as FlexTpTeam makes them: each layer's weights once a step,
        // each backward that completes a ministage's gradients returns its layers' at once.
        int64_t layers = 0, returns = 0;
        for (const Op& op : prog.ops)
          if (op.kind == OpKind::kBackward && op.gradients_complete) ++returns;
        for (const auto& [v, params] : owned) layers += ministages[v].layer_end - ministages[v].layer_begin;
        o.costs =
            FlexTpCostsFor(spec, tp, schedule.seq_len, cluster, schedule.programs[c.ranks.front()].device,
                           schedule.programs[c.ranks.back()].device, layers, returns);
        ex->flextp_ = std::make_unique<FlexTpTeam>(std::move(o));
        FlexTpTeam* team = ex->flextp_.get();
        ex->tp_region_.layer_work = [team](int layer, const std::vector<torch::Tensor>& w) {
          return team->Work(layer, w);
        };
      }
      ex->model_->set_tensor_parallel(&ex->tp_region_);
    }
  }

  // Microbatches: their place in the global batch, in index order (the single-process run's order).
  for (int64_t n : schedule.microbatch_sequences) {
    ex->microbatch_first_.push_back(ex->batch_sequences_);
    ex->batch_sequences_ += n;
  }
  return ex;
}

Status Executor::LoadMoments(const std::map<std::string, torch::Tensor>& exp_avg,
                             const std::map<std::string, torch::Tensor>& exp_avg_sq) {
  // With tensor parallelism this rank holds slices: so do its moments.
  std::map<std::string, torch::Tensor> m1 = exp_avg, m2 = exp_avg_sq;
  if (model_->head_is_tied_copy())  // the head's copy has the embedding's moments (the same updates)
    for (auto* m : {&m1, &m2})
      if (m->count(kEmbedding) && !m->count(kHead)) (*m)[kHead] = m->at(kEmbedding);
  if (tp_degree_ > 1)
    for (auto* m : {&m1, &m2})
      for (auto& [name, t] : *m)
        if (IsSplitParameter(name)) t = SliceParameter(model_->spec(), name, t, tp_index_, tp_degree_);
  for (auto& [v, state] : ministages_) {
    const std::string missing = state->LoadMoments(m1, m2);
    if (!missing.empty())
      return Status::InvalidArgument(fmt::format("the checkpoint has no optimizer moments for {}", missing));
  }
  return Status::Ok();
}

std::vector<StatePiece> Executor::OwnedState() {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();  // offloaded shards and moments are read on the host below
  std::vector<StatePiece> out;
  const Program& prog = schedule_.programs[rank_];
  for (auto& [v, state] : ministages_) {
    if (!state->sharded() && prog.dp_index != 0) continue;  // a ZeRO-0 replica: the first one writes
    const auto& names = ministage_params_.at(v);
    std::map<std::string, std::vector<int64_t>> shapes(names.begin(), names.end());
    for (const MinistageState::OwnedPiece& p : state->OwnedPieces()) {
      const std::string& name = state->params()[p.param].name;
      if (name == kHead && model_->head_is_tied_copy()) continue;  // the embedding's owners write the matrix
      const bool split = tp_degree_ > 1 && IsSplitParameter(name);
      if (!split && tp_index_ != 0) continue;  // the team's copies are alike: its first rank writes
      StatePiece piece;
      piece.param = name;
      piece.shape = shapes.at(name);
      piece.tp_degree = split ? tp_degree_ : 1;
      piece.tp_index = split ? tp_index_ : 0;
      if (split && IsVocabParameterName(name) &&
          PaddedVocabSize(model_->spec(), tp_degree_) != model_->spec().vocab_size)
        piece.padded_rows = PaddedVocabSize(model_->spec(), tp_degree_);
      piece.begin = p.begin;
      piece.values = p.values.to(torch::kCPU);
      piece.exp_avg = p.exp_avg.to(torch::kCPU);
      piece.exp_avg_sq = p.exp_avg_sq.to(torch::kCPU);
      out.push_back(std::move(piece));
    }
  }
  return out;
}

Result<Executor::FullState> Executor::GatherFullState() {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();  // offloaded shards and moments are read on the host below
  FullState out;
  for (size_t v = 0; v < schedule_.ministages.size(); ++v) {
    const auto& names = ministage_params_.at(static_cast<int>(v));
    // The group's first rank assembles the ministage and hands it to rank 0. With tensor
    // parallelism each rank holds slices (`local` shapes) and the first team's ranks send theirs to it.
    const int leader = schedule_.ministages[v].first_rank;
    const int tp = schedule_.ministages[v].tp_degree;
    // Tags: per ministage, three tensors to rank 0 and three from each of the first team's ranks.
    const auto tag = [&](int from, int k) {
      return MessageTag(TagRange::kStateGather, (3 * static_cast<int64_t>(v) + k) * (tp + 1) + from);
    };
    int64_t numel = 0, local_numel = 0;
    std::vector<std::vector<int64_t>> local;
    for (const auto& [name, shape] : names) {
      local.push_back(tp > 1 ? SliceParameterShape(model_->spec(), name, shape, tp) : shape);
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
            !schedule_.collectives[c].tied_embedding &&            // over two groups
            schedule_.collectives[c].kind != OpKind::kGradNorm &&  // over every rank, not the group
            schedule_.collectives[c].ranks.front() == leader + tp_index_)
          g = collective_group_[c];
      for (int k = 0; k < 3; ++k) {
        torch::Tensor part = parts[k].to(torch::kCPU).contiguous();
        if (s.sharded() && g != nullptr && g->size() > 1) {
          full[k] = torch::empty({s.padded_numel()}, part.options());
          MOTLEY_RETURN_IF_ERROR(comm_->AllGather(*g, part, full[k], s.shard_counts()));
        } else {
          full[k] = part;
        }
        full[k] = full[k].narrow(0, 0, local_numel).contiguous();
      }
    }
    if (tp > 1 && rank_ >= leader && rank_ < leader + tp) {  // the first team joins its slices
      if (rank_ != leader) {
        for (int k = 0; k < 3; ++k) {
          MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Send(full[k], leader, tag(rank_ - leader, k)));
          MOTLEY_RETURN_IF_ERROR(p.Wait());
        }
      } else {
        for (int k = 0; k < 3; ++k) {
          std::vector<torch::Tensor> slices = {full[k]};
          for (int j = 1; j < tp; ++j) {
            slices.push_back(torch::empty({local_numel}, config_.master_dtype));
            MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Recv(slices.back(), leader + j, tag(j, k)));
            MOTLEY_RETURN_IF_ERROR(p.Wait());
          }
          std::vector<torch::Tensor> joined;
          int64_t at = 0;
          for (size_t i = 0; i < names.size(); ++i) {
            const int64_t n = c10::multiply_integers(local[i]);
            std::vector<torch::Tensor> parts;
            for (const auto& s : slices) parts.push_back(s.narrow(0, at, n).view(local[i]));
            joined.push_back(JoinParameter(model_->spec(), names[i].first, parts).reshape(-1));
            at += n;
          }
          full[k] = torch::cat(joined);
        }
      }
    }
    if (rank_ == leader && rank_ != 0) {
      for (int k = 0; k < 3; ++k) {
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Send(full[k], 0, tag(tp, k)));
        MOTLEY_RETURN_IF_ERROR(p.Wait());
      }
    } else if (rank_ == 0 && leader != 0) {
      for (int k = 0; k < 3; ++k) {
        full[k] = torch::empty({numel}, config_.master_dtype);
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm_->Recv(full[k], leader, tag(tp, k)));
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
  if (model_->head_is_tied_copy())  // the head's copy equals the embedding: the model has one matrix
    for (auto* m : {&out.params, &out.exp_avg, &out.exp_avg_sq}) m->erase(kHead);
  return out;
}

}  // namespace motley
