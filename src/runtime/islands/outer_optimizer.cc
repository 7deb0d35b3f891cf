#include "runtime/islands/outer_optimizer.h"

#include "core/check.h"

namespace motley {

OuterOptimizer::OuterOptimizer(OuterConfig config, std::vector<torch::Tensor> pieces)
    : config_(std::move(config)), pieces_(std::move(pieces)) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : pieces_) anchor_.push_back(p.detach().clone());
}

void OuterOptimizer::Attach(std::vector<torch::Tensor> pieces) {
  MOTLEY_CHECK_EQ(pieces.size(), anchor_.size());
  for (size_t i = 0; i < pieces.size(); ++i) MOTLEY_CHECK(pieces[i].sizes() == anchor_[i].sizes());
  pieces_ = std::move(pieces);
}

std::vector<torch::Tensor> OuterOptimizer::PseudoGradients() const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < pieces_.size(); ++i) out.push_back(PseudoGradient(i));
  return out;
}

torch::Tensor OuterOptimizer::PseudoGradient(size_t i) const {
  torch::NoGradGuard no_grad;
  return anchor_.at(i) - pieces_.at(i).detach();
}

void OuterOptimizer::Step(const std::vector<torch::Tensor>& average) {
  MOTLEY_CHECK_EQ(average.size(), pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) StepPiece(i, average[i]);
  FinishStep();
}

void OuterOptimizer::StepPiece(size_t i, const torch::Tensor& average) { StepPiece(i, average, {}); }

void OuterOptimizer::StepPiece(size_t i, const torch::Tensor& average, const torch::Tensor& launched) {
  MOTLEY_CHECK_LT(i, pieces_.size());
  torch::NoGradGuard no_grad;
  const torch::Tensor g = average.to(anchor_[i].scalar_type());
  MOTLEY_CHECK(g.sizes() == anchor_[i].sizes());
  torch::Tensor update = g;
  if (config_.momentum != 0) {
    if (momentum_.empty()) momentum_.resize(pieces_.size());
    if (!momentum_[i].defined()) {
      momentum_[i] = g.clone();  // torch.optim.SGD: the buffer starts as the first gradient
    } else {
      momentum_[i].mul_(config_.momentum).add_(g);
    }
    update = config_.nesterov ? g + config_.momentum * momentum_[i] : momentum_[i];
  }
  anchor_[i].sub_(update, config_.lr);
  if (launched.defined())
    pieces_[i].detach().add_(anchor_[i] - launched.to(anchor_[i].options()));
  else
    pieces_[i].detach().copy_(anchor_[i]);
}

void OuterOptimizer::Restore(std::vector<torch::Tensor> momentum, int64_t steps) {
  MOTLEY_CHECK(momentum.empty() || momentum.size() == pieces_.size());
  for (size_t i = 0; i < momentum.size(); ++i) {
    MOTLEY_CHECK(momentum[i].sizes() == anchor_[i].sizes());
    momentum[i] = momentum[i].to(anchor_[i].options()).clone();
  }
  momentum_ = std::move(momentum);
  steps_ = steps;
}

}  // namespace motley
