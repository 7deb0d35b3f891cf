#include "runtime/flextp_team.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {

torch::Tensor UnitRows(const std::vector<torch::Tensor>& w) {
  return torch::cat({w[6], w[7], w[8].t()}, 1);
}

FlexTpCosts FlexTpCostsFor(const ModelSpec& spec, int tp, int64_t seq_len, const Cluster& cluster, int a, int b,
                           int64_t layer_visits, int64_t layer_backwards) {
  const double h = static_cast<double>(spec.hidden_size), f = static_cast<double>(spec.ffn_size),
               kv = static_cast<double>(spec.kv_dim()), s = static_cast<double>(seq_len);
  // Per token and layer (multiply-adds x 2): the MLP's three matrices, the attention's four, and
  // the scores and their weighted sum.
  const double mlp = 6 * h * f, attention = 2 * (2 * h * h + 2 * h * kv) + 4 * s * h;
  FlexTpCosts c;
  c.units = spec.ffn_size / tp;
  c.mlp_fraction = mlp / (mlp + attention);
  const double bandwidth = cluster.LinkBetween(a, b).bandwidth_bytes_per_s;
  const double unit_bytes = 3 * h * 4;  // a gate row, an up row and a down column in fp32
  if (bandwidth > 0 && a != b)
    c.migrate_s_per_unit = unit_bytes * static_cast<double>(layer_visits + layer_backwards) / bandwidth;
  return c;
}

void FlexTpTeam::AddCommTime(std::chrono::steady_clock::time_point start) const {
  if (options_.comm_s != nullptr)
    *options_.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

FlexTpTeam::FlexTpTeam(Options options)
    : options_(std::move(options)), balancer_(options_.config, options_.tp, options_.costs) {
  MOTLEY_CHECK(options_.comm != nullptr && options_.team != nullptr);
}

Status FlexTpTeam::BeginStep(int64_t step, double last_compute_s) {
  step_ = step;
  torch::Tensor mine = torch::full({1}, last_compute_s, torch::kFloat64), all = torch::empty({options_.tp}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(options_.comm->AllGather(*options_.team, mine, all));
  std::vector<double> times(all.data_ptr<double>(), all.data_ptr<double>() + options_.tp);
  if (std::all_of(times.begin(), times.end(), [](double t) { return t > 0; })) balancer_.Update(times);
  // This rank's per-layer ratios: its uniform ratio shared out by how much each layer moved.
  layer_ratio_.clear();
  const double ratio = balance().prune_ratio[options_.index];
  if (ratio > 0 && !layers_.empty()) {
    std::vector<double> variation;
    for (const auto& [layer, l] : layers_) variation.push_back(l.mean_variation);
    const std::vector<double> r =
        LayerPruneRatios(variation, ratio, options_.config.layer_decay, options_.config.max_prune_ratio);
    size_t i = 0;
    for (const auto& [layer, l] : layers_) layer_ratio_[layer] = r[i++];
  }
  return Status::Ok();
}

void FlexTpTeam::Refresh(Layer& l, const std::vector<torch::Tensor>& w) {
  torch::NoGradGuard no_grad;
  torch::Tensor now = UnitRows(w).to(torch::kCPU, torch::kFloat64);
  if (!l.previous.defined()) {
    l.previous = now;
    l.variation = torch::zeros({now.size(0)}, torch::kFloat64);
    l.pruned_since = torch::zeros({now.size(0)}, torch::kBool);
  } else {
    // Incremental: a unit pruned since the last refresh keeps its variation and its snapshot.
    torch::Tensor fresh = (now - l.previous).abs().mean(1);
    torch::Tensor keep_old = l.pruned_since;
    l.variation = torch::where(keep_old, l.variation, fresh);
    l.previous = torch::where(keep_old.unsqueeze(1), l.previous, now);
    l.pruned_since.zero_();
  }
  l.mean_variation = l.variation.mean().item<double>();
  l.refreshed_step = step_;
}

torch::Tensor FlexTpTeam::Keep(Layer& l, double ratio, torch::Device device) {
  const int64_t units = options_.costs.units, own = units - balance().given[options_.index];
  const auto prune = static_cast<int64_t>(std::llround(ratio * static_cast<double>(own)));
  if (prune <= 0 && own == units) return {};
  // Priority: the smallest variation first; equal ones round-robin from a point that moves each step.
  const double* var = l.variation.data_ptr<double>();
  std::vector<int64_t> order(own);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (var[a] != var[b]) return var[a] < var[b];
    return (a + units - step_ % units) % units < (b + units - step_ % units) % units;
  });
  bool* pruned = l.pruned_since.data_ptr<bool>();
  for (int64_t i = 0; i < prune; ++i) pruned[order[i]] = true;
  std::vector<int64_t> keep(order.begin() + prune, order.end());
  std::sort(keep.begin(), keep.end());
  return torch::tensor(keep, torch::kInt64).to(device);
}

