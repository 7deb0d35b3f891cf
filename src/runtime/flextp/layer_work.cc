#include "runtime/flextp/layer_work.h"

#include <cmath>
#include <limits>
#include <optional>

#include "core/check.h"
#include "runtime/flextp/attention_scores.h"
#include "runtime/flextp/lent_projections.h"

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
    const LayerWork& w = *reinterpret_cast<const LayerWork*>(work);
    torch::Tensor g = F::linear(m, Cast(w.gate, m)), u = F::linear(m, Cast(w.up, m));
    ctx->save_for_backward({m, g, u});
    return F::linear(torch::silu(g) * u, Cast(w.down, m));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &m = saved[0], &g = saved[1], &u = saved[2];
    const torch::Tensor dy = grad_out[0];
    const int64_t h = m.size(-1), n = g.size(-1);
    const torch::Tensor sig = torch::sigmoid(g), a = g * sig;     // silu(g)
    const torch::Tensor dz = torch::matmul(dy, Cast(w.down, m));  // [.., n]
    const torch::Tensor du = dz * a, dg = dz * u * sig * (1 + g * (1 - sig));
    auto flat = [](const torch::Tensor& t, int64_t cols) { return t.reshape({-1, cols}); };
    w.grad_down.add_(torch::matmul(flat(dy, h).t(), flat(a * u, n)).to(w.grad_down.scalar_type()));  // [h, n]
    w.grad_gate.add_(torch::matmul(flat(dg, n).t(), flat(m, h)).to(w.grad_gate.scalar_type()));      // [n, h]
    w.grad_up.add_(torch::matmul(flat(du, n).t(), flat(m, h)).to(w.grad_up.scalar_type()));
    torch::Tensor dm = torch::matmul(dg, Cast(w.gate, m)) + torch::matmul(du, Cast(w.up, m));
    return {dm, torch::Tensor()};
  }
};

// The first n rows (dim 0) or columns (dim 1) of w: w itself when that is all of it (a slice's
// backward would allocate and zero a copy of the whole weight for its gradient).
torch::Tensor First(const torch::Tensor& w, int64_t dim, int64_t n) {
  return n == w.size(dim) ? w : w.narrow(dim, 0, n);
}

torch::Tensor Rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return RotaryEmbedding(x, cos, sin);
}

// The heads of projection `w` ([heads * d, hidden]) of `hidden`: [batch, heads, seq, d].
torch::Tensor Heads(const torch::Tensor& hidden, const torch::Tensor& w, int64_t d) {
  return torch::nn::functional::linear(hidden, w)
      .view({hidden.size(0), hidden.size(1), -1, d})
      .transpose(1, 2);
}

// The keys (after RoPE) and values of k and v [groups * d, hidden]: [batch, groups, seq, d] each.
std::pair<torch::Tensor, torch::Tensor> KeyValue(const ModelSpec& spec, const torch::Tensor& hidden,
                                                 const torch::Tensor& k_w, const torch::Tensor& v_w,
                                                 const torch::Tensor& cos, const torch::Tensor& sin) {
  return {Rope(Heads(hidden, k_w, spec.head_dim()), cos, sin), Heads(hidden, v_w, spec.head_dim())};
}

torch::Tensor Attend(const ModelSpec& spec, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                     const torch::Tensor& o_w, int64_t first_head_offset);

// AttentionPartial's heads with their keys and values given ([batch, groups, seq, d] each, the keys
// after RoPE: the groups the heads touch).
torch::Tensor AttentionFromKeyValue(const ModelSpec& spec, const torch::Tensor& hidden,
                                    const torch::Tensor& q_w, torch::Tensor k, torch::Tensor v,
                                    const torch::Tensor& o_w, const torch::Tensor& cos,
                                    const torch::Tensor& sin, int64_t first_head_offset) {
  // (One statement each, and moved: no tensor outlives its use — the memory model counts a layer's
  // attention as these ops hold it, tensor_parallel_test.cc.)
  torch::Tensor q = Rope(Heads(hidden, q_w, spec.head_dim()), cos, sin);
  return Attend(spec, std::move(q), std::move(k), std::move(v), o_w, first_head_offset);
}

