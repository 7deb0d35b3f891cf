// Lowering: the set-up, sizes and emission helpers, and the run (lower.h; lowerer.h for the parts).
#include "plan/lower.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "cost/state_bytes.h"
#include "plan/lowerer.h"
#include "plan/state_shares.h"

namespace motley::lowering {

Status Lowerer::Setup() {
  MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan_, cluster_, model_));
  const bool interleaved = plan_.schedule == PipelineSchedule::kInterleaved;
  policy_.data_parallel = !plan_.is_pipeline() && !interleaved;
  policy_.offload_params = plan_.offload_params;
  policy_.gather_per_microbatch = policy_.data_parallel && plan_.zero_stage == 3;
  policy_.reduce_per_microbatch = policy_.data_parallel && plan_.zero_stage >= 2;
  const bool sharded_params = plan_.zero_stage == 3 || plan_.offload_params;
  policy_.gather_per_visit =
      !policy_.data_parallel && sharded_params && plan_.schedule != PipelineSchedule::k1F1B;
  policy_.gather_once = !policy_.data_parallel && sharded_params && plan_.schedule == PipelineSchedule::k1F1B;

  const StateBytesPerParam state = StateBytes(plan_.precision);
  param_bytes_ = state.params;
  grad_bytes_ = state.grads;
  opt_bytes_ = state.optimizer;
  act_bytes_ = BytesPerElement(plan_.precision);

  ministages_ = MinistagesByLayer(plan_);
  num_ministages_ = static_cast<int>(ministages_.size());
  MOTLEY_CHECK_LE(num_ministages_, static_cast<int>(std::numeric_limits<int16_t>::max()));  // Buffer, Op
  for (const GroupPlan& g : plan_.groups)
    MOTLEY_CHECK_LE(g.tp_degree, static_cast<int>(std::numeric_limits<int16_t>::max()));  // Op::tp_degree

  // Ranks in plan order.
  group_ranks_.assign(plan_.groups.size(), {});
  dp_ranks_.assign(plan_.groups.size(), {});
  state_shares_.clear();
  for (const GroupPlan& g : plan_.groups) state_shares_.push_back(ReplicaStateShares(g));
  std::map<int, int> rank_of_device;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    dp_ranks_[g].assign(plan_.groups[g].tp_degree, {});
    for (size_t i = 0; i < plan_.groups[g].devices.size(); ++i) {
      const DevicePlan& d = plan_.groups[g].devices[i];
      int rank = static_cast<int>(s_.programs.size());
      rank_of_device[d.device] = rank;
      group_ranks_[g].push_back(rank);
      dp_ranks_[g][i % plan_.groups[g].tp_degree].push_back(rank);
      group_of_rank_.push_back(static_cast<int>(g));
      Program p;
      p.rank = rank;
      p.device = d.device;
      // Roughly the ops it will hold (per microbatch and ministage: up to two computes, their
      // transfers and copies; its collectives), so that the planner's many small lowerings do not
      // grow vectors op by op; no more than 4,096 (a large schedule's estimate, twice what it
      // holds, would stay reserved: its vectors grow by doubling instead).
      p.ops.reserve(std::min<size_t>(
          plan_.groups[g].ministages.size() * static_cast<size_t>(8 * d.num_microbatches + 6) + 16, 4096));
      s_.programs.push_back(std::move(p));
    }
  }
  backward_ops_.assign(s_.programs.size(), {});

  // Microbatches: global ones in a pipeline; in data parallelism each device's own, numbered by
  // (local index, rank) so that devices advance in step.
  routing_rank_.assign(plan_.groups.size(), {});
  if (plan_.is_pipeline() || !policy_.data_parallel) {
    num_mb_ = plan_.groups[0].num_microbatches();
    const int64_t mbs = plan_.groups[0].devices[0].microbatch_size;
    if (!plan_.is_pipeline()) {
      // One interleaved group: its devices' own microbatches, each of its own size.
      for (size_t i = 0; i < plan_.groups[0].devices.size(); ++i) {
        if (!plan_.groups[0].is_tp_leader(i)) continue;
        const auto& d = plan_.groups[0].devices[i];
        for (int64_t k = 0; k < d.num_microbatches; ++k) {
          sequences_.push_back(d.microbatch_size_at(k));
          routing_rank_[0].push_back(group_ranks_[0][i]);
          local_index_.push_back(static_cast<int>(k));
        }
      }
    } else {
      sequences_.assign(num_mb_, mbs);
      for (size_t g = 0; g < plan_.groups.size(); ++g) {
        std::vector<int> routing =
            plan_.groups[g].routing.empty() ? BlockRouting(plan_.groups[g]) : plan_.groups[g].routing;
        for (int dev : routing) routing_rank_[g].push_back(rank_of_device[dev]);
      }
    }
  } else {
    const auto& devs = plan_.groups[0].devices;
    int64_t max_n = 0;
    for (const auto& d : devs) max_n = std::max(max_n, d.num_microbatches);
    for (int64_t k = 0; k < max_n; ++k) {
      for (size_t i = 0; i < devs.size(); ++i) {
        if (!plan_.groups[0].is_tp_leader(i) || k >= devs[i].num_microbatches) continue;
        sequences_.push_back(devs[i].microbatch_size_at(k));
        routing_rank_[0].push_back(group_ranks_[0][i]);
        local_index_.push_back(static_cast<int>(k));
      }
    }
    num_mb_ = static_cast<int64_t>(sequences_.size());
  }
  const size_t ranks = s_.programs.size(), ministages = static_cast<size_t>(num_ministages_);
  int max_tp = 1;
  for (const GroupPlan& g : plan_.groups) max_tp = std::max(max_tp, g.tp_degree);
  gather_op_.Reset(ranks, ministages, -1);
  last_compute_.Reset(ranks, ministages, -1);
  grads_allocated_.Reset(ranks, ministages, false);
  reductions_.Reset(ranks, ministages, 0);
  last_reduce_.Reset(ranks, ministages, -1);
  forward_op_.Reset(ministages * static_cast<size_t>(num_mb_), max_tp, -1);
  act_offload_op_.Reset(ministages * static_cast<size_t>(num_mb_), max_tp, -1);
  pending_tp_allreduce_.assign(ranks, -1);
  reduce_ops_.assign(ranks, {});
  if (!options_.device_class.empty() && plan_.groups.size() == 1 && Tp(0) == 1) PredictAlikeRanks();
  return Status::Ok();
}

