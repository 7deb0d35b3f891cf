#include "runtime/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace motley {

void AdamW::Step(std::vector<ParamShard>& shards, double lr, int64_t step) const {
  torch::NoGradGuard no_grad;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(b2, static_cast<double>(step));
  for (auto& s : shards) {
    if (!s.grad.defined()) continue;
    torch::Tensor g = s.grad.to(s.param.scalar_type());  // moments in the master dtype (fp32, or fp64)
    if (!s.exp_avg.defined()) {
      s.exp_avg = torch::zeros_like(g);
      s.exp_avg_sq = torch::zeros_like(g);
    }
    if (s.decay && config_.weight_decay > 0) s.param.mul_(1 - lr * config_.weight_decay);
    s.exp_avg.lerp_(g, 1 - b1);  // b1 m + (1 - b1) g
    s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2);
    // param -= lr (m / bias1) / (sqrt(v / bias2) + eps), in as few passes as the ops allow
    torch::Tensor denom = s.exp_avg_sq.sqrt().div_(std::sqrt(bias2)).add_(config_.eps);
    if (s.param.scalar_type() == s.exp_avg.scalar_type()) {
      s.param.addcdiv_(s.exp_avg, denom, -lr / bias1);
    } else {
      s.param.sub_(s.exp_avg.div(denom).mul_(lr / bias1).to(s.param.scalar_type()));
    }
  }
}

torch::Tensor SumOfSquares(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  const torch::Tensor flat = t.reshape(-1);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(t.device());
  if (!t.device().is_cpu()) return flat.to(torch::kFloat64).pow(2).sum();
  constexpr int64_t kPiece = int64_t{1} << 15;  // 256 KiB of fp64
  const int64_t n = flat.numel();
  torch::Tensor buffer = torch::empty({std::min(kPiece, n)}, f64);
  double sum = 0;
  for (int64_t at = 0; at < n; at += kPiece) {
    torch::Tensor piece = buffer.narrow(0, 0, std::min(kPiece, n - at));
    piece.copy_(flat.narrow(0, at, piece.numel()));
    sum += torch::dot(piece, piece).item<double>();  // fp32 squares are exact in fp64
  }
  return torch::tensor(sum, f64);
}

double GradNormSquared(const std::vector<ParamShard>& shards) {
  double sum = 0;
  std::vector<torch::Tensor> on_device;  // summed where they are, read once (one host sync, not one a shard)
  for (const auto& s : shards) {
    if (!s.grad.defined()) continue;
    if (s.grad.device().is_cpu())
      sum += SumOfSquares(s.grad).item<double>();
    else
      on_device.push_back(SumOfSquares(s.grad));
  }
  if (!on_device.empty()) sum += torch::stack(on_device).sum().item<double>();
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