MlpWork* FlexTpTeam::Work(int layer, const std::vector<torch::Tensor>& w) {
  Layer& l = layers_[layer];
  if (l.built_step == step_) return l.active ? &l.work : nullptr;
  l.built_step = step_;
  l.device = w[6].device();
  l.work = MlpWork();
  l.borrowed.clear();
  torch::NoGradGuard no_grad;
  if (l.refreshed_step < 0 || step_ - l.refreshed_step >= options_.config.stats_interval_steps) Refresh(l, w);
  const TeamBalance& b = balance();
  const int me = options_.index;
  const int64_t units = options_.costs.units;
  auto ratio = layer_ratio_.find(layer);
  l.work.keep = Keep(l, ratio != layer_ratio_.end() ? ratio->second : b.prune_ratio[me], w[6].device());
  // The stragglers' moved units, owner by owner: broadcast from the owner, each receiver keeps its run.
  std::vector<torch::Tensor> rows;
  int64_t at = 0;
  for (int s = 0; s < options_.tp; ++s) {
    const int64_t moved = b.given[s];
    if (moved == 0) continue;
    torch::Tensor block = s == me ? UnitRows(w).narrow(0, units - moved, moved).contiguous()
                                  : torch::empty({moved, 3 * w[6].size(1)}, w[6].options());
    const auto start = std::chrono::steady_clock::now();
    Status st = options_.comm->Broadcast(*options_.team, block, s);
    AddCommTime(start);
    if (!st.ok())
      throw std::runtime_error(fmt::format("FlexTP migration: {}", st.message()));
    for (const UnitMove& m : b.moves)
      if (m.from == s && m.to == me) {
        rows.push_back(block.narrow(0, m.begin - (units - moved), m.count));
        l.borrowed.push_back({s, m.begin, m.count, at});
        at += m.count;
      }
  }
  if (!rows.empty()) {
    const int64_t h = w[6].size(1);
    torch::Tensor all = torch::cat(rows, 0);
    l.work.gate = all.narrow(1, 0, h);
    l.work.up = all.narrow(1, h, h);
    l.work.down = all.narrow(1, 2 * h, h).t();
    auto f32 = w[6].options().dtype(torch::kFloat32);
    l.work.grad_gate = torch::zeros({at, h}, f32);
    l.work.grad_up = torch::zeros({at, h}, f32);
    l.work.grad_down = torch::zeros({h, at}, f32);
  }
  l.active = l.work.keep.defined() || l.work.gate.defined();
  return l.active ? &l.work : nullptr;
}

Status FlexTpTeam::ReturnGradients(int begin, int end, const AddGradient& add) {
  const TeamBalance& b = balance();
  if (b.moves.empty()) return Status::Ok();
  torch::NoGradGuard no_grad;
  const int me = options_.index;
  const int64_t units = options_.costs.units, h = options_.spec.hidden_size;
  for (int layer = begin; layer < end; ++layer) {
    auto it = layers_.find(layer);
    if (it == layers_.end() || it->second.built_step != step_) continue;  // not run here this step
    Layer& l = it->second;
    for (int s = 0; s < options_.tp; ++s) {
      const int64_t moved = b.given[s];
      if (moved == 0) continue;
      torch::Tensor block = torch::zeros({moved, 3 * h}, torch::TensorOptions().dtype(torch::kFloat32).device(l.device));
      for (const Borrowed& r : l.borrowed) {
        if (r.from != s) continue;
        torch::Tensor rows = block.narrow(0, r.begin - (units - moved), r.count);
        rows.narrow(1, 0, h).copy_(l.work.grad_gate.narrow(0, r.at, r.count));
        rows.narrow(1, h, h).copy_(l.work.grad_up.narrow(0, r.at, r.count));
        rows.narrow(1, 2 * h, h).copy_(l.work.grad_down.narrow(1, r.at, r.count).t());
      }
      const auto start = std::chrono::steady_clock::now();
      Status st = options_.comm->AllReduceSum(*options_.team, block);
      AddCommTime(start);
      MOTLEY_RETURN_IF_ERROR(st);
      if (s == me) {
        add(layer, 6, 0, units - moved, block.narrow(1, 0, h));
        add(layer, 7, 0, units - moved, block.narrow(1, h, h));
        add(layer, 8, 1, units - moved, block.narrow(1, 2 * h, h).t());
      }
    }
    if (l.work.grad_gate.defined()) {
      l.work.grad_gate.zero_();
      l.work.grad_up.zero_();
      l.work.grad_down.zero_();
    }
  }
  return Status::Ok();
}

}  // namespace motley