void Lowerer::PredictAlikeRanks() {
  const std::vector<int>& ranks = group_ranks_[0];
  // Each rank's microbatches by local index: (index, sequences).
  std::vector<std::vector<std::pair<int, int64_t>>> microbatches(s_.programs.size());
  for (int64_t m = 0; m < num_mb_; ++m)
    microbatches[static_cast<size_t>(RankOf(0, m))].emplace_back(local_index_[m], sequences_[m]);
  using Key = std::tuple<int64_t, double, std::vector<std::pair<int, int64_t>>>;
  std::map<Key, int32_t> first;
  stands_for_.assign(s_.programs.size(), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto r = static_cast<size_t>(ranks[i]);
    Key key{options_.device_class.at(static_cast<size_t>(s_.programs[r].device)),
            state_shares_[0].empty() ? 0.0 : state_shares_[0][i], std::move(microbatches[r])};
    stands_for_[r] = first.try_emplace(std::move(key), static_cast<int32_t>(r)).first->second;
    // A dropped rank's ops go to one scratch op (Emit), not to a vector reserved for them all.
    if (Dropped(static_cast<int>(r))) s_.programs[r].ops = std::vector<Op>(1);
  }
}

double Lowerer::StageParams(int v) const {
  const LayerRange& r = ministages_[v].layers;
  double p = static_cast<double>(r.size()) * ParamsPerLayer(model_);
  if (r.begin == 0) p += EmbeddingParams(model_);
  if (r.end == model_.num_layers) p += HeadParams(model_);
  if (TiedCopies() && v == num_ministages_ - 1) p += EmbeddingParams(model_);  // the head's copy
  return p;
}

double Lowerer::RankParams(int v) const {
  const int tp = Tp(ministages_[v].group);
  if (tp == 1) return StageParams(v);
  const double norms = 2.0 * static_cast<double>(model_.hidden_size);  // a layer's two RMSNorm weights
  const LayerRange& r = ministages_[v].layers;
  double p = static_cast<double>(r.size()) * (norms + (ParamsPerLayer(model_) - norms) / tp);
  if (r.begin == 0) p += EmbeddingParamsPerRank(model_, tp);  // its vocabulary rows
  if (r.end == model_.num_layers) p += HeadParamsPerRank(model_, tp);
  if (TiedCopies() && v == num_ministages_ - 1) p += EmbeddingParamsPerRank(model_, tp);  // the head's copy
  return p;
}

double Lowerer::ForwardFlops(int v, int64_t m) const {
  const LayerRange& r = ministages_[v].layers;
  double per_token = r.size() * LayerForwardFlopsPerToken(model_, plan_.seq_len);
  if (r.end == model_.num_layers) per_token += HeadForwardFlopsPerToken(model_);
  return per_token * Tokens(m);
}

double Lowerer::BackwardFlops(int v, int64_t m) const {
  double flops = 2 * ForwardFlops(v, m);
  if (plan_.activation_checkpointing)
    flops += ministages_[v].layers.size() * LayerForwardFlopsPerToken(model_, plan_.seq_len) * Tokens(m);
  return flops;
}

