#include "runtime/flextp/lent_projections.h"

#include <cstdint>
#include <vector>

#include "runtime/flextp/attention_scores.h"

namespace motley {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t HeadDim(const LayerWork& w) { return w.attention.size(1) / 4; }

// Rows [row, row + head_dim) of run `run`'s heads in the packed borrowed weights (AttentionHeadRows:
// q at 0, o's columns at 3 x head_dim), as [count * head_dim, hidden] in `like`'s dtype.
torch::Tensor RunRows(const LayerWork& w, const LayerWork::HeadRun& run, int64_t row,
                      const torch::Tensor& like) {
  const torch::Tensor t =
      w.attention.narrow(0, run.at, run.count).narrow(1, row, HeadDim(w)).reshape({-1, w.attention.size(2)});
  return t.scalar_type() == like.scalar_type() ? t : t.to(like.scalar_type());
}

// Adds a [count * head_dim, hidden] gradient into rows [row, row + head_dim) of the run's heads.
void AddRunGradient(LayerWork& w, const LayerWork::HeadRun& run, int64_t row, const torch::Tensor& grad) {
  const int64_t d = HeadDim(w), h = w.attention.size(2);
  w.grad_attention.narrow(0, run.at, run.count)
      .narrow(1, row, d)
      .add_(grad.reshape({run.count, d, h}).to(w.grad_attention.scalar_type()));
}

// [.., cols] as a matrix.
torch::Tensor Flat(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

void SendQueries(const torch::Tensor& hidden, LayerWork& w) {
  for (const LayerWork::HeadRun& run : w.attention_runs)
    w.link->Send(w.layer, run.from, run.move, w.forwards, false,
                 torch::matmul(hidden, RunRows(w, run, 0, hidden).t()).contiguous());
}

torch::Tensor ReceiveOutput(const torch::Tensor& hidden, LayerWork& w, const LayerWork::HeadRun& run) {
  torch::Tensor o = torch::empty({hidden.size(0), hidden.size(1), run.count * HeadDim(w)}, hidden.options());
  w.link->Receive(w.layer, run.from, run.move, w.forwards, false, o);
  return o;
}

struct BorrowedQueries : public torch::autograd::Function<BorrowedQueries> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, int64_t work) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(work);
    ctx->saved_data["work"] = work;
    ctx->saved_data["forward"] = w.forwards;
    ctx->save_for_backward({hidden});
    SendQueries(hidden, w);
    return torch::zeros({}, hidden.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list /*grad_out*/) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    const int64_t forward = ctx->saved_data["forward"].toInt();
    const torch::Tensor hidden = ctx->get_saved_variables()[0];
    torch::Tensor grad;
    for (const LayerWork::HeadRun& run : w.attention_runs) {
      torch::Tensor dq =
          torch::empty({hidden.size(0), hidden.size(1), run.count * HeadDim(w)}, hidden.options());
      w.link->Receive(w.layer, run.from, run.move, forward, true, dq);
      AddRunGradient(w, run, 0, torch::matmul(Flat(dq).t(), Flat(hidden)));
      const torch::Tensor part = torch::matmul(dq, RunRows(w, run, 0, hidden));
      grad = grad.defined() ? grad + part : part;
    }
    return {grad, torch::Tensor()};
  }
};

struct BorrowedOutputProjection : public torch::autograd::Function<BorrowedOutputProjection> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& queries, int64_t work) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(work);
    ctx->saved_data["work"] = work;
    ctx->saved_data["forward"] = w.forwards;
    std::vector<torch::Tensor> outputs;
    torch::Tensor out;
    for (const LayerWork::HeadRun& run : w.attention_runs) {
      outputs.push_back(ReceiveOutput(hidden, w, run));
      const torch::Tensor part = torch::matmul(outputs.back(), RunRows(w, run, 3 * HeadDim(w), hidden));
      out = out.defined() ? out + part : part;
    }
    ctx->save_for_backward(outputs);
    ctx->saved_data["like"] = torch::empty({}, queries.options());
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    const int64_t forward = ctx->saved_data["forward"].toInt(), d = HeadDim(w);
    const std::vector<torch::Tensor> outputs = ctx->get_saved_variables();
    const torch::Tensor& dy = grad_out[0];
    // The outputs' gradients first: their owners wait for them.
    for (const LayerWork::HeadRun& run : w.attention_runs)
      w.link->Send(w.layer, run.from, run.move, forward, true,
                   torch::matmul(dy, RunRows(w, run, 3 * d, dy).t()).contiguous());
    for (size_t i = 0; i < outputs.size(); ++i)
      AddRunGradient(w, w.attention_runs[i], 3 * d, torch::matmul(Flat(outputs[i]).t(), Flat(dy)));
    // A zero for the queries: their node runs after this one.
    return {torch::Tensor(), torch::zeros_like(ctx->saved_data["like"].toTensor()), torch::Tensor()};
  }
};

