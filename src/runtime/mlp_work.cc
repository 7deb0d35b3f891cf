#include "runtime/mlp_work.h"

namespace motley {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor SwiGlu(const torch::Tensor& m, const torch::Tensor& gate, const torch::Tensor& up,
                     const torch::Tensor& down) {
  namespace F = torch::nn::functional;
  return F::linear(torch::silu(F::linear(m, gate)) * F::linear(m, up), down);
}

torch::Tensor Cast(const torch::Tensor& w, const torch::Tensor& like) {
  return w.scalar_type() == like.scalar_type() ? w : w.to(like.scalar_type());
}

// The borrowed units: their weights are not this rank's parameters, so their gradients go to the
// work's accumulators (returned to the owner after the backward) and only the input's flows on.
struct BorrowedMlp : public torch::autograd::Function<BorrowedMlp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& m, int64_t work) {
    ctx->saved_data["work"] = work;
    ctx->save_for_backward({m});
    const MlpWork& w = *reinterpret_cast<const MlpWork*>(work);
    return SwiGlu(m, Cast(w.gate, m), Cast(w.up, m), Cast(w.down, m));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    MlpWork& w = *reinterpret_cast<MlpWork*>(ctx->saved_data["work"].toInt());
    torch::Tensor m = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor gate = w.gate.detach().requires_grad_(true), up = w.up.detach().requires_grad_(true),
                  down = w.down.detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = SwiGlu(m, Cast(gate, m), Cast(up, m), Cast(down, m));
    }
    auto g = torch::autograd::grad({out}, {m, gate, up, down}, {grad_out[0]});
    torch::NoGradGuard no_grad;
    w.grad_gate.add_(g[1].to(torch::kFloat32));
    w.grad_up.add_(g[2].to(torch::kFloat32));
    w.grad_down.add_(g[3].to(torch::kFloat32));
    return {g[0], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, MlpWork* work) {
  torch::Tensor gate = gate_w, up = up_w, down = down_w;
  if (work != nullptr && work->keep.defined()) {
    gate = gate.index_select(0, work->keep);
    up = up.index_select(0, work->keep);
    down = down.index_select(1, work->keep);
  }
  torch::Tensor out = SwiGlu(m, Cast(gate, m), Cast(up, m), Cast(down, m));
  if (work != nullptr && work->gate.defined())
    out = out + BorrowedMlp::apply(m, static_cast<int64_t>(reinterpret_cast<intptr_t>(work)));
  return out;
}

}  // namespace motley
