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
  // Per token and layer (multiply-adds x 2): the MLP's three matrices; the attention's four, and
  // the scores and their weighted sum. The rest of a rank's work (norms, embedding, head, the
  // optimizer) is put at a tenth.
  const double mlp = 6 * h * f, attention = 2 * (2 * h * h + 2 * h * kv) + 4 * s * h;
  FlexTpCosts c;
  c.units = spec.ffn_size / tp;
  c.groups = spec.num_kv_heads / tp;
  c.mlp_fraction = 0.9 * mlp / (mlp + attention);
  c.attention_fraction = 0.9 * attention / (mlp + attention);
  const double bandwidth = cluster.LinkBetween(a, b).bandwidth_bytes_per_s;
  const double per_step = static_cast<double>(layer_visits + layer_backwards);
  const double unit_bytes = 3 * h * 4;  // a gate row, an up row and a down column in fp32
  const double group_bytes = (2.0 * static_cast<double>(spec.num_heads / spec.num_kv_heads) + 2) *
                             static_cast<double>(spec.head_dim()) * h * 4;
  if (bandwidth > 0 && a != b) {
    c.migrate_s_per_unit = unit_bytes * per_step / bandwidth;
    c.migrate_s_per_group = group_bytes * per_step / bandwidth;
  }
  return c;
}

void FlexTpTeam::AddCommTime(std::chrono::steady_clock::time_point start) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  migration_s_ += s;
  if (options_.comm_s != nullptr) *options_.comm_s += s;
}

FlexTpTeam::FlexTpTeam(Options options)
    : options_(std::move(options)), balancer_(options_.config, options_.tp, options_.costs) {
  MOTLEY_CHECK(options_.comm != nullptr && options_.team != nullptr);
}