double Lowerer::SavedExtra(int v, int64_t m) const {
  const int n = ministages_[v].layers.size();
  // Checkpointing keeps each layer's input (the first is the stage's input) and the head's.
  const bool head = ministages_[v].layers.end == model_.num_layers;
  if (plan_.activation_checkpointing) return (n - 1 + (head ? 1 : 0)) * Act(m);
  // Without, every layer's activations and the loss's softmax.
  const int tp = Tp(ministages_[v].group);
  return (n * LayerActivationBytesPerToken(model_, plan_.seq_len, plan_.precision, false, tp) +
          (head ? LossSavedBytesPerToken(model_, plan_.precision, tp) : 0)) *
         Tokens(m);
}

double Lowerer::WorkForward(int v, int64_t m) const {
  // A tensor-parallel rank holds its share of a layer's activations (model.h) and its columns of
  // the logits (the vocabulary split).
  const int tp = Tp(ministages_[v].group);
  // Checkpointed, a layer keeps nothing: its working set while it runs (model.h). Without, what
  // each layer keeps is counted as the task's output.
  double work =
      plan_.activation_checkpointing
          ? LayerForwardPeakBytesPerToken(model_, plan_.seq_len, plan_.precision, false, tp) * Tokens(m)
          : 0;
  // The head: its columns of the logits in the compute precision and the loss's master-precision
  // copy, which a forward that keeps activations keeps as its softmax (SavedExtra).
  if (ministages_[v].layers.end == model_.num_layers) {
    const double padded =
        static_cast<double>(PaddedVocabSize(model_, tp)) / static_cast<double>(model_.vocab_size);
    work += Tokens(m) * LogitsBytesPerToken(model_, plan_.precision) * padded / tp;
    if (!plan_.activation_checkpointing)
      work -= Tokens(m) * LossSavedBytesPerToken(model_, plan_.precision, tp);
  }
  return work;
}

double Lowerer::WorkBackward(int v, int64_t m) const {
  const int tp = Tp(ministages_[v].group);
  const PlacedMinistage& ms = ministages_[v];
  const bool head = ms.layers.end == model_.num_layers;
  // With checkpointing one piece at a time (a layer, or the head), the larger counts (model.h).
  if (plan_.activation_checkpointing)
    return CheckpointedBackwardBytes(model_, plan_.seq_len, plan_.precision, Tokens(m), head, tp);
  // Without, autograd runs through the whole ministage and returns all its weights' gradients
  // together before they are added into the ministage's; counted with the head's working set as
  // well (not measured apart).
  const double layer_params = static_cast<double>(ParamsPerLayer(model_)) / tp;
  const double piece_params = static_cast<double>(ms.layers.size()) * layer_params +
                              (head ? HeadParamsPerRank(model_, tp) : 0) +
                              (head && TiedCopies() ? EmbeddingParamsPerRank(model_, tp) : 0);
  double work = LayerBackwardBytesPerToken(model_, plan_.seq_len, plan_.precision, false, tp) * Tokens(m);
  work += piece_params * StateBytes(plan_.precision).grads;
  if (head) work += Tokens(m) * HeadBackwardExtraBytesPerToken(model_, plan_.precision, tp);
  return work;
}

Op Lowerer::StageOp(OpKind kind, Stream stream, int v) const {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.ministage = v;
  op.layer_begin = ministages_[v].layers.begin;
  op.layer_end = ministages_[v].layers.end;
  return op;
}

int Lowerer::Emit(int rank, Op&& op) {
  auto& ops = s_.programs[rank].ops;
  if (Dropped(rank)) {  // its program will be another's (PredictAlikeRanks): the op goes
    ops[0] = std::move(op);
    return 0;
  }
  // Every rank's vector grows at once while the step is emitted, and their spare room at the end
  // is the lowering's peak: a full one grows to what it will hold at the end by the share of the
  // step emitted so far (each rank's tasks are spread over the global order), and a tenth more;
  // before a fifth of the step, or past that guess, by half again.
  if (ops.size() == ops.capacity()) {
    size_t room = ops.capacity() + ops.capacity() / 2 + 16;
    if (emitted_share_ >= 0.2) {
      const auto expected = static_cast<size_t>(static_cast<double>(ops.size()) / emitted_share_ * 1.1) + 16;
      if (expected > ops.size() + ops.size() / 16) room = expected;
    }
    ops.reserve(room);
  }
  ops.push_back(std::move(op));
  return static_cast<int>(ops.size()) - 1;
}

int Lowerer::NewCollective(OpKind kind, const std::vector<int>& ranks, double bytes) {
  Collective c;
  c.kind = kind;
  c.ranks = ranks;
  c.bytes = bytes;
  s_.collectives.push_back(std::move(c));
  return static_cast<int>(s_.collectives.size()) - 1;
}