// One borrowed run's weights as AttentionPartial takes them: its heads' q rows and o columns (as
// rows), [count * d, hidden] each, and — where the receiver computes the key and value — the k and
// v rows of the groups the run touches, each taken from the run's first head in that group (a group
// is computed once a run: its other heads' copies get no gradient, their owner sums every copy's).
struct RunWeights {
  torch::Tensor q, o, k, v;
};

// Each run's weights, taken from the packed rows (AttentionHeadRows); with `leaves`, each is a
// leaf of its own whose gradient lands in its rows (LayerWork::AttentionGraph::Weight).
std::vector<RunWeights> SplitRuns(const ModelSpec& spec, const torch::Tensor& rows,
                                  const std::vector<LayerWork::HeadRun>& runs,
                                  const std::vector<torch::Tensor>& kv,
                                  std::vector<LayerWork::AttentionGraph::Weight>* leaves) {
  const int64_t d = spec.head_dim(), per = spec.num_heads / spec.num_kv_heads, h = rows.size(2);
  auto take = [&](int64_t row, int64_t at, int64_t count, const torch::Tensor& heads) {
    torch::Tensor t = (heads.defined() ? rows.index_select(0, heads) : rows.narrow(0, at, count))
                          .narrow(1, row, d)
                          .reshape({-1, h});
    if (leaves == nullptr) return t;
    t = t.detach().requires_grad_(true);
    leaves->push_back({t, heads, row, at, count});
    return t;
  };
  std::vector<RunWeights> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    const LayerWork::HeadRun& run = runs[i];
    RunWeights w{take(0, run.at, run.count, {}), take(3 * d, run.at, run.count, {}), {}, {}};
    if (i >= kv.size() || !kv[i].defined()) {  // this rank computes the run's keys and values
      std::vector<int64_t> firsts;             // the run's first head in each group it touches
      for (int64_t j = 0; j < run.count; j = (run.offset + j) / per * per + per - run.offset)
        firsts.push_back(run.at + j);
      const torch::Tensor heads = torch::tensor(firsts, torch::kInt64).to(rows.device());
      w.k = take(d, 0, 0, heads);
      w.v = take(2 * d, 0, 0, heads);
    }
    out.push_back(std::move(w));
  }
  return out;
}

// The borrowed heads' partial output: each owner's run of them (HeadRun) with the key and value
// heads of the groups it touches — computed here from the run's weights, or given in `kv` by the
// run's owner.
torch::Tensor BorrowedHeads(const ModelSpec& spec, const torch::Tensor& hidden,
                            const std::vector<RunWeights>& w, const std::vector<LayerWork::HeadRun>& runs,
                            const torch::Tensor& cos, const torch::Tensor& sin,
                            const std::vector<torch::Tensor>& kv = {}) {
  torch::Tensor out;
  for (size_t i = 0; i < runs.size(); ++i) {
    const torch::Tensor part = i < kv.size() && kv[i].defined()
                                   ? AttentionFromKeyValue(spec, hidden, w[i].q, kv[i][0], kv[i][1],
                                                           w[i].o.t(), cos, sin, runs[i].offset)
                                   : AttentionPartial(spec, hidden, w[i].q, w[i].k, w[i].v, w[i].o.t(), cos,
                                                      sin, torch::Tensor(), runs[i].offset);
    out = out.defined() ? out + part : part;
  }
  return out;
}

// The runs of `w`'s borrowed heads (one run of them all from a group's first head when unnamed).
std::vector<LayerWork::HeadRun> Runs(const LayerWork& w) {
  if (!w.attention_runs.empty()) return w.attention_runs;
  return {{0, w.attention.size(0), 0}};
}

// The keys and values of each borrowed run whose owner sends them ([2, batch, groups, seq, head_dim]:
// the groups the run touches, the keys after RoPE); undefined for the runs this rank computes them for.
std::vector<torch::Tensor> ReceiveKeyValues(const ModelSpec& spec, const LayerWork& w,
                                            const torch::Tensor& hidden) {
  std::vector<torch::Tensor> kv(w.attention_runs.size());
  if (w.link == nullptr) return kv;
  const int64_t per = spec.num_heads / spec.num_kv_heads;
  for (size_t i = 0; i < kv.size(); ++i) {
    const LayerWork::HeadRun& run = w.attention_runs[i];
    if (run.from < 0) continue;
    const int64_t groups = (run.offset + run.count - 1) / per + 1;
    kv[i] = torch::empty({2, hidden.size(0), groups, hidden.size(1), spec.head_dim()}, hidden.options());
    w.link->Receive(w.layer, run.from, run.move, w.forwards, false, kv[i]);
  }
  return kv;
}

