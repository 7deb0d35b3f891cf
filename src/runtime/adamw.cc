#include "runtime/adamw.h"

#include <cstdint>
#include <cmath>

namespace motley {

void AdamW::Step(std::vector<ParamShard>& shards, double lr, int64_t step) const {
  torch::NoGradGuard no_grad;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(b2, static_cast<double>(step));
  for (auto& s : shards) {
    if (!s.grad.defined()) continue;
    torch::Tensor g = s.grad.to(torch::kFloat32);
    if (!s.exp_avg.defined()) {
      s.exp_avg = torch::zeros_like(g);
      s.exp_avg_sq = torch::zeros_like(g);
    }
    if (s.decay && config_.weight_decay > 0) s.param.mul_(1 - lr * config_.weight_decay);
    s.exp_avg.mul_(b1).add_(g, 1 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2);
    torch::Tensor denom = (s.exp_avg_sq / bias2).sqrt_().add_(config_.eps);
    torch::Tensor update = (s.exp_avg / bias1) / denom;
    s.param.sub_(update.to(s.param.scalar_type()), lr);
  }
}

double GradNormSquared(const std::vector<ParamShard>& shards) {
  double sum = 0;
  for (const auto& s : shards)
    if (s.grad.defined()) sum += s.grad.to(torch::kFloat64).pow(2).sum().item<double>();
  return sum;
}

double ClipGradients(std::vector<ParamShard>& shards, double global_norm, double max_norm) {
  if (max_norm <= 0 || global_norm <= max_norm) return 1.0;
  const double factor = max_norm / (global_norm + 1e-6);
  torch::NoGradGuard no_grad;
  for (auto& s : shards)
    if (s.grad.defined()) s.grad.mul_(factor);
  return factor;
}

std::vector<ParamShard> WholeParameterShards(torch::nn::Module& module) {
  std::vector<ParamShard> shards;
  for (auto& p : module.named_parameters()) {
    ParamShard s;
    s.name = p.key();
    s.param = p.value();
    s.grad = p.value().grad();
    s.decay = p.value().dim() >= 2;
    shards.push_back(s);
  }
  return shards;
}

}  // namespace motley