// A data-parallel collective over group g: one per tensor-parallel index (each over the ranks
// holding the same slice of the matrices), `bytes` being one rank's full payload. Returns one op
// index per rank of the group, in group_ranks_ order.
std::vector<int> Lowerer::EmitCollective(OpKind kind, int g, int v, double bytes) {
  std::vector<int> collectives;  // one a tensor-parallel index
  std::map<int, int> op_of_rank;
  for (const auto& ranks : dp_ranks_[g])
    for (int r : ranks) op_of_rank[r] = EmitCollectiveOnRank(kind, g, v, bytes, r, &collectives);
  std::vector<int> out;
  for (int r : group_ranks_[g]) out.push_back(op_of_rank[r]);
  return out;
}

int Lowerer::EmitCollectiveOnRank(OpKind kind, int g, int v, double bytes, int r,
                                  std::vector<int>* collectives) {
  const size_t tp_index = static_cast<size_t>((r - group_ranks_[g].front()) % Tp(g));
  collectives->resize(dp_ranks_[g].size(), -1);
  int& c = (*collectives)[tp_index];
  if (c < 0) {
    c = NewCollective(kind, dp_ranks_[g][tp_index], bytes);
    if (kind == OpKind::kAllGather || kind == OpKind::kReduceScatter)
      s_.collectives[c].uneven_factor = UnevenCollectiveFactor(state_shares_[g]);
  }
  Op op = StageOp(kind, Stream::kComm, v);
  op.embedding = ministages_[v].layers.begin == 0;
  op.head = ministages_[v].layers.end == model_.num_layers;
  op.bytes = bytes;
  op.collective = c;
  return Emit(r, std::move(op));
}

Result<Schedule> Lowerer::Run() {
  MOTLEY_RETURN_IF_ERROR(Setup());
  const int num_groups = static_cast<int>(plan_.groups.size());

  // Static memory per rank.
  for (int g = 0; g < num_groups; ++g) {
    for (int r : group_ranks_[g]) {
      double device = 0, host = 0;
      for (int v = 0; v < num_ministages_; ++v) {
        if (ministages_[v].group != g) continue;
        // With offload the resident ministage keeps its shard and moments; full parameters per visit.
        const StatePlacement placement = !policy_.offload_params ? StatePlacement::kDevice
                                         : Resident(v)           ? StatePlacement::kResidentShard
                                                                 : StatePlacement::kHost;
        const RankStateBytes state =
            ZeroStateBytes(RankParams(v), ShardDivisor(g, r), plan_.zero_stage, plan_.precision, placement);
        device += state.device;
        host += state.host;
      }
      s_.programs[r].static_device_bytes = device;
      s_.programs[r].static_host_bytes = host;
    }
  }

  if (policy_.data_parallel) {
    EmitDataParallel();
  } else {
    EmitPipeline();
  }
  if (options_.stop_after_emission && options_.stop_after_emission(s_)) {
    if (options_.stopped != nullptr) *options_.stopped = true;
    return Schedule{};
  }

  std::vector<double> rank_flops(s_.programs.size(), 0);
  for (const auto& p : s_.programs)
    for (const auto& op : p.ops)
      if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward) rank_flops[p.rank] += op.flops;
  for (const auto& p : s_.programs)
    s_.hardware_flops_per_step += rank_flops[Dropped(p.rank) ? stands_for_[p.rank] : p.rank];
  if (!options_.device_class.empty()) {
    MOTLEY_CHECK_MSG(!check_, "a schedule with one program per class of ranks is for the simulator alone");
    KeepOneProgramPerClass();
  }
  // Clipping needs the global norm before any update; loss scaling needs to know that no rank's
  // gradients overflowed — the same collective answers both (RunPasses holds the updates for it).
  RunPasses();
  s_.loss_scaling = plan_.loss_scaled();
  DescribeState();

  s_.seq_len = plan_.seq_len;
  s_.global_batch_tokens = plan_.global_batch_tokens();
  s_.model_flops_per_step = TrainFlopsPerToken(model_, plan_.seq_len, false) * plan_.global_batch_tokens();
  if (check_) {
    std::string problem = CheckSchedule(s_);
    MOTLEY_CHECK_MSG(problem.empty(), problem);
  }
  // The room left over in a large program's vector goes (moving its ops once, a program at a time;
  // a few ops' room is not worth the move).
  for (Program& p : s_.programs)
    if (p.ops.capacity() - p.ops.size() >= 256) p.ops.shrink_to_fit();
  return std::move(s_);
}

}  // namespace motley::lowering

namespace motley {

Result<Schedule> LowerPlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model,
                           const LowerOptions& options) {
  return lowering::Lowerer(plan, cluster, model, options).Run();
}

}  // namespace motley