// A lent run's keys and values, sent to its receiver in the forward; their gradients, received from
// it in the backward, flow on into this rank's key and value projections. The output is a zero
// that joins the rank's attention output, so that the backward comes here.
struct LentKeyValue : public torch::autograd::Function<LentKeyValue> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& kv, int64_t work, int64_t run) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(work);
    ctx->saved_data["work"] = work;
    ctx->saved_data["run"] = run;
    ctx->saved_data["forward"] = w.forwards;
    ctx->saved_data["like"] = torch::empty(kv.sizes(), kv.options());
    const LayerWork::LentRun& r = w.lent[static_cast<size_t>(run)];
    w.link->Send(w.layer, r.to, r.move, w.forwards, false, kv.detach().contiguous());
    return torch::zeros({}, kv.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list /*grad_out*/) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    const LayerWork::LentRun& r = w.lent[static_cast<size_t>(ctx->saved_data["run"].toInt())];
    torch::Tensor grad = torch::empty_like(ctx->saved_data["like"].toTensor());
    w.link->Receive(w.layer, r.to, r.move, ctx->saved_data["forward"].toInt(), true, grad);
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

// This rank's lent runs: the keys and values of the groups they touch, computed once (the lent heads
// are its last: their groups are contiguous) and sent to each run's receiver — or, lending
// projections, attended with the query the receiver sends (LendScores). Returns the zero to add to
// the attention's output (undefined where no backward follows).
torch::Tensor LendKeyValues(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& k_w,
                            const torch::Tensor& v_w, const torch::Tensor& cos, const torch::Tensor& sin,
                            LayerWork& w) {
  const int64_t d = spec.head_dim(), per = spec.num_heads / spec.num_kv_heads;
  const int64_t first = w.lent.front().begin / per,
                last = (w.lent.back().begin + w.lent.back().count - 1) / per;
  const auto [k, v] = KeyValue(spec, hidden, k_w.narrow(0, first * d, (last - first + 1) * d),
                               v_w.narrow(0, first * d, (last - first + 1) * d), cos, sin);
  torch::Tensor zero;
  for (size_t i = 0; i < w.lent.size(); ++i) {
    const LayerWork::LentRun& r = w.lent[i];
    const int64_t g0 = r.begin / per - first, groups = (r.begin + r.count - 1) / per - r.begin / per + 1;
    const torch::Tensor kv = torch::stack({k.narrow(1, g0, groups), v.narrow(1, g0, groups)});
    if (w.lend_projections) {  // the run's scores are this rank's: its receiver sends their query
      const torch::Tensor z = LendScores(spec, kv, cos, sin, w, i);
      if (z.defined()) zero = zero.defined() ? zero + z : z;
    } else if (torch::GradMode::is_enabled() && kv.requires_grad()) {
      const torch::Tensor z = LentKeyValue::apply(kv, static_cast<int64_t>(reinterpret_cast<intptr_t>(&w)),
                                                  static_cast<int64_t>(i));
      zero = zero.defined() ? zero + z : z;
    } else {
      w.link->Send(w.layer, r.to, r.move, w.forwards, false, kv.detach().contiguous());
    }
  }
  return zero;
}