struct LentScores : public torch::autograd::Function<LentScores> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& kv, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t spec, int64_t work, int64_t run) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(work);
    const LayerWork::LentRun& r = w.lent[static_cast<size_t>(run)];
    const ModelSpec& model = *reinterpret_cast<const ModelSpec*>(spec);
    const int64_t per = model.num_heads / model.num_kv_heads, d = kv.size(4);
    torch::Tensor q = torch::empty({kv.size(1), kv.size(3), r.count * d}, kv.options());
    w.link->Receive(w.layer, r.to, r.move, w.forwards, false, q);
    torch::Tensor leaf = kv.detach().requires_grad_(true), o;
    {
      torch::AutoGradMode enable(true);
      q.requires_grad_(true);
      o = AttentionScores(
          model, RotaryEmbedding(q.view({kv.size(1), kv.size(3), r.count, d}).transpose(1, 2), cos, sin),
          leaf[0], leaf[1], r.begin % per);
    }
    w.link->Send(w.layer, r.to, r.move, w.forwards, false, o.detach().contiguous());
    ctx->saved_data["work"] = work;
    ctx->saved_data["run"] = run;
    ctx->saved_data["forward"] = w.forwards;
    ctx->saved_data["q"] = q;
    ctx->saved_data["kv"] = leaf;
    ctx->saved_data["o"] = o;
    return torch::zeros({}, kv.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list /*grad_out*/) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    const LayerWork::LentRun& r = w.lent[static_cast<size_t>(ctx->saved_data["run"].toInt())];
    const int64_t forward = ctx->saved_data["forward"].toInt();
    const torch::Tensor o = ctx->saved_data["o"].toTensor();
    torch::Tensor grad = torch::empty(o.sizes(), o.options());
    w.link->Receive(w.layer, r.to, r.move, forward, true, grad);
    auto grads = torch::autograd::grad(
        {o}, {ctx->saved_data["q"].toTensor(), ctx->saved_data["kv"].toTensor()}, {grad});
    w.link->Send(w.layer, r.to, r.move, forward, true, grads[0].contiguous());
    ctx->saved_data.clear();  // the scores' graph is no longer needed
    return {grads[1], torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SendBorrowedQueries(const torch::Tensor& hidden, LayerWork& work) {
  if (torch::GradMode::is_enabled())
    return BorrowedQueries::apply(hidden, static_cast<int64_t>(reinterpret_cast<intptr_t>(&work)));
  SendQueries(hidden, work);
  return torch::Tensor();
}

torch::Tensor BorrowedOutputs(const torch::Tensor& hidden, const torch::Tensor& queries, LayerWork& work) {
  if (queries.defined())
    return BorrowedOutputProjection::apply(hidden, queries,
                                           static_cast<int64_t>(reinterpret_cast<intptr_t>(&work)));
  torch::Tensor out;
  for (const LayerWork::HeadRun& run : work.attention_runs) {
    const torch::Tensor part =
        torch::matmul(ReceiveOutput(hidden, work, run), RunRows(work, run, 3 * HeadDim(work), hidden));
    out = out.defined() ? out + part : part;
  }
  return out;
}

torch::Tensor LendScores(const ModelSpec& spec, const torch::Tensor& kv, const torch::Tensor& cos,
                         const torch::Tensor& sin, LayerWork& work, size_t run) {
  if (torch::GradMode::is_enabled() && kv.requires_grad())
    return LentScores::apply(kv, cos, sin, static_cast<int64_t>(reinterpret_cast<intptr_t>(&spec)),
                             static_cast<int64_t>(reinterpret_cast<intptr_t>(&work)),
                             static_cast<int64_t>(run));
  const LayerWork::LentRun& r = work.lent[run];
  const int64_t per = spec.num_heads / spec.num_kv_heads, d = kv.size(4);
  torch::Tensor q = torch::empty({kv.size(1), kv.size(3), r.count * d}, kv.options());
  work.link->Receive(work.layer, r.to, r.move, work.forwards, false, q);
  const torch::Tensor o = AttentionScores(
      spec, RotaryEmbedding(q.view({kv.size(1), kv.size(3), r.count, d}).transpose(1, 2), cos, sin), kv[0],
      kv[1], r.begin % per);
  work.link->Send(work.layer, r.to, r.move, work.forwards, false, o.contiguous());
  return torch::Tensor();
}

}  // namespace motley
