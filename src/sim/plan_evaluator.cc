#include "sim/plan_evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "plan/lower.h"
#include "plan/plan_io.h"
#include "sim/region_traffic.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace {

// A plan's hash over what it runs (the evaluator's memory; equal plans hash alike, and plans of one
// hash are told apart by every field: Plan::operator==).
size_t PlanHash(const Plan& plan) {
  size_t h = 0;
  auto mix = [&h](int64_t v) { h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(plan.seq_len);
  mix(static_cast<int64_t>(plan.precision));
  mix(static_cast<int64_t>(plan.schedule));
  mix(plan.zero_stage);
  mix((plan.activation_checkpointing ? 1 : 0) | (plan.offload_params ? 2 : 0) |
      (plan.offload_activations ? 4 : 0) | (plan.gradient_clipping ? 8 : 0) | (plan.loss_scaling ? 16 : 0));
  for (const GroupPlan& g : plan.groups) {
    mix(g.tp_degree);
    for (const LayerRange& r : g.ministages) mix(int64_t{r.begin} << 32 | r.end);
    for (const DevicePlan& d : g.devices) {
      mix(d.device);
      mix(d.microbatch_size);
      mix(d.num_microbatches);
      mix(d.last_microbatch_size);
    }
    for (const int r : g.routing) mix(r);
  }
  return h;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The least time one microbatch's forward (or backward) takes through the layers before `first_layer`
// in a pipeline: each ministage there on the fastest device of its group, at the smallest microbatch.
double LeastThroughLayersBeforeS(const Plan& plan, const CostModel& costs, int first_layer, OpKind kind,
                                 int64_t sequences) {
  double total_s = 0;
  for (const GroupPlan& g : plan.groups)
    for (const LayerRange& layers : g.ministages) {
      if (layers.end > first_layer) continue;
      Op pass;
      pass.kind = kind;
      pass.layer_begin = layers.begin;
      pass.layer_end = layers.end;
      pass.tp_degree = g.tp_degree;
      pass.sequences = sequences;
      double fastest_s = std::numeric_limits<double>::infinity();
      for (const DevicePlan& d : g.devices) fastest_s = std::min(fastest_s, costs.ComputeS(d.device, pass));
      total_s += fastest_s;
    }
  return total_s;
}

// The busiest device's sends in a pipeline without tensor parallelism: each microbatch's boundary
// activation forward and its gradient backward, between the devices its groups route it to, run one
// after another on the sender's link (the simulator's kSend).
double BusiestSendsS(const Plan& plan, const ModelSpec& model, const CostModel& costs) {
  if (!plan.is_pipeline()) return 0;
  std::vector<std::vector<int>> routing;
  for (const GroupPlan& g : plan.groups) {
    if (g.tp_degree != 1) return 0;
    routing.push_back(g.routing.empty() ? BlockRouting(g) : g.routing);
  }
  const double bytes = static_cast<double>(plan.groups[0].devices[0].microbatch_size) *
                       static_cast<double>(plan.seq_len) * static_cast<double>(model.hidden_size) *
                       BytesPerElement(plan.precision);
  // Messages a (sender, receiver) pair carries, all of `bytes`.
  std::map<std::pair<int, int>, int64_t> messages;
  const std::vector<PlacedMinistage> ministages = MinistagesByLayer(plan);
  for (size_t v = 0; v + 1 < ministages.size(); ++v) {
    const auto& from = routing[static_cast<size_t>(ministages[v].group)];
    const auto& to = routing[static_cast<size_t>(ministages[v + 1].group)];
    if (&from == &to) continue;
    for (size_t m = 0; m < from.size() && m < to.size(); ++m) {
      ++messages[{from[m], to[m]}];
      ++messages[{to[m], from[m]}];
    }
  }
  std::map<int, double> sends_s;
  for (const auto& [pair, count] : messages)
    sends_s[pair.first] += static_cast<double>(count) * costs.TransferS(pair.first, pair.second, bytes);
  double most_s = 0;
  for (const auto& [device, s] : sends_s) most_s = std::max(most_s, s);
  return most_s;
}

// A lower bound of the plan's step from the plan alone: the busiest device's sends in a pipeline, and each
// device's forwards and backwards over its group's layers (no head, no update: less than its compute ops will
// take) — in a pipeline after the first microbatch's forward through the layers before its group's first and
// before the last one's backward through them (a device's first compute waits for the one, its last is a
// backward that the other follows) — and each group's gradient reduction.
double LeastStepFromPlanS(const Plan& plan, const ModelSpec& model, const CostModel& costs) {
  double least_s = BusiestSendsS(plan, model, costs);
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (const GroupPlan& g : plan.groups)
    for (const DevicePlan& d : g.devices)
      for (int64_t i = 0; i < d.num_microbatches; ++i)
        if (d.microbatch_size_at(i) > 0) smallest = std::min(smallest, d.microbatch_size_at(i));
  for (const GroupPlan& g : plan.groups) {
    double before_s = 0;  // the first microbatch's forward and the last one's backward, before this group
    if (plan.is_pipeline() && smallest != std::numeric_limits<int64_t>::max()) {
      int first_layer = model.num_layers;
      for (const LayerRange& layers : g.ministages) first_layer = std::min(first_layer, layers.begin);
      before_s = LeastThroughLayersBeforeS(plan, costs, first_layer, OpKind::kForward, smallest) +
                 LeastThroughLayersBeforeS(plan, costs, first_layer, OpKind::kBackward, smallest);
    }
    Op pass;
    pass.layer_begin = 0;
    pass.layer_end = g.num_layers();  // (compute takes the count of layers, not where they are)
    pass.tp_degree = g.tp_degree;
    const size_t tp_size = static_cast<size_t>(std::max(1, g.tp_degree));
    for (size_t di = 0; di < g.devices.size(); ++di) {
      const DevicePlan& d = g.devices[di];
      // A tensor-parallel team's all-reduces block its compute (lower_task.cc): two per layer
      // in the forward, two in the backward and two more in its recomputed forward.
      std::vector<int> team;
      for (size_t k = 0; tp_size > 1 && k < tp_size && di - di % tp_size + k < g.devices.size(); ++k)
        team.push_back(g.devices[di - di % tp_size + k].device);
      const double tp_calls = 2.0 * g.num_layers() * (plan.activation_checkpointing ? 3 : 2);
      // Each microbatch size's costs found once (a device may run thousands of microbatches, most
      // of one size), added microbatch by microbatch as before.
      struct SizeCosts {
        double forward_s, backward_s, tp_s;
      };
      std::map<int64_t, SizeCosts> of_size;
      double device_s = 0;
      for (int64_t i = 0; i < d.num_microbatches; ++i) {
        pass.sequences = d.microbatch_size_at(i);
        auto it = of_size.find(pass.sequences);
        if (it == of_size.end()) {
          SizeCosts c{};
          pass.kind = OpKind::kForward;
          c.forward_s = costs.ComputeS(d.device, pass);
          pass.kind = OpKind::kBackward;
          c.backward_s = costs.ComputeS(d.device, pass);
          if (team.size() > 1)
            c.tp_s =
                tp_calls * costs.CollectiveS(
                               OpKind::kAllReduce, team,
                               static_cast<double>(pass.sequences) * static_cast<double>(plan.seq_len) *
                                   static_cast<double>(model.hidden_size) * BytesPerElement(plan.precision));
          it = of_size.emplace(pass.sequences, c).first;
        }
        device_s += it->second.forward_s;
        device_s += it->second.backward_s;
        if (team.size() > 1) device_s += it->second.tp_s;
      }
      least_s = std::max(least_s, before_s + device_s);
    }
    // And a group of several replicas synchronises its layers every step, on each rank's
    // communication stream (one collective at a time): ZeRO-0 all-reduces the gradients;
    // ZeRO >= 1 reduce-scatters them and all-gathers the updated parameters (ZeRO-3: at
    // least once). Split into several collectives, each call pays its fixed costs again.
    const size_t tp = static_cast<size_t>(std::max(1, g.tp_degree));
    if (g.devices.size() / tp > 1) {
      std::vector<int> ring;
      for (size_t i = 0; i < g.devices.size(); i += tp) ring.push_back(g.devices[i].device);
      const double params = static_cast<double>(g.num_layers()) * static_cast<double>(ParamsPerLayer(model)) /
                            static_cast<double>(tp);
      const StateBytesPerParam bytes = StateBytes(plan.precision);
      least_s =
          std::max(least_s, plan.zero_stage == 0
                                ? costs.CollectiveS(OpKind::kAllReduce, ring, params * bytes.grads)
                                : costs.CollectiveS(OpKind::kReduceScatter, ring, params * bytes.grads) +
                                      costs.CollectiveS(OpKind::kAllGather, ring, params * bytes.params));
    }
  }
  return least_s;
}

// The busiest rank's compute in an emitted schedule (its compute ops run one after another, a
// tensor-parallel team's all-reduces inside them).
double BusiestComputeS(const Schedule& emitted, const CostModel& costs) {
  double most_s = 0;
  std::vector<double> tp_collective_s(emitted.collectives.size(),
                                      -1);  // a team's all-reduces, once each
  for (const Program& p : emitted.programs) {
    double rank_s = 0;
    for (const Op& op : p.ops) {
      if (IsCompute(op.kind)) rank_s += costs.ComputeS(p.device, op);
      // A tensor-parallel team's all-reduces block its compute, as the simulator runs them.
      if (IsCollective(op.kind) && op.collective >= 0 && emitted.collectives[op.collective].tensor_parallel) {
        double& c_s = tp_collective_s[op.collective];
        if (c_s < 0) {
          const Collective& c = emitted.collectives[op.collective];
          std::vector<int> devices;
          for (const int32_t r : c.ranks) devices.push_back(emitted.programs[r].device);
          c_s = c.calls * costs.CollectiveS(c.kind, devices, c.bytes / std::max(1, c.calls));
        }
        rank_s += c_s;
      }
    }
    most_s = std::max(most_s, rank_s);
  }
  return most_s;
}
}  // namespace

std::vector<int64_t> DeviceCostClasses(const Cluster& cluster, const CostModel& costs) {
  using Key =
      std::tuple<std::string, const void*, std::string, double, double, double, double, double, double>;
  std::map<Key, int64_t> classes;
  std::vector<int64_t> out;
  Op probe;
  probe.kind = OpKind::kForward;
  probe.layer_begin = 0;
  probe.layer_end = 1;
  probe.sequences = 1;
  for (size_t d = 0; d < cluster.devices.size(); ++d) {
    const int device = static_cast<int>(d);
    const Key key{cluster.spec(device).name,     costs.Entry(device),
                  costs.ComputeSource(device),   costs.Slowdown(device),
                  costs.PeakFlops(device),       costs.CopyS(device, 1 << 30),
                  costs.ComputeS(device, probe), cluster.usable_memory_bytes(device),
                  cluster.reserve_bytes(device)};
    out.push_back(classes.try_emplace(key, static_cast<int64_t>(classes.size())).first->second);
  }
  return out;
}

PlanEvaluator SimulationEvaluator(const Cluster& cluster, const ModelSpec& model, const CostModel& costs,
                                  EvaluationStats* stats) {
  struct Seen {
    Plan plan;
    PlanEvaluation evaluation;
    double
        bound_s;  // the bound it was simulated under (a stopped one answers again only under one no higher)
  };
  struct Memory {
    std::mutex mutex;  // the evaluator is called from several threads (evaluate_all.h)
    // Each plan's evaluation, by its hash (PlanHash: plans of one hash told apart by their fields).
    std::unordered_map<size_t, std::vector<Seen>> seen;
    Seen* Find(size_t hash, const Plan& plan) {
      auto it = seen.find(hash);
      if (it == seen.end()) return nullptr;
      for (Seen& s : it->second)
        if (s.plan == plan) return &s;
      return nullptr;
    }
    void Remember(size_t hash, Plan plan, const PlanEvaluation& e, double bound_s) {
      if (Seen* s = Find(hash, plan)) {
        s->evaluation = e;
        s->bound_s = bound_s;
      } else {
        seen[hash].push_back({std::move(plan), e, bound_s});
      }
    }
  };
  auto memory = std::make_shared<Memory>();
  auto device_class = std::make_shared<const std::vector<int64_t>>(DeviceCostClasses(cluster, costs));
  return [&cluster, &model, &costs, stats, memory, device_class](
             const Plan& given, const EvaluateBound& bound) -> Result<PlanEvaluation> {
    Plan plan = given;
    // What the plan runs, not who made it or for which files.
    plan.strategy.clear();
    plan.model.clear();
    plan.cluster.clear();
    // Checked before the routing, which takes time and memory in proportion to the microbatches.
    MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan, cluster, model));
    FillZorseRouting(&plan, costs);
    const size_t key = PlanHash(plan);
    {
      std::lock_guard lock(memory->mutex);
      if (const Seen* seen = memory->Find(key, plan);
          seen != nullptr && (!seen->evaluation.stopped || bound.stop_after_s <= seen->bound_s)) {
        if (stats != nullptr) ++stats->cached;
        return seen->evaluation;
      }
    }
    auto start = std::chrono::steady_clock::now();
    // Under a bound, first from the plan alone: each device's forwards and backwards over its
    // group's layers (no head, no update: less than its compute ops will take), and each group's
    // gradient reduction. A plan that already takes longer is stopped before it is lowered.
    if (std::isfinite(bound.stop_after_s)) {
      const double least_s = LeastStepFromPlanS(plan, model, costs);
      if (least_s > bound.stop_after_s * (1 + 1e-9)) {
        PlanEvaluation e;
        e.step_time_s = least_s;
        e.stopped = true;
        std::lock_guard lock(memory->mutex);
        if (stats != nullptr) {
          ++stats->evaluations;
          ++stats->stopped;
        }
        memory->Remember(key, std::move(plan), e, bound.stop_after_s);
        return e;
      }
    }
    // ... then once its ops are emitted: its busiest rank's compute alone (its compute ops run one
    // after another), before they are ordered and simulated.
    LowerOptions lowering;
    lowering.check = false;
    lowering.device_class = *device_class;
    bool stopped_lowering = false;
    double compute_s = 0;
    if (std::isfinite(bound.stop_after_s)) {
      lowering.stopped = &stopped_lowering;
      lowering.stop_after_emission = [&](const Schedule& emitted) {
        compute_s = BusiestComputeS(emitted, costs);
        return compute_s > bound.stop_after_s * (1 + 1e-9);
      };
    }
    MOTLEY_ASSIGN_OR_RETURN(Schedule s, LowerPlan(plan, cluster, model, lowering));
    const double lower_s = SecondsSince(start);
    start = std::chrono::steady_clock::now();
    SimResult r;
    if (stopped_lowering) {
      r.stopped = true;
      r.step_time_s = compute_s;
    } else {
      MOTLEY_ASSIGN_OR_RETURN(
          r, Simulate(s, cluster, costs, {.check_buffers = false, .stop_after_s = bound.stop_after_s}));
    }
    const double simulate_s = SecondsSince(start);
    std::lock_guard lock(memory->mutex);
    if (stats != nullptr) {
      ++stats->evaluations;
      stats->stopped += r.stopped ? 1 : 0;
      stats->lower_s += lower_s;
      stats->simulate_s += simulate_s;
    }
    PlanEvaluation e;
    e.step_time_s = r.step_time_s;
    e.fits_memory = r.fits_memory;
    e.stopped = r.stopped;
    e.tflops = r.tflops;
    e.hfu = r.hfu;
    e.oom = r.oom_message;
    if (!r.stopped) e.region_traffic = RegionTraffic(s, cluster);
    memory->Remember(key, std::move(plan), e, bound.stop_after_s);
    return e;
  };
}

}  // namespace motley