// Borrowed attention heads: their weights are not this rank's parameters, so the forward keeps
// its own graph — the input and the groups' weights as leaves — in the work (LayerWork::
// attention_graphs), and the backward runs it: the weights' gradient goes to the work's
// accumulator, the input's flows on. (Recomputing the forward in the backward instead made a
// borrowed group cost a third more than an own one.)
struct BorrowedAttention : public torch::autograd::Function<BorrowedAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t spec, int64_t work) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(work);
    ctx->saved_data["work"] = work;
    ctx->saved_data["graph"] = static_cast<int64_t>(w.attention_graphs.size());
    const ModelSpec& model = *reinterpret_cast<const ModelSpec*>(spec);
    LayerWork::AttentionGraph g;
    g.hidden = hidden.detach().requires_grad_(true);
    g.kv = ReceiveKeyValues(model, w, hidden);
    g.forward = w.forwards;
    for (torch::Tensor& kv : g.kv)
      if (kv.defined()) kv.requires_grad_(true);
    {
      torch::AutoGradMode enable(true);
      const std::vector<LayerWork::HeadRun> runs = Runs(w);
      const std::vector<RunWeights> weights =
          SplitRuns(model, Cast(w.attention, hidden), runs, g.kv, &g.weights);
      g.out = BorrowedHeads(model, g.hidden, weights, runs, cos, sin, g.kv);
    }
    torch::Tensor out = g.out.detach();
    w.attention_graphs.push_back(std::move(g));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    LayerWork& w = *reinterpret_cast<LayerWork*>(ctx->saved_data["work"].toInt());
    LayerWork::AttentionGraph& g =
        w.attention_graphs.at(static_cast<size_t>(ctx->saved_data["graph"].toInt()));
    std::vector<torch::Tensor> inputs = {g.hidden};
    for (const LayerWork::AttentionGraph::Weight& wt : g.weights) inputs.push_back(wt.leaf);
    for (const torch::Tensor& kv : g.kv)
      if (kv.defined()) inputs.push_back(kv);
    auto grads = torch::autograd::grad({g.out}, inputs, {grad_out[0]});
    torch::NoGradGuard no_grad;
    // The received keys' and values' gradients go back to their owner.
    for (size_t i = 0, k = 1 + g.weights.size(); i < g.kv.size(); ++i)
      if (g.kv[i].defined()) {
        const LayerWork::HeadRun& run = w.attention_runs[i];
        w.link->Send(w.layer, run.from, run.move, g.forward, true, grads[k++].contiguous());
      }
    // Each weight's gradient into its rows of the accumulator.
    const int64_t d = w.grad_attention.size(1) / 4, h = w.grad_attention.size(2);
    for (size_t j = 0; j < g.weights.size(); ++j) {
      const LayerWork::AttentionGraph::Weight& wt = g.weights[j];
      const torch::Tensor grad = grads[1 + j].to(w.grad_attention.scalar_type()).view({-1, d, h});
      torch::Tensor rows = w.grad_attention.narrow(1, wt.row, d);
      if (wt.heads.defined()) {
        rows.index_add_(0, wt.heads, grad);
      } else {
        rows.narrow(0, wt.at, wt.count).add_(grad);
      }
    }
    g = {};  // its activations are no longer needed
    return {grads[0], torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor AttentionPartial(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                               const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& features, int64_t first_head_offset) {
  if (features.defined()) {  // ZERO-resizing: the kept features' columns in, rows out
    const torch::Tensor out =
        AttentionPartial(spec, hidden.index_select(-1, features), q_w.index_select(1, features),
                         k_w.index_select(1, features), v_w.index_select(1, features),
                         o_w.index_select(0, features), cos, sin, torch::Tensor(), first_head_offset);
    return torch::zeros_like(hidden).index_copy(-1, features, out);
  }
  auto kv = KeyValue(spec, hidden, k_w, v_w, cos, sin);
  return AttentionFromKeyValue(spec, hidden, q_w, std::move(kv.first), std::move(kv.second), o_w, cos, sin,
                               first_head_offset);
}

namespace {

// Heads q [batch, heads, seq, d] attending to their groups' k and v [batch, groups, seq, d] (the run's
// first head `first_head_offset` heads into its group), projected by o [hidden, heads * d].
torch::Tensor Attend(const ModelSpec& spec, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                     const torch::Tensor& o_w, int64_t first_head_offset) {
  return torch::nn::functional::linear(
      AttentionScores(spec, std::move(q), std::move(k), std::move(v), first_head_offset), o_w);
}

}  // namespace

torch::Tensor AttentionWithWork(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                                const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                                const torch::Tensor& cos, const torch::Tensor& sin, LayerWork* work) {
  if (work == nullptr ||
      (work->attention_keep < 0 && !work->attention.defined() && !work->attention_features.defined()))
    return AttentionPartial(spec, hidden, q_w, k_w, v_w, o_w, cos, sin);
  const int64_t d = spec.head_dim(), per = spec.num_heads / spec.num_kv_heads;
  const int64_t keep = work->attention_keep < 0 ? q_w.size(0) / d : work->attention_keep;
  const int64_t groups = (keep + per - 1) / per;  // the key/value heads its kept heads use
  // Lending projections, the borrowed heads' queries go to their owners before this rank's own heads
  // run, and their outputs come back after them.
  const bool projections = work->lend_projections && work->attention.defined();
  const torch::Tensor queries = projections ? SendBorrowedQueries(hidden, *work) : torch::Tensor();
  // (With no head of its own left, still a function of hidden: the team's all-reduce of its
  // gradient must run on every rank.)
  torch::Tensor out = keep == 0
                          ? hidden * 0
                          : AttentionPartial(spec, hidden, First(q_w, 0, keep * d), First(k_w, 0, groups * d),
                                             First(v_w, 0, groups * d), First(o_w, 1, keep * d), cos, sin,
                                             work->attention_features);
  if (work->link != nullptr && !work->lent.empty()) {
    const torch::Tensor zero = LendKeyValues(spec, hidden, k_w, v_w, cos, sin, *work);
    if (zero.defined()) out = out + zero;
  }
  if (projections) {
    out = out + BorrowedOutputs(hidden, queries, *work);
  } else if (work->attention.defined()) {
    if (torch::GradMode::is_enabled()) {
      out = out + BorrowedAttention::apply(hidden, cos, sin,
                                           static_cast<int64_t>(reinterpret_cast<intptr_t>(&spec)),
                                           static_cast<int64_t>(reinterpret_cast<intptr_t>(work)));
    } else {  // no backward will follow (evaluation, or a checkpointed layer's first forward): no graph kept
      const std::vector<torch::Tensor> kv = ReceiveKeyValues(spec, *work, hidden);
      const std::vector<LayerWork::HeadRun> runs = Runs(*work);
      out =
          out + BorrowedHeads(spec, hidden, SplitRuns(spec, Cast(work->attention, hidden), runs, kv, nullptr),
                              runs, cos, sin, kv);
    }
  }
  ++work->forwards;
  return out;
}

torch::Tensor AttentionFeatureRows(const std::vector<torch::Tensor>& w) {
  return torch::cat({w[1].t(), w[2].t(), w[3].t(), w[4]}, 1);
}

torch::Tensor AttentionHeadRows(const ModelSpec& spec, const std::vector<torch::Tensor>& w) {
  const int64_t d = spec.head_dim(), per = spec.num_heads / spec.num_kv_heads, h = w[1].size(1);
  const int64_t heads = w[1].size(0) / d, groups = w[2].size(0) / d;
  return torch::cat({w[1].reshape({heads, d, h}), w[2].reshape({groups, d, h}).repeat_interleave(per, 0),
                     w[3].reshape({groups, d, h}).repeat_interleave(per, 0), w[4].t().reshape({heads, d, h})},
                    1);
}

HeadParts SumHeadRows(const ModelSpec& spec, int64_t begin, const torch::Tensor& rows) {
  const int64_t d = spec.head_dim(), per = spec.num_heads / spec.num_kv_heads, h = rows.size(2),
                n = rows.size(0);
  const int64_t first_group = begin / per, groups = (begin + n - 1) / per - first_group + 1;
  const torch::Tensor group = torch::div(torch::arange(begin, begin + n, torch::kInt64), per, "floor")
                                  .sub_(first_group)
                                  .to(rows.device());
  auto by_group = [&](int64_t row) {
    return torch::zeros({groups, d, h}, rows.options())
        .index_add_(0, group, rows.narrow(1, row, d))
        .reshape({-1, h});
  };
  return {begin * d,   first_group * d, rows.narrow(1, 0, d).reshape({-1, h}),
          by_group(d), by_group(2 * d), rows.narrow(1, 3 * d, d).reshape({-1, h}).t()};
}

torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, LayerWork* work) {
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
