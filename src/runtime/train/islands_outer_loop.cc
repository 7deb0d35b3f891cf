#include "runtime/train/islands_outer_loop.h"

#include <algorithm>

#include "core/model.h"
#include "runtime/islands/island_exchange.h"
#include "runtime/train/trainer.h"

namespace motley::trainer_parts {

int64_t IslandFragmentOf(const std::string& name, int64_t num_layers, int64_t fragments) {
  return ModelPartOf(name, num_layers) % fragments;
}

IslandsOuterLoop::IslandsOuterLoop(const JobSpec& job, std::vector<Replica>& replicas,
                                   const std::vector<torch::Tensor>& momentum, int64_t steps)
    : job_(job) {
  const int64_t count = job.islands.fragments;
  std::vector<std::vector<size_t>> shards(static_cast<size_t>(count));
  const std::vector<ParamShard>& first = replicas[0].shards;
  for (size_t s = 0; s < first.size(); ++s)
    shards[static_cast<size_t>(IslandFragmentOf(first[s].name, job.model.num_layers, count))].push_back(s);
  for (auto& which : shards) {
    std::vector<torch::Tensor> pieces, resumed;
    for (size_t s : which) {
      pieces.push_back(first[s].param);
      if (s < momentum.size() && momentum[s].defined()) resumed.push_back(momentum[s]);
    }
    if (resumed.size() != pieces.size()) resumed.clear();  // none yet (a checkpoint before any round)
    Fragment f{which, OuterOptimizer(job.islands.outer, pieces), std::nullopt};
    f.outer.Restore(resumed, steps);
    fragments_.push_back(std::move(f));
  }
  for (Replica& r : replicas) r.sequences_since.assign(static_cast<size_t>(count), 0);
}

// Fragment k's islands' pseudo-gradients as they arrive over the link, their mean weighted by the
// tokens each island trained on since the fragment's last round; those counts start again.
std::vector<torch::Tensor> IslandsOuterLoop::RoundMean(Fragment& f, size_t k, std::vector<Replica>& replicas,
                                                       double* worst) const {
  torch::NoGradGuard no_grad;
  const std::string& compression = f.outer.config().compression;
  double error = 0, total = 0;
  for (const Replica& r : replicas) total += static_cast<double>(r.sequences_since[k]);
  std::vector<torch::Tensor> mean = AsArrived(f.outer.PseudoGradients(), compression, &error);
  for (torch::Tensor& m : mean) m = m * (static_cast<double>(replicas[0].sequences_since[k]) / total);
  *worst = error;
  for (size_t i = 1; i < replicas.size(); ++i) {
    std::vector<torch::Tensor> delta;
    for (size_t j = 0; j < f.shards.size(); ++j)
      delta.push_back(f.outer.anchor()[j] - replicas[i].shards[f.shards[j]].param.detach());
    const std::vector<torch::Tensor> arrived = AsArrived(delta, compression, &error);
    *worst = std::max(*worst, error);
    for (size_t j = 0; j < mean.size(); ++j)
      mean[j] = mean[j] + arrived[j] * (static_cast<double>(replicas[i].sequences_since[k]) / total);
  }
  for (Replica& r : replicas) r.sequences_since[k] = 0;
  return mean;
}

// A round taken at once: the outer step on the mean (replica 0's parameters are the pieces), every
// other replica set to the new anchor. Returns the largest compression error.
double IslandsOuterLoop::TakeRound(Fragment& f, size_t k, std::vector<Replica>& replicas) const {
  torch::NoGradGuard no_grad;
  double worst = 0;
  f.outer.Step(RoundMean(f, k, replicas, &worst));
  for (size_t i = 1; i < replicas.size(); ++i)
    for (size_t s : f.shards)
      replicas[i].shards[s].param.detach().copy_(replicas[0].shards[s].param.detach());
  return worst;
}

IslandsOuterLoop::InFlight IslandsOuterLoop::SendRound(Fragment& f, size_t k, std::vector<Replica>& replicas,
                                                       int64_t land_at_step, double* worst) const {
  InFlight out{RoundMean(f, k, replicas, worst), {}, land_at_step};
  for (const Replica& r : replicas) {
    out.launched.emplace_back();
    for (size_t s : f.shards) out.launched.back().push_back(r.shards[s].param.detach().clone());
  }
  return out;
}

// The round lands: the anchor takes its outer step, and each island keeps what it learnt since it was
// sent — its parameters move by the new anchor less their values when sent (as OuterOptimizer::StepPiece
// moves replica 0's, its pieces).
void IslandsOuterLoop::LandRound(Fragment& f, std::vector<Replica>& replicas) {
  torch::NoGradGuard no_grad;
  const InFlight& flight = *f.flight;
  for (size_t j = 0; j < flight.mean.size(); ++j) {
    f.outer.StepPiece(j, flight.mean[j], flight.launched[0][j]);
    for (size_t i = 1; i < replicas.size(); ++i)
      replicas[i].shards[f.shards[j]].param.detach().add_(f.outer.anchor()[j] - flight.launched[i][j]);
  }
  f.outer.FinishStep();
  f.flight.reset();
}

std::pair<bool, double> IslandsOuterLoop::At(int64_t step, int64_t total_steps,
                                             std::vector<Replica>& replicas) {
  const int64_t h = job_.islands.inner_steps, count = static_cast<int64_t>(fragments_.size());
  // Where the islands must hold one model, every fragment's round at once.
  const bool whole =
      step == total_steps ||
      (step % h == 0 && (ValidationDue(job_, step, total_steps) || CheckpointDue(job_, step, total_steps)));
  bool ended = false;
  double error = 0;
  for (size_t k = 0; k < fragments_.size(); ++k) {
    Fragment& f = fragments_[k];
    if (f.flight && (step == f.flight->land_at_step || whole)) LandRound(f, replicas);
    const int64_t at = (static_cast<int64_t>(k) + 1) * h / count % h;  // fragment k's place in a round
    if (!whole && step % h != at) continue;
    ended = true;
    double e = 0;
    if (job_.islands.overlap_steps > 0 && !whole)
      f.flight = SendRound(f, k, replicas, step + job_.islands.overlap_steps, &e);
    else
      e = TakeRound(f, k, replicas);
    error = std::max(error, e);
  }
  return {ended, error};
}

std::vector<torch::Tensor> IslandsOuterLoop::Momentum(size_t shards) const {
  std::vector<torch::Tensor> out(shards);
  for (const Fragment& f : fragments_)
    for (size_t j = 0; j < f.outer.momentum().size(); ++j) out[f.shards[j]] = f.outer.momentum()[j];
  return out;
}

}  // namespace motley::trainer_parts
