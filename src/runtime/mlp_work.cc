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
// The backward is written out (the gate and up projections are kept from the forward) so that the
// borrowed units cost no recomputation.
struct BorrowedMlp : public torch::autograd::Function<BorrowedMlp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& m, int64_t work) {
    namespace F = torch::nn::functional;
    ctx->saved_data["work"] = work;
    const MlpWork& w = *reinterpret_cast<const MlpWork*>(work);
    torch::Tensor g = F::linear(m, Cast(w.gate, m)), u = F::linear(m, Cast(w.up, m));
    ctx->save_for_backward({m, g, u});
    return F::linear(torch::silu(g) * u, Cast(w.down, m));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    MlpWork& w = *reinterpret_cast<MlpWork*>(ctx->saved_data["work"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &m = saved[0], &g = saved[1], &u = saved[2];
    const torch::Tensor dy = grad_out[0];
    const int64_t h = m.size(-1), n = g.size(-1);
    const torch::Tensor sig = torch::sigmoid(g), a = g * sig;  // silu(g)
    const torch::Tensor dz = torch::matmul(dy, Cast(w.down, m));                       // [.., n]
    const torch::Tensor du = dz * a, dg = dz * u * sig * (1 + g * (1 - sig));
    auto flat = [](const torch::Tensor& t, int64_t cols) { return t.reshape({-1, cols}); };
    w.grad_down.add_(torch::matmul(flat(dy, h).t(), flat(a * u, n)).to(torch::kFloat32));  // [h, n]
    w.grad_gate.add_(torch::matmul(flat(dg, n).t(), flat(m, h)).to(torch::kFloat32));      // [n, h]
    w.grad_up.add_(torch::matmul(flat(du, n).t(), flat(m, h)).to(torch::kFloat32));
    torch::Tensor dm = torch::matmul(dg, Cast(w.gate, m)) + torch::matmul(du, Cast(w.up, m));
    return {dm, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, MlpWork* work) {
  if (work != nullptr && work->keep.defined() && work->keep.numel() == 0) {  // every own unit moved away
    const int64_t w = static_cast<int64_t>(reinterpret_cast<intptr_t>(work));
    // (Still a function of m: the team's all-reduce of m's gradient must run on every rank.)
    return work->gate.defined() ? BorrowedMlp::apply(m, w) : m * 0;
  }
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