Status FlexTpTeam::BeginStep(int64_t step, double last_compute_s) {
  step_ = step;
  // Each rank's compute time and time in the migration's broadcasts and returns, last step.
  torch::Tensor mine = torch::tensor({last_compute_s, migration_s_}, torch::kFloat64);
  torch::Tensor all = torch::empty({2 * options_.tp}, torch::kFloat64);
  migration_s_ = 0;
  MOTLEY_RETURN_IF_ERROR(options_.comm->AllGather(*options_.team, mine, all));
  std::vector<double> times, migration;
  for (int r = 0; r < options_.tp; ++r) {
    times.push_back(all[2 * r].item<double>());
    migration.push_back(all[2 * r + 1].item<double>());
  }
  // The migration's measured cost per moved float and step: the rank that waited least (its
  // broadcasts and returns waited on nobody) tells the transfer time.
  const TeamBalance& last = balance();
  const double h = static_cast<double>(options_.spec.hidden_size);
  const double unit_floats = 3 * h,
               group_floats = (2.0 * options_.spec.num_heads / options_.spec.num_kv_heads + 2) *
                              static_cast<double>(options_.spec.head_dim()) * h;
  double per_float = 0;
  for (int r = 0; r < options_.tp && !last.given.empty(); ++r) {
    const double floats = unit_floats * static_cast<double>(last.given[r] + last.received(r, false)) +
                          group_floats * static_cast<double>(last.given_groups[r] + last.received(r, true));
    if (floats > 0 && migration[r] > 0 && (per_float == 0 || migration[r] / floats < per_float))
      per_float = migration[r] / floats;
  }
  if (per_float > 0) balancer_.ObserveMigrationCosts(per_float * unit_floats, per_float * group_floats);
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

torch::Tensor FlexTpTeam::Borrow(bool attention, const torch::Tensor& own_rows, std::vector<int64_t> row_shape,
                                 torch::TensorOptions options, std::vector<Borrowed>* out) {
  const TeamBalance& b = balance();
  const int me = options_.index;
  const int64_t total = attention ? options_.costs.groups : options_.costs.units;
  std::vector<torch::Tensor> rows;
  int64_t at = 0;
  // Owner by owner: its moved rows broadcast from it, each receiver keeps its run.
  for (int s = 0; s < options_.tp; ++s) {
    const int64_t moved = (attention ? b.given_groups : b.given)[s];
    if (moved == 0) continue;
    row_shape[0] = moved;
    torch::Tensor block = s == me ? own_rows.narrow(0, total - moved, moved).contiguous() : torch::empty(row_shape, options);
    const auto start = std::chrono::steady_clock::now();
    Status st = options_.comm->Broadcast(*options_.team, block, s);
    AddCommTime(start);
    if (!st.ok()) throw std::runtime_error(fmt::format("FlexTP migration: {}", st.message()));
    for (const UnitMove& m : b.moves)
      if (m.from == s && m.to == me && m.attention == attention) {
        rows.push_back(block.narrow(0, m.begin - (total - moved), m.count));
        out->push_back({s, m.begin, m.count, at, attention});
        at += m.count;
      }
  }
  return rows.empty() ? torch::Tensor() : torch::cat(rows, 0);
}

LayerWork* FlexTpTeam::Work(int layer, const std::vector<torch::Tensor>& w) {
  Layer& l = layers_[layer];
  if (l.built_step == step_) return l.active ? &l.work : nullptr;
  l.built_step = step_;
  l.device = w[6].device();
  l.work = LayerWork();
  l.borrowed.clear();
  torch::NoGradGuard no_grad;
  if (l.refreshed_step < 0 || step_ - l.refreshed_step >= options_.config.stats_interval_steps) Refresh(l, w);
  const TeamBalance& b = balance();
  const int me = options_.index;
  const int64_t h = w[6].size(1);
  auto ratio = layer_ratio_.find(layer);
  l.work.keep = Keep(l, ratio != layer_ratio_.end() ? ratio->second : b.prune_ratio[me], w[6].device());
  if (b.given_groups[me] > 0) l.work.attention_keep = options_.costs.groups - b.given_groups[me];
  const auto f32 = w[6].options().dtype(torch::kFloat32);
  // MLP units, then attention groups.
  const torch::Tensor units = Borrow(false, b.given[me] > 0 ? UnitRows(w) : torch::Tensor(), {0, 3 * h},
                                     w[6].options(), &l.borrowed);
  if (units.defined()) {
    l.work.gate = units.narrow(1, 0, h);
    l.work.up = units.narrow(1, h, h);
    l.work.down = units.narrow(1, 2 * h, h).t();
    l.work.grad_gate = torch::zeros({units.size(0), h}, f32);
    l.work.grad_up = torch::zeros({units.size(0), h}, f32);
    l.work.grad_down = torch::zeros({h, units.size(0)}, f32);
  }
  const int64_t group_rows = (2 * options_.spec.num_heads / options_.spec.num_kv_heads + 2) * options_.spec.head_dim();
  const torch::Tensor groups =
      options_.costs.groups > 0
          ? Borrow(true, b.given_groups[me] > 0 ? AttentionGroupRows(options_.spec, w) : torch::Tensor(),
                   {0, group_rows, h}, w[1].options(), &l.borrowed)
          : torch::Tensor();
  if (groups.defined()) {
    l.work.attention = groups;
    l.work.grad_attention = torch::zeros(groups.sizes(), f32);
  }
  l.active = l.work.keep.defined() || l.work.gate.defined() || l.work.attention_keep >= 0 || groups.defined();
  return l.active ? &l.work : nullptr;
}

Status FlexTpTeam::ReturnGradients(int begin, int end, const AddGradient& add) {
  const TeamBalance& b = balance();
  if (b.moves.empty()) return Status::Ok();
  torch::NoGradGuard no_grad;
  const int me = options_.index;
  const int64_t units = options_.costs.units, groups = options_.costs.groups, h = options_.spec.hidden_size;
  const int64_t d = options_.spec.head_dim(), per = options_.spec.num_heads / options_.spec.num_kv_heads;
  const int64_t group_rows = (2 * per + 2) * d;
  for (int layer = begin; layer < end; ++layer) {
    auto it = layers_.find(layer);
    if (it == layers_.end() || it->second.built_step != step_) continue;  // not run here this step
    Layer& l = it->second;
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(l.device);
    for (bool attention : {false, true})
      for (int s = 0; s < options_.tp; ++s) {
        const int64_t moved = (attention ? b.given_groups : b.given)[s];
        if (moved == 0) continue;
        const int64_t total = attention ? groups : units;
        torch::Tensor block = attention ? torch::zeros({moved, group_rows, h}, f32) : torch::zeros({moved, 3 * h}, f32);
        for (const Borrowed& r : l.borrowed) {
          if (r.from != s || r.attention != attention) continue;
          torch::Tensor rows = block.narrow(0, r.begin - (total - moved), r.count);
          if (attention) {
            rows.copy_(l.work.grad_attention.narrow(0, r.at, r.count));
          } else {
            rows.narrow(1, 0, h).copy_(l.work.grad_gate.narrow(0, r.at, r.count));
            rows.narrow(1, h, h).copy_(l.work.grad_up.narrow(0, r.at, r.count));
            rows.narrow(1, 2 * h, h).copy_(l.work.grad_down.narrow(1, r.at, r.count).t());
          }
        }
        const auto start = std::chrono::steady_clock::now();
        Status st = options_.comm->AllReduceSum(*options_.team, block);
        AddCommTime(start);
        MOTLEY_RETURN_IF_ERROR(st);
        if (s != me) continue;
        const int64_t first = total - moved;
        if (attention) {
          add(layer, 1, 0, first * per * d, block.narrow(1, 0, per * d).reshape({-1, h}));
          add(layer, 2, 0, first * d, block.narrow(1, per * d, d).reshape({-1, h}));
          add(layer, 3, 0, first * d, block.narrow(1, (per + 1) * d, d).reshape({-1, h}));
          add(layer, 4, 1, first * per * d, block.narrow(1, (per + 2) * d, per * d).reshape({-1, h}).t());
        } else {
          add(layer, 6, 0, first, block.narrow(1, 0, h));
          add(layer, 7, 0, first, block.narrow(1, h, h));
          add(layer, 8, 1, first, block.narrow(1, 2 * h, h).t());
        }
      }
    for (torch::Tensor* g : {&l.work.grad_gate, &l.work.grad_up, &l.work.grad_down, &l.work.grad_attention})
      if (g->defined()) g->zero_();
  }
  return Status::Ok();
}

}  // namespace motley
