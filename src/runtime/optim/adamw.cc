#include "runtime/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// ATen's fused AdamW kernel (libtorch >= 2.2); 0 keeps the loop of ops everywhere.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define MOTLEY_FUSED_ADAMW 1
#else
#define MOTLEY_FUSED_ADAMW 0
#endif

namespace motley {

namespace {

#if MOTLEY_FUSED_ADAMW
// ATen's fused AdamW (one kernel over many tensors) for the shards that are contiguous fp32 on a
// GPU, in two calls: those that decay and those that do not. The same update as the loop below
// (the kernel is torch.optim.AdamW's fused path); returns whether it took them all.
bool FusedStep(std::vector<ParamShard>& shards, std::vector<torch::Tensor>& grads, const OptimizerConfig& c,
               double lr, int64_t step) {
  std::vector<torch::Tensor> p[2], g[2], m[2], v[2];
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    if (!s.grad.defined()) continue;
    const bool fits = s.param.is_cuda() && s.param.scalar_type() == torch::kFloat32 &&
                      s.param.is_contiguous() && grads[i].is_contiguous() &&
                      s.exp_avg.scalar_type() == torch::kFloat32;
    if (!fits) return false;
    const int d = s.decay && c.weight_decay > 0 ? 1 : 0;
    p[d].push_back(s.param), g[d].push_back(grads[i]), m[d].push_back(s.exp_avg),
        v[d].push_back(s.exp_avg_sq);
  }
  for (int d = 0; d < 2; ++d) {
    if (p[d].empty()) continue;
    const torch::Tensor count =
        torch::full({}, static_cast<double>(step), p[d][0].options().dtype(torch::kFloat32));
    const std::vector<torch::Tensor> steps(p[d].size(), count);
    at::_fused_adamw_(p[d], g[d], m[d], v[d], {}, steps, lr, c.beta1, c.beta2, d ? c.weight_decay : 0.0,
                      c.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  return true;
}
#endif

}  // namespace

void AdamW::Step(std::vector<ParamShard>& shards, double lr, int64_t step) const {
  torch::NoGradGuard no_grad;
  const double b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(b2, static_cast<double>(step));
  std::vector<torch::Tensor> grads(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    ParamShard& s = shards[i];
    if (!s.grad.defined()) continue;
    grads[i] = s.grad.to(s.param.scalar_type());  // moments in the master dtype (fp32, or fp64)
    if (!s.exp_avg.defined()) {
      s.exp_avg = torch::zeros_like(grads[i]);
      s.exp_avg_sq = torch::zeros_like(grads[i]);
    }
  }
#if MOTLEY_FUSED_ADAMW
  if (FusedStep(shards, grads, config_, lr, step)) return;
#endif
  for (size_t i = 0; i < shards.size(); ++i) {
    ParamShard& s = shards[i];
    if (!s.grad.defined()) continue;
    const torch::Tensor& g = grads[i];
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
