// Executor's part in an outer round of islands (plan/outer_round.h): the piece of each ministage a
// rank updates, its replicas' gather, the outer state in checkpoints, and for islands of unlike shapes
// the pieces as whole fragments.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/check.h"
#include "core/model.h"
#include "plan/state_shares.h"
#include "runtime/executor/executor.h"
#include "runtime/model/tensor_parallel.h"

namespace motley {
namespace {
constexpr const char* kEmbedding = kEmbeddingWeight;
constexpr const char* kHead = kHeadWeight;
}  // namespace

namespace {

// ZeRO-0's replicas split the parameters evenly for an outer round: no padding, every value once.
StateSplit OuterSplit(const MinistageState& state, int replicas) {
  return SplitState(state.numel(), replicas, std::vector<double>(static_cast<size_t>(replicas), 1.0));
}

}  // namespace

Result<torch::Tensor> Executor::OuterPiece(int v) {
  copies_->Synchronize();  // an offloaded master is its host copy, written by the outer step
  auto it = ministages_.find(v);
  if (it == ministages_.end())
    return Status::Internal(
        fmt::format("rank {}: an outer round names ministage {}, which it does not hold", rank_, v));
  MinistageState& state = *it->second;
  if (state.sharded() && !state.shard_in_flat() && state.gathered())
    return Status::Internal(fmt::format(
        "rank {}: ministage {} keeps its full parameters gathered between steps apart from its master "
        "shard; an outer step would not reach them",
        rank_, v));
  if (!state.sharded() && !state.gathered())
    return Status::Internal(fmt::format("rank {}: ministage {} holds no parameters between steps", rank_, v));
  if (state.sharded()) return state.MasterShard();
  const Program& prog = schedule_.programs[rank_];
  const StateSplit split = OuterSplit(state, prog.dp_size);
  return state.flat().narrow(0, split.begin[prog.dp_index], split.numel[prog.dp_index]);
}

Status Executor::GatherOuterPieces(int v, Communicator& comm, CommGroup& group) {
  torch::NoGradGuard no_grad;
  MinistageState& state = *ministages_.at(v);
  if (state.sharded()) return comm.AllGather(group, state.shard(), state.flat(), state.shard_counts());
  const Program& prog = schedule_.programs[rank_];
  const StateSplit split = OuterSplit(state, prog.dp_size);
  torch::Tensor values = state.flat().narrow(0, 0, state.numel());
  return comm.AllGather(group, values.narrow(0, split.begin[prog.dp_index], split.numel[prog.dp_index]),
                        values, split.numel);
}

Status Executor::SwapOuterIntoFirstMoment(const std::map<int, torch::Tensor>& pieces, Communicator& comm,
                                          const std::map<int, CommGroup*>& replicas,
                                          std::map<int, torch::Tensor>* swapped) {
  torch::NoGradGuard no_grad;
  copies_->Synchronize();
  for (auto& [v, state] : ministages_) {
    const auto piece = pieces.find(v);
    if (piece == pieces.end())
      return Status::Internal(fmt::format("rank {}: no outer state for its ministage {}", rank_, v));
    torch::Tensor values = piece->second.detach().clone();
    // ZeRO-0: the replicas' even parts make the whole (a shard's round gathers parameters, not this).
    if (const auto it = replicas.find(v);
        !state->sharded() && it != replicas.end() && it->second != nullptr) {
      const StateSplit split = OuterSplit(*state, schedule_.programs[rank_].dp_size);
      values = torch::empty({state->numel()}, piece->second.options());
      MOTLEY_RETURN_IF_ERROR(comm.AllGather(*it->second, piece->second.contiguous(), values, split.numel));
    }
    state->SwapFirstMoment(values);
    (*swapped)[v] = std::move(values);
  }
  return Status::Ok();
}

Result<std::map<std::string, torch::Tensor>> Executor::GatherOuterState(
    const std::map<int, torch::Tensor>& pieces, Communicator& comm,
    const std::map<int, CommGroup*>& replicas) {
  std::map<int, torch::Tensor> swapped;  // by ministage: the state as a first moment, then the moment
  MOTLEY_RETURN_IF_ERROR(SwapOuterIntoFirstMoment(pieces, comm, replicas, &swapped));
  Result<FullState> full = GatherFullState();
  for (auto& [v, values] : swapped) ministages_.at(v)->SwapFirstMoment(values);  // the moments back
  if (!full.ok()) return full.status();
  return std::move(full->exp_avg);
}

Result<std::vector<StatePiece>> Executor::OwnedStateWithOuter(const std::map<int, torch::Tensor>& pieces,
                                                              Communicator& comm,
                                                              const std::map<int, CommGroup*>& replicas) {
  std::map<int, torch::Tensor> swapped;
  MOTLEY_RETURN_IF_ERROR(SwapOuterIntoFirstMoment(pieces, comm, replicas, &swapped));
  std::vector<StatePiece> outer = OwnedState();
  for (StatePiece& p : outer) p.exp_avg = p.exp_avg.clone();  // a view of the moment swapped back below
  for (auto& [v, values] : swapped) ministages_.at(v)->SwapFirstMoment(values);
  std::vector<StatePiece> out = OwnedState();
  MOTLEY_CHECK_EQ(out.size(), outer.size());
  for (size_t k = 0; k < out.size(); ++k) out[k].outer_momentum = std::move(outer[k].exp_avg);
  return out;
}

Result<torch::Tensor> Executor::OuterPieceFrom(int v, const std::map<std::string, torch::Tensor>& whole) {
  std::map<std::string, torch::Tensor> local = whole;
  if (model_->head_is_tied_copy() && local.count(kEmbedding) && !local.count(kHead))
    local[kHead] = local.at(kEmbedding);  // the head's copy has the embedding's state
  if (tp_degree_ > 1)
    for (auto& [name, t] : local)
      if (IsSplitParameter(name)) t = SliceParameter(model_->spec(), name, t, tp_index_, tp_degree_);
  const MinistageState& state = *ministages_.at(v);
  const auto [begin, count] = OuterRange(v);
  torch::Tensor out;
  if (const std::string missing = state.FlatRange(begin, count, local, &out); !missing.empty())
    return Status::InvalidArgument(fmt::format("the checkpoint has no outer state for {}", missing));
  return out;
}

std::pair<int64_t, int64_t> Executor::OuterRange(int v) const {
  const MinistageState& state = *ministages_.at(v);
  if (state.sharded()) return {state.shard_begin(), state.shard_numel()};
  const Program& prog = schedule_.programs[rank_];
  const StateSplit split = OuterSplit(state, prog.dp_size);
  return {split.begin[prog.dp_index], split.numel[prog.dp_index]};
}

std::vector<std::pair<int64_t, int64_t>> Executor::OuterFragmentRanges(int v, int fragment,
                                                                       int fragments) const {
  const auto [begin, count] = OuterRange(v);
  if (fragments <= 1) return {{0, count}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const MinistageState::NamedPart& part : ministages_.at(v)->PartsIn(begin, count)) {
    const std::string& name =
        part.name == kHead && model_->head_is_tied_copy() ? std::string(kEmbedding) : part.name;
    if (ModelPartOf(name, model_->spec().num_layers) % fragments != fragment) continue;
    if (!out.empty() && out.back().first + out.back().second == part.in_range)
      out.back().second += part.count;
    else
      out.emplace_back(part.in_range, part.count);
  }
  return out;
}

std::vector<std::string> Executor::FragmentNames(const Op& op) const {
  const std::string layer = fmt::format("model.layers.{}.", op.layer_begin);
  std::set<std::string> names;
  for (const auto& [v, params] : ministage_params_)
    for (const auto& [name, shape] : params) {
      const std::string canonical = name == kHead && model_->head_is_tied_copy() ? kEmbedding : name;
      const bool in_layers = canonical.rfind("model.layers.", 0) == 0;
      if (op.embedding ? canonical == kEmbedding
          : op.head    ? !in_layers && canonical != kEmbedding
                       : canonical.rfind(layer, 0) == 0)
        names.insert(canonical);
    }
  return {names.begin(), names.end()};
}

std::map<std::string, torch::Tensor> Executor::OuterPieceAsWhole(int v, const torch::Tensor& piece,
                                                                 const std::vector<std::string>& names) {
  torch::NoGradGuard no_grad;
  const ModelSpec& spec = model_->spec();
  const auto held = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  // This rank's values, in its slices' shapes (a tied head's copy: the embedding's holders give it).
  std::map<std::string, torch::Tensor> local;
  for (const auto& [name, full] : ministage_params_.at(v)) {
    const bool split = tp_degree_ > 1 && IsSplitParameter(name);
    if (!held(name) || (name == kHead && model_->head_is_tied_copy()) || (!split && tp_index_ != 0)) continue;
    local[name] =
        torch::zeros(split ? SliceParameterShape(spec, name, full, tp_degree_) : full, piece.options());
  }
  ministages_.at(v)->FlatRangeInto(OuterRange(v).first, piece, local);
  std::map<std::string, torch::Tensor> out;
  for (const std::string& name : names) {
    const std::vector<int64_t> shape = LlamaParameterShape(spec, name);
    torch::Tensor whole = torch::zeros(shape, piece.options());
    if (const auto it = local.find(name); it == local.end()) {
    } else if (tp_degree_ == 1 || !IsSplitParameter(name)) {
      whole.copy_(it->second);
    } else if (IsVocabParameterName(name)) {  // rows of the padded vocabulary: the real ones
      const int64_t begin = VocabBegin(spec, tp_index_, tp_degree_);
      const int64_t real = std::clamp<int64_t>(shape[0] - begin, 0, it->second.size(0));
      if (real > 0) whole.narrow(0, begin, real).copy_(it->second.narrow(0, 0, real));
    } else {
      SliceParameter(spec, name, whole, tp_index_, tp_degree_).copy_(it->second);  // a view of `whole`
    }
    out[name] = std::move(whole);
  }
  return out;
}

void Executor::OuterPieceFill(int v, const std::map<std::string, torch::Tensor>& whole,
                              torch::Tensor& piece) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> local;
  for (const auto& [name, full] : ministage_params_.at(v)) {
    const auto it = whole.find(name == kHead && model_->head_is_tied_copy() ? kEmbedding : name);
    if (it == whole.end()) continue;
    local[name] = tp_degree_ > 1 && IsSplitParameter(name)
                      ? SliceParameter(model_->spec(), name, it->second, tp_index_, tp_degree_)
                      : it->second;
  }
  ministages_.at(v)->FlatRangeFrom(OuterRange(v).first, local, piece);
}

std::vector<std::string> Executor::ParameterNames(int v) const {
  std::vector<std::string> names;
  for (const auto& [name, shape] : ministage_params_.at(v))
    names.push_back(name == kHead && model_->head_is_tied_copy() ? kEmbedding : name);
  return names;
}

}  // namespace motley
