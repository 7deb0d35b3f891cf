#include "runtime/flextp/flextp_team.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "core/check.h"
#include "core/message_tags.h"
#include "runtime/device/cuda_device.h"
#include "runtime/flextp/resize_pretest.h"

namespace motley {

torch::Tensor UnitRows(const std::vector<torch::Tensor>& w) { return torch::cat({w[6], w[7], w[8].t()}, 1); }

FlexTpTeam::FlexTpTeam(Options options)
    : options_(std::move(options)),
      balancer_(options_.config, options_.tp, ForTeamConfig(options_.costs, options_.config, options_.gpu)) {
  MOTLEY_CHECK(options_.comm != nullptr && options_.team != nullptr);
}

Result<SemiPretest> FlexTpTeam::Pretest() {
  const std::vector<double> ratios = {0.125, 0.25, 0.5};
  const int64_t units = options_.costs.units, h = options_.spec.hidden_size;
  const std::vector<int64_t> counts = {std::max<int64_t>(1, units / 8), std::max<int64_t>(1, units / 4),
                                       std::max<int64_t>(1, units / 2)};
  const torch::Device device = options_.device;
  const auto opts = torch::TensorOptions().dtype(options_.dtype).device(device);
  auto now = [&] {
    SynchronizeDevice(device);
    return std::chrono::steady_clock::now();
  };
  auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  std::vector<double> mine;
  // ZERO-resizing: its overhead at each ratio (resize_pretest.h); the median over the team below.
  for (const auto& point :
       TimeResizeOverhead(units, h, options_.pretest_tokens, device, options_.dtype, ratios))
    mine.push_back(point.second);
  // Migration's borrowed compute (resize_pretest.h), as `motley profile` measures it for the simulator.
  mine.push_back(TimeBorrowedCost(units, h, options_.pretest_tokens, device, options_.dtype));
  {
    // Migration: one layer pass's transfer of `count` units' rows, as the team moves them.
    const int me = options_.index;
    for (int64_t count : counts) {
      torch::Tensor rows = torch::zeros({count, 3 * h}, opts);
      MOTLEY_RETURN_IF_ERROR(options_.comm->Barrier(*options_.team));
      const auto start = now();
      if (broadcast_reduce()) {
        MOTLEY_RETURN_IF_ERROR(options_.comm->Broadcast(*options_.team, rows, 0));
      } else if (me == 0 || me == 1) {
        // (Before the first step no move is in flight: the last move's tag of layer 0 is free.)
        const int64_t tag = Tag(0, false, false, 1023);
        Result<PendingTransfer> t = me == 0 ? options_.comm->Send(rows, options_.team->ranks[1], tag)
                                            : options_.comm->Recv(rows, options_.team->ranks[0], tag);
        MOTLEY_RETURN_IF_ERROR(t.ok() ? t->Wait() : t.status());
      }
      mine.push_back(seconds(start, now()));
    }
  }
  const int64_t n = static_cast<int64_t>(mine.size());
  torch::Tensor all = torch::empty({n * options_.tp}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(options_.comm->AllGather(*options_.team, torch::tensor(mine, torch::kFloat64), all));
  SemiPretest out;
  for (size_t i = 0; i < ratios.size(); ++i) {
    std::vector<double> v;
    for (int r = 0; r < options_.tp; ++r) v.push_back(all[r * n + static_cast<int64_t>(i)].item<double>());
    std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
    out.resize.push_back({ratios[i], std::max(0.0, v[v.size() / 2])});
  }
  {
    std::vector<double> v;
    for (int r = 0; r < options_.tp; ++r)
      v.push_back(all[r * n + static_cast<int64_t>(ratios.size())].item<double>());
    std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
    out.borrowed_cost = v[v.size() / 2];
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    double slowest = 0;
    for (int r = 0; r < options_.tp; ++r)
      slowest = std::max(slowest, all[r * n + static_cast<int64_t>(ratios.size() + 1 + i)].item<double>());
    out.migrate.push_back({static_cast<double>(counts[i]), slowest});
  }
  return out;
}

Status FlexTpTeam::BeginStep(int64_t step, double last_compute_s) {
  MOTLEY_RETURN_IF_ERROR(WaitKeyValueSends());  // (a validation's forwards: no backward waited for them)
  step_ = step;
  if (!pretested_ && options_.pretest_tokens > 0 && options_.config.mode == "semi" &&
      options_.config.semi_solver == "cost-model") {
    pretested_ = true;
    MOTLEY_ASSIGN_OR_RETURN(const SemiPretest pretest, Pretest());
    balancer_.UsePretest(pretest);
    const FlexTpCosts& c = balancer_.costs();
    if (options_.index == 0)
      fmt::print(
          stderr,
          "FlexTP pre-test (team of {} from rank {}): resizing costs {:.1f}% + {:.1f}% x ratio of the MLP's "
          "time; migrating costs {:.3f} ms + {:.4f} ms a unit a step, a borrowed unit computes at {:.2f}x an "
          "own one\n",
          options_.tp, options_.team->ranks.front(), 100 * c.resize_fixed, 100 * c.resize_per_ratio,
          1e3 * c.migrate_s_fixed, 1e3 * c.migrate_s_per_unit, c.borrowed_cost);
  }
  // Each rank's compute time and time in the migration's broadcasts and returns, last step.
  // (The last step's device work is done: the executor waited for it.)
  const double migration_s = migration_clock_.host_s() + migration_clock_.DeviceSeconds();
  migration_clock_.Reset();
  torch::Tensor mine = torch::tensor({last_compute_s, migration_s}, torch::kFloat64);
  torch::Tensor all = torch::empty({2 * options_.tp}, torch::kFloat64);
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
  const double unit_floats = 3 * h, head_floats = 4 * static_cast<double>(options_.spec.head_dim()) * h;
  double per_float = 0;
  int64_t all_given = 0, all_given_heads = 0;
  for (size_t r = 0; r < last.given.size(); ++r)
    all_given += last.given[r], all_given_heads += last.given_heads[r];
  for (int r = 0; r < options_.tp && !last.given.empty(); ++r) {
    // Broadcast-reduce: every rank moves every straggler's block; point to point, its own moves.
    const double floats =
        broadcast_reduce()
            ? unit_floats * static_cast<double>(all_given) +
                  head_floats * static_cast<double>(all_given_heads)
            : unit_floats * static_cast<double>(last.given[r] + last.received(r, false)) +
                  head_floats * static_cast<double>(last.given_heads[r] + last.received(r, true));
    if (floats > 0 && migration[r] > 0 && (per_float == 0 || migration[r] / floats < per_float))
      per_float = migration[r] / floats;
  }
  if (per_float > 0) balancer_.ObserveMigrationCosts(per_float * unit_floats, per_float * head_floats);
  // The team's first step is not judged: it paid the run's one-time costs (allocations, the first
  // use of each kernel and connection), which on the bench's team made one normal rank's step twice
  // the others' and would have moved work to it and from it for a step.
  const bool first_step = ++steps_begun_ == 2;
  if (!first_step && std::all_of(times.begin(), times.end(), [](double t) { return t > 0; }))
    balancer_.Update(times);
  // This rank's per-layer ratios: its uniform ratio shared out by how much each layer moved.
  layer_ratio_.clear();
  const double ratio = balance().prune_ratio[options_.index];
  if (ratio > 0 && !layers_.empty()) {
    std::vector<std::vector<double>> variation;
    for (const auto& [layer, l] : layers_) {
      const torch::Tensor& v = l.priority.variation();
      variation.emplace_back(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
    }
    const std::vector<double> r =
        LayerPruneRatios(variation, ratio, options_.config.layer_decay, options_.config.max_prune_ratio);
    size_t i = 0;
    for (const auto& [layer, l] : layers_) layer_ratio_[layer] = r[i++];
  }
  return Status::Ok();
}

torch::Tensor FlexTpTeam::Keep(Layer& l, double ratio, torch::Device device) {
  const int64_t units = options_.costs.units, own = units - balance().given[options_.index];
  const auto prune = static_cast<int64_t>(std::llround(ratio * static_cast<double>(own)));
  if (prune <= 0 && own == units) return {};
  if (prune <= 0) return torch::arange(own, torch::TensorOptions().dtype(torch::kInt64).device(device));
  return torch::tensor(l.priority.Keep(own, prune, step_), torch::kInt64).to(device);
}

namespace {
// The tag of a lent run's keys and values (or their gradients) in a layer's forward. Transfers of a
// tag match in order, so the forward's number may wrap.
int64_t KeyValueTag(int layer, size_t move, int64_t forward, bool gradient) {
  constexpr int64_t kMovesPerLayer = 1024, kForwards = 64;
  MOTLEY_CHECK_LT(move, static_cast<size_t>(kMovesPerLayer));
  return MessageTag(
      TagRange::kFlexTpKeyValue,
      ((static_cast<int64_t>(layer) * kMovesPerLayer + static_cast<int64_t>(move)) * 2 + (gradient ? 1 : 0)) *
              kForwards +
          forward % kForwards);
}
}  // namespace

int64_t FlexTpTeam::Tag(int layer, bool attention, bool gradients, size_t move) {
  constexpr int64_t kMovesPerLayer = 1024;
  MOTLEY_CHECK_LT(move, static_cast<size_t>(kMovesPerLayer));
  return MessageTag(
      TagRange::kFlexTp,
      ((static_cast<int64_t>(layer) * 2 + (attention ? 1 : 0)) * 2 + (gradients ? 1 : 0)) * kMovesPerLayer +
          static_cast<int64_t>(move));
}

void FlexTpTeam::Send(int layer, int peer, size_t move, int64_t forward, bool gradient, torch::Tensor t) {
  key_value_sent_.push_back(std::move(t));
  key_value_sends_.push_back(options_.comm->Send(key_value_sent_.back(), options_.team->ranks[peer],
                                                 KeyValueTag(layer, move, forward, gradient)));
}

void FlexTpTeam::Receive(int layer, int peer, size_t move, int64_t forward, bool gradient, torch::Tensor& t) {
  // The wait is the executor's communication, not the migration's transfer time (the balancer's
  // per-float cost): it waits for the owner's (or the receiver's) compute.
  const torch::Device device = t.device();
  const CommClock::Mark start = options_.clock != nullptr ? options_.clock->Start(device) : CommClock::Mark{};
  Result<PendingTransfer> r =
      options_.comm->Recv(t, options_.team->ranks[peer], KeyValueTag(layer, move, forward, gradient));
  Status st = r.ok() ? r->Wait() : r.status();
  if (options_.clock != nullptr) options_.clock->Stop(start, device);
  if (!st.ok()) throw std::runtime_error(fmt::format("FlexTP key/value transfer: {}", st.message()));
}

Status FlexTpTeam::WaitKeyValueSends() {
  Status first = Status::Ok();
  for (auto& t : key_value_sends_) {
    Status s = t.ok() ? t->Wait() : t.status();
    if (!s.ok() && first.ok()) first = s;
  }
  key_value_sends_.clear();
  key_value_sent_.clear();
  return first;
}

Status FlexTpTeam::Timed(const torch::Device& device, const std::function<Status()>& communicate) {
  // The executor's clock first: its hook may stretch the compute before the wait, which is not
  // the migration's time.
  const CommClock::Mark start_for_executor =
      options_.clock != nullptr ? options_.clock->Start(device) : CommClock::Mark{};
  const CommClock::Mark start = migration_clock_.Start(device);
  Status s = communicate();
  migration_clock_.Stop(start, device);
  if (options_.clock != nullptr) options_.clock->Stop(start_for_executor, device);
  return s;
}

Status FlexTpTeam::WaitAll(std::vector<Result<PendingTransfer>>& transfers, const torch::Device& device) {
  return Timed(device, [&] {
    Status first = Status::Ok();
    for (auto& t : transfers) {
      Status s = t.ok() ? t->Wait() : t.status();
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  });
}

std::vector<FlexTpTeam::Block> FlexTpTeam::Blocks(bool attention) const {
  const TeamBalance& b = balance();
  const int64_t total = attention ? options_.costs.heads : options_.costs.units;
  std::vector<Block> out;
  for (int s = 0; s < options_.tp; ++s) {
    const int64_t count = (attention ? b.given_heads : b.given)[s];
    if (count > 0) out.push_back({s, total - count, count});
  }
  return out;
}

torch::Tensor FlexTpTeam::Borrow(int layer, bool attention, const OwnRows& own_rows,
                                 std::vector<int64_t> row_shape, torch::TensorOptions options,
                                 torch::Tensor& buffer, std::vector<Borrowed>* out) {
  const TeamBalance& b = balance();
  const int me = options_.index;
  int64_t at = 0;
  for (const UnitMove& m : b.moves)
    if (m.attention == attention && m.to == me) at += m.count;
  if (at == 0) buffer = torch::Tensor();
  row_shape[0] = at;
  if (at > 0 && (!buffer.defined() || buffer.sizes() != torch::IntArrayRef(row_shape) ||
                 buffer.dtype() != options.dtype() || buffer.device() != options.device()))
    buffer = torch::empty(row_shape, options);
  at = 0;
  if (broadcast_reduce()) {
    // Each straggler broadcasts its whole block to the team (all ranks take part: a c10d
    // broadcast is the group's); each receiver computes its runs of it (virtual renumbering).
    for (const Block& block : Blocks(attention)) {
      row_shape[0] = block.count;
      torch::Tensor whole = block.from == me ? own_rows(block.begin, block.count).contiguous()
                                             : torch::empty(row_shape, options);
      Status st = Timed(options.device(),
                        [&] { return options_.comm->Broadcast(*options_.team, whole, block.from); });
      if (!st.ok()) throw std::runtime_error(fmt::format("FlexTP migration: {}", st.message()));
      for (size_t j = 0; j < b.moves.size(); ++j) {
        const UnitMove& m = b.moves[j];
        if (m.attention != attention || m.from != block.from || m.to != me) continue;
        buffer.narrow(0, at, m.count).copy_(whole.narrow(0, m.begin - block.begin, m.count));
        out->push_back({m.from, m.begin, m.count, at, attention, j});
        at += m.count;
      }
    }
    return at > 0 ? buffer : torch::Tensor();
  }
  std::vector<torch::Tensor> sent;
  std::vector<Result<PendingTransfer>> transfers;
  for (size_t j = 0; j < b.moves.size(); ++j) {
    const UnitMove& m = b.moves[j];
    if (m.attention != attention) continue;
    const int64_t tag = Tag(layer, attention, false, j);
    if (m.from == me) {  // own units [m.begin, m.begin + m.count) go to m.to
      sent.push_back(own_rows(m.begin, m.count).contiguous());
      transfers.push_back(options_.comm->Send(sent.back(), options_.team->ranks[m.to], tag));
    } else if (m.to == me) {
      torch::Tensor rows = buffer.narrow(0, at, m.count);  // (its first dimension's: contiguous)
      transfers.push_back(options_.comm->Recv(rows, options_.team->ranks[m.from], tag));
      out->push_back({m.from, m.begin, m.count, at, attention, j});
      at += m.count;
    }
  }
  Status st = WaitAll(transfers, options.device());
  if (!st.ok()) throw std::runtime_error(fmt::format("FlexTP migration: {}", st.message()));
  return at > 0 ? buffer : torch::Tensor();
}

LayerWork* FlexTpTeam::Work(int layer, const std::vector<torch::Tensor>& w) {
  Layer& l = layers_[layer];
  if (l.built_step == step_) return l.active ? &l.work : nullptr;
  l.built_step = step_;
  l.device = w[6].device();
  l.dtype = w[6].scalar_type();
  // (The last step's accumulators were zeroed when their gradients went home.)
  l.grad_gate = l.work.grad_gate, l.grad_up = l.work.grad_up, l.grad_down = l.work.grad_down;
  l.grad_attention = l.work.grad_attention;
  l.work = LayerWork();
  l.borrowed.clear();
  torch::NoGradGuard no_grad;
  // The pruning priorities, only where the team may prune: their refresh copies every unit's weights
  // in fp64 (a spike every stats_interval_steps that a migrating team would pay for nothing).
  const bool may_prune = options_.config.mode == "resize" || options_.config.mode == "semi";
  if (may_prune && (!l.priority.refreshed() ||
                    step_ - l.priority.refreshed_step() >= options_.config.stats_interval_steps))
    l.priority.Refresh(UnitRows(w), step_);
  const TeamBalance& b = balance();
  const int me = options_.index;
  const int64_t h = w[6].size(1);
  auto ratio = layer_ratio_.find(layer);
  l.work.keep = Keep(l, ratio != layer_ratio_.end() ? ratio->second : b.prune_ratio[me], w[6].device());
  if (b.given_heads[me] > 0) l.work.attention_keep = options_.costs.heads - b.given_heads[me];
  if (may_prune && balancer_.costs().attention_prunable > 0) {  // ZERO-resizing of the attention's features
    if (!l.attention_priority.refreshed() ||
        step_ - l.attention_priority.refreshed_step() >= options_.config.stats_interval_steps)
      l.attention_priority.Refresh(AttentionFeatureRows(w), step_);
    const double r = ratio != layer_ratio_.end() ? ratio->second : b.prune_ratio[me];
    const auto prune = static_cast<int64_t>(std::llround(r * static_cast<double>(h)));
    if (prune > 0 && l.work.attention_keep != 0)
      l.work.attention_features =
          torch::tensor(l.attention_priority.Keep(h, prune, step_), torch::kInt64).to(l.device);
  }
  const auto master = w[6].options();  // the gradients in the master dtype
  // MLP units, then query heads.
  // An accumulator of `sizes`: the last step's when it has them (zeroed since), else a new one.
  auto zeros = [&](const torch::Tensor& last, std::vector<int64_t> sizes) {
    return last.defined() && last.sizes() == torch::IntArrayRef(sizes) && last.dtype() == master.dtype()
               ? last
               : torch::zeros(sizes, master);
  };
  const torch::Tensor units = Borrow(
      layer, false,
      [&](int64_t begin, int64_t count) {
        return torch::cat(
            {w[6].narrow(0, begin, count), w[7].narrow(0, begin, count), w[8].narrow(1, begin, count).t()},
            1);
      },
      {0, 3 * h}, w[6].options(), l.received[0], &l.borrowed);
  if (units.defined()) {
    l.work.gate = units.narrow(1, 0, h);
    l.work.up = units.narrow(1, h, h);
    l.work.down = units.narrow(1, 2 * h, h).t();
    l.work.grad_gate = zeros(l.grad_gate, {units.size(0), h});
    l.work.grad_up = zeros(l.grad_up, {units.size(0), h});
    l.work.grad_down = zeros(l.grad_down, {h, units.size(0)});
  }
  const int64_t head_rows = 4 * options_.spec.head_dim();
  const torch::Tensor heads = options_.costs.heads > 0
                                  ? Borrow(
                                        layer, true,
                                        [&, packed = torch::Tensor()](int64_t begin, int64_t count) mutable {
                                          // (Packed once, whatever the number of runs lent.)
                                          if (!packed.defined()) packed = AttentionHeadRows(options_.spec, w);
                                          return packed.narrow(0, begin, count);
                                        },
                                        {0, head_rows, h}, w[1].options(), l.received[1], &l.borrowed)
                                  : torch::Tensor();
  // Point to point, lent heads' keys and values travel from their owner every forward.
  const bool link = !broadcast_reduce() && options_.costs.heads > 0;
  l.work.layer = layer;
  l.work.link = link ? this : nullptr;
  l.work.lend_projections = link && b.lend_projections;
  if (link)
    for (size_t j = 0; j < b.moves.size(); ++j)
      if (b.moves[j].attention && b.moves[j].from == me)
        l.work.lent.push_back({b.moves[j].to, j, b.moves[j].begin, b.moves[j].count});
  if (heads.defined()) {
    l.work.attention = heads;
    l.work.grad_attention = zeros(l.grad_attention, heads.sizes().vec());
    const int64_t per = options_.spec.num_heads / options_.spec.num_kv_heads;
    for (const Borrowed& r : l.borrowed)
      if (r.attention)
        l.work.attention_runs.push_back({r.at, r.count, r.begin % per, link ? r.from : -1, r.move});
  }
  l.active = l.work.keep.defined() || l.work.gate.defined() || l.work.attention_keep >= 0 ||
             heads.defined() || l.work.attention_features.defined() || !l.work.lent.empty();
  return l.active ? &l.work : nullptr;
}

Status FlexTpTeam::ReturnGradients(int begin, int end, const AddGradient& add) {
  MOTLEY_RETURN_IF_ERROR(WaitKeyValueSends());
  const TeamBalance& b = balance();
  if (b.moves.empty()) return Status::Ok();
  torch::NoGradGuard no_grad;
  const int me = options_.index;
  const int64_t h = options_.spec.hidden_size;
  const int64_t head_rows = 4 * options_.spec.head_dim();
  // The layers run here this step (every rank of the team ran the same ones). All their returns go
  // at once — one sum-reduce per straggler and kind, or every run's transfer posted before any is
  // waited for — so a backward pays one exchange's latency, not one per layer.
  std::vector<std::pair<int, Layer*>> ran;
  for (int layer = begin; layer < end; ++layer) {
    auto it = layers_.find(layer);
    if (it != layers_.end() && it->second.built_step == step_) ran.emplace_back(layer, &it->second);
  }
  if (ran.empty()) return Status::Ok();
  const torch::Device device = ran.front().second->device;
  const auto master = torch::TensorOptions().dtype(ran.front().second->dtype).device(device);
  // A borrowed run's gradients packed as its weights were.
  auto packed = [&](const Layer& l, const Borrowed& r) {
    return r.attention ? l.work.grad_attention.narrow(0, r.at, r.count)
                       : torch::cat({l.work.grad_gate.narrow(0, r.at, r.count),
                                     l.work.grad_up.narrow(0, r.at, r.count),
                                     l.work.grad_down.narrow(1, r.at, r.count).t()},
                                    1);
  };
  // The owner adds the gradients of its units (or heads) [begin, begin + g.size(0)) of `layer`. A
  // head's key and value rows are its group's: every copy's gradient is summed into them.
  auto add_home = [&](int layer, bool attention, int64_t begin, const torch::Tensor& g) {
    if (attention) {
      const HeadParts p = SumHeadRows(options_.spec, begin, g);
      add(layer, 1, 0, p.q_row, p.q);
      add(layer, 2, 0, p.kv_row, p.k);
      add(layer, 3, 0, p.kv_row, p.v);
      add(layer, 4, 1, p.q_row, p.o);
    } else {
      add(layer, 6, 0, begin, g.narrow(1, 0, h));
      add(layer, 7, 0, begin, g.narrow(1, h, h));
      add(layer, 8, 1, begin, g.narrow(1, 2 * h, h).t());
    }
  };
  if (broadcast_reduce()) {
    // Per straggler and kind, one sum-reduce of its blocks of every layer run: each receiver's runs
    // in place, zeros elsewhere (adding zeros is exact), so the owner gets every run's gradients at once.
    const auto layers = static_cast<int64_t>(ran.size());
    for (const bool attention : {false, true})
      for (const Block& block : Blocks(attention)) {
        torch::Tensor sum = attention ? torch::zeros({layers, block.count, head_rows, h}, master)
                                      : torch::zeros({layers, block.count, 3 * h}, master);
        for (int64_t i = 0; i < layers; ++i)
          for (const Borrowed& r : ran[static_cast<size_t>(i)].second->borrowed)
            if (r.attention == attention && r.from == block.from)
              sum[i]
                  .narrow(0, r.begin - block.begin, r.count)
                  .copy_(packed(*ran[static_cast<size_t>(i)].second, r));
        MOTLEY_RETURN_IF_ERROR(
            Timed(device, [&] { return options_.comm->ReduceSum(*options_.team, sum, block.from); }));
        if (block.from == me)
          for (int64_t i = 0; i < layers; ++i)
            add_home(ran[static_cast<size_t>(i)].first, attention, block.begin, sum[i]);
      }
  } else {
    // Receivers send each borrowed run's gradients home (packed as the weights were); owners receive
    // them — every layer's at once (each transfer has its layer's tag).
    std::vector<torch::Tensor> sent, received;
    std::vector<Result<PendingTransfer>> transfers;
    struct Incoming {
      int layer;
      const UnitMove* move;
    };
    std::vector<Incoming> incoming;
    for (const auto& [layer, l] : ran) {
      for (const Borrowed& r : l->borrowed) {
        sent.push_back(packed(*l, r).contiguous());
        transfers.push_back(options_.comm->Send(sent.back(), options_.team->ranks[r.from],
                                                Tag(layer, r.attention, true, r.move)));
      }
      // In the order the receivers send them (transfers of a tag match in order): MLP runs, then heads.
      for (size_t k = 0; k < 2 * b.moves.size(); ++k) {
        const size_t j = k % b.moves.size();
        const UnitMove& m = b.moves[j];
        if (m.from != me || m.attention != (k >= b.moves.size())) continue;
        received.push_back(m.attention ? torch::empty({m.count, head_rows, h}, master)
                                       : torch::empty({m.count, 3 * h}, master));
        transfers.push_back(options_.comm->Recv(received.back(), options_.team->ranks[m.to],
                                                Tag(layer, m.attention, true, j)));
        incoming.push_back({layer, &m});
      }
    }
    MOTLEY_RETURN_IF_ERROR(WaitAll(transfers, device));
    for (size_t i = 0; i < incoming.size(); ++i)
      add_home(incoming[i].layer, incoming[i].move->attention, incoming[i].move->begin, received[i]);
  }
  for (auto& [layer, l] : ran)
    for (torch::Tensor* g :
         {&l->work.grad_gate, &l->work.grad_up, &l->work.grad_down, &l->work.grad_attention})
      if (g->defined()) g->zero_();
  return Status::Ok();
}

}  // namespace motley
