#include "plan/baselines.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/job.h"
#include "core/units.h"
#include "plan/cephalo_planner.h"
#include "plan/device_subsets.h"
#include "plan/evaluate_all.h"
#include "plan/memory_model.h"
#include "plan/poplar_planner.h"

namespace motley {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

StrategyOutcome Failed(const std::string& strategy, Status status) {
  StrategyOutcome o;
  o.strategy = strategy;
  o.status = std::move(status);
  return o;
}

// A plan with what the evaluator said of it, as an outcome.
StrategyOutcome Evaluated(const std::string& strategy, Plan plan, std::string explain,
                          const Result<PlanEvaluation>& e) {
  plan.strategy = strategy;
  if (!e.ok()) return Failed(strategy, e.status());
  StrategyOutcome o;
  o.strategy = strategy;
  o.plan = std::move(plan);
  o.evaluation = *e;
  o.explain = std::move(explain);
  if (!e->fits_memory) o.status = Status::OutOfMemory(fmt::format("{}: out of memory: {}", strategy, e->oom));
  return o;
}

StrategyOutcome Evaluated(const std::string& strategy, Plan plan, std::string explain,
                          const PlanEvaluator& evaluate, const EvaluateBound& bound) {
  plan.strategy = strategy;
  const Result<PlanEvaluation> e = evaluate(plan, bound);
  return Evaluated(strategy, std::move(plan), std::move(explain), e);
}

// The better of two outcomes: a plan that fits over one that does not, then the faster.
bool Better(const StrategyOutcome& a, const StrategyOutcome& b) {
  if (a.status.ok() != b.status.ok()) return a.status.ok();
  if (a.plan.groups.empty() != b.plan.groups.empty()) return !a.plan.groups.empty();
  return a.evaluation.step_time_s < b.evaluation.step_time_s;
}

// The plans a strategy proposes, with why; evaluated together (evaluate_all.h), the best kept.
struct Proposals {
  std::vector<Plan> plans;
  std::vector<std::string> explain;
  void Add(Plan p, std::string why) {
    plans.push_back(std::move(p));
    explain.push_back(std::move(why));
  }
};
StrategyOutcome BestProposal(const std::string& strategy, Proposals proposals, StrategyOutcome best,
                             const PlanEvaluator& evaluate, const EvaluateBound& bound) {
  for (Plan& p : proposals.plans) p.strategy = strategy;
  const std::vector<Result<PlanEvaluation>> e = EvaluateAll(proposals.plans, evaluate, bound);
  for (size_t i = 0; i < e.size(); ++i) {
    StrategyOutcome o =
        Evaluated(strategy, std::move(proposals.plans[i]), std::move(proposals.explain[i]), e[i]);
    if (Better(o, best)) best = std::move(o);
  }
  return best;
}

// The devices the request lets a plan use.
std::vector<int> Devices(const Cluster& c, const PlanRequest& request) {
  if (!request.devices.empty()) return request.devices;
  std::vector<int> d(c.num_devices());
  for (int i = 0; i < c.num_devices(); ++i) d[i] = i;
  return d;
}

// Poplar at every ZeRO stage from `first` (each raised while a device cannot fit one sequence).
StrategyOutcome PoplarBest(const std::string& strategy, int first, int last, const std::vector<int>& devices,
                           const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                           const PlanRequest& request, const PlanEvaluator& evaluate) {
  StrategyOutcome best = Failed(strategy, Status::Infeasible(strategy + ": no ZeRO stage fits"));
  Proposals proposals;
  for (int stage = first; stage <= last; ++stage) {
    PoplarRequest r{request.global_batch_sequences,
                    request.seq_len,
                    request.precision,
                    request.activation_checkpointing,
                    stage,
                    devices,
                    256};
    Result<PoplarPlan> p = PlanPoplar(cluster, model, costs, r);
    if (!p.ok()) {
      if (!best.status.ok() && best.plan.groups.empty()) best = Failed(strategy, p.status());
      continue;
    }
    if (p->plan.zero_stage != stage) continue;  // raised: that stage is tried on its own
    proposals.Add(p->plan, p->explain);
  }
  return BestProposal(strategy, std::move(proposals), std::move(best), evaluate,
                      {request.only_faster_than_s});
}

StrategyOutcome Cephalo(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                        const PlanRequest& request, const PlanEvaluator& evaluate) {
  CephaloRequest r;
  r.global_batch_sequences = request.global_batch_sequences;
  r.seq_len = request.seq_len;
  r.precision = request.precision;
  r.activation_checkpointing = request.activation_checkpointing;
  r.devices = Devices(cluster, request);
  Result<std::vector<CephaloPlan>> candidates = PlanCephalo(cluster, model, costs, r);
  if (!candidates.ok()) return Failed("cephalo", candidates.status());
  Proposals proposals;
  for (CephaloPlan& c : *candidates) proposals.Add(std::move(c.plan), std::move(c.explain));
  return BestProposal("cephalo", std::move(proposals),
                      Failed("cephalo", Status::Infeasible("cephalo: no candidate plan could be simulated")),
                      evaluate, {request.only_faster_than_s});
}

StrategyOutcome DeepSpeedEven(const Cluster& cluster, const ModelSpec& model, const PlanRequest& request,
                              const PlanEvaluator& evaluate) {
  const std::vector<int> devices = Devices(cluster, request);
  const int64_t n = static_cast<int64_t>(devices.size());
  StrategyOutcome best =
      Failed("deepspeed-even", Status::Infeasible("deepspeed-even: no ZeRO stage fits one sequence"));
  Proposals proposals;
  for (int stage = 0; stage <= 3; ++stage) {
    const int layers = static_cast<int>(model.num_layers);
    const double unit =
        static_cast<double>(ParamsPerLayer(model) + std::max(EmbeddingParams(model), HeadParams(model)));
    DataParallelMemoryInput mem{&model,
                                request.precision,
                                stage,
                                static_cast<int>(n),
                                request.seq_len,
                                request.activation_checkpointing,
                                stage >= 2 ? unit : 0,
                                cluster.emulated(),
                                -1};
    int64_t mbs = std::numeric_limits<int64_t>::max();
    for (int d : devices)
      mbs = std::min(mbs, DataParallelMaxMicrobatch(mem, cluster.usable_memory_bytes(d), 256));
    if (mbs < 1) continue;
    // The same batch everywhere (the remainder, if any, one sequence each to the first devices).
    Plan p;
    p.seq_len = request.seq_len;
    p.precision = request.precision;
    p.zero_stage = stage;
    p.activation_checkpointing = request.activation_checkpointing;
    GroupPlan g;
    g.ministages = stage >= 2 ? SplitLayers(0, layers, layers) : std::vector<LayerRange>{{0, layers}};
    for (int64_t i = 0; i < n; ++i) {
      const int64_t share =
          request.global_batch_sequences / n + (i < request.global_batch_sequences % n ? 1 : 0);
      DevicePlan d{devices[i], std::max<int64_t>(1, std::min(mbs, share)), 0, 0};
      if (share > 0) {
        d.num_microbatches = (share + d.microbatch_size - 1) / d.microbatch_size;
        const int64_t last = share - (d.num_microbatches - 1) * d.microbatch_size;
        d.last_microbatch_size = last == d.microbatch_size ? 0 : last;
      }
      g.devices.push_back(d);
    }
    p.groups = {g};
    proposals.Add(p, fmt::format("ZeRO-{}, {} sequences per device in microbatches of up to {}", stage,
                                 request.global_batch_sequences / n, mbs));
  }
  return BestProposal("deepspeed-even", std::move(proposals), std::move(best), evaluate,
                      {request.only_faster_than_s});
}

StrategyOutcome FastestOnly(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                            const PlanRequest& request, const PlanEvaluator& evaluate) {
  auto peak = [&](int d) {
    const GpuSpec& s = cluster.spec(d);
    return PeakFlops(s, request.precision) / costs.Slowdown(d);
  };
  double fastest = 0;
  for (int d : Devices(cluster, request)) fastest = std::max(fastest, peak(d));
  std::vector<int> devices;
  for (int d : Devices(cluster, request))
    if (peak(d) == fastest) devices.push_back(d);
  StrategyOutcome o = PoplarBest("fastest-only", 0, 3, devices, cluster, model, costs, request, evaluate);
  if (o.status.ok() || !o.plan.groups.empty())
    o.explain =
        fmt::format("only the {} {} device(s); {}", devices.size(), cluster.spec(devices[0]).name, o.explain);
  return o;
}

StrategyOutcome Pipelines(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                          const PlannerCosts& costs, const PlanRequest& request,
                          const PlanEvaluator& evaluate) {
  ZorseRequest z = ZorseRequestFor(request);
  z.devices = request.devices;
  z.bound.stop_after_s = request.only_faster_than_s;
  if (strategy == "hexiscale") {
    z.offload = false;
    z.max_ministages = 1;
    z.schedule = PipelineSchedule::k1F1B;
    z.try_tensor_parallel = true;
    // Without offload, HexiScale fits a model by more, smaller stages: nodes split into up to 8.
    z.split_nodes_up_to = 8;
    // HexiScale chooses by its own cost model; its best ten of each kind (tensor-parallel width,
    // nodes whole or split) are judged by the simulator (motley's own search re-ranks twenty), all
    // at once. Against a plan another strategy already has (auto), four of each kind first and the
    // other six of the kinds near it: with tensor parallelism per group, a cluster with a few
    // NVLink nodes has a kind per width, and HexiScale's plan matters to auto only if it wins.
    z.candidates_to_evaluate = 10;
    z.first_judged_per_kind = std::isfinite(request.only_faster_than_s) ? 4 : 10;
    z.more_judged_per_kind = 6;
  }
  if (request.exploring) {
    // A quick plan to compare allocations by: the latency model's best two judged by the
    // evaluator (one of each kind first), no climb from the best, and on many nodes SPLIT's cuts
    // alone, no climb over groupings. (With one judged, the offers' search chose plans 6-23% dearer
    // than planning every allocation in full at three limits of small-mix's front:
    // Money.TheSearchOverOffers...; the grouping climb's one step cost aws-three-regions' Llama-7B
    // search 3.6 of its 29 thread-seconds, on allocations of 100 GPUs or more that came back with
    // plans on ~32 of them, and changed none of its answers: bench/reports/offers_planning.md.)
    z.candidates_to_evaluate = 2;
    z.first_judged_per_kind = 1;
    z.more_judged_per_kind = 1;
    z.climb_rounds = 0;
    z.grouping_climb_rounds = 0;
  }
  Result<ZorsePlan> p = PlanZorse(cluster, model, costs, z, evaluate);
  if (!p.ok()) return Failed(strategy, p.status());
  return Evaluated(strategy, p->plan, p->explain, evaluate, z.bound);
}

StrategyOutcome TorchTitanHet(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const PlanRequest& request, const PlanEvaluator& evaluate) {
  ZorseRequest z = ZorseRequestFor(request);
  z.offload = false;
  z.max_ministages = 1;
  z.schedule = PipelineSchedule::k1F1B;
  z.try_tensor_parallel = true;
  z.uniform_tensor_parallel = true;  // TorchTitan's device mesh: one TP width everywhere
  z.even_microbatches = true;
  const std::vector<int> devices = Devices(cluster, request);
  const int n = static_cast<int>(devices.size());
  std::vector<ZorseCandidate> all;
  for (int pp = 1; pp <= std::min<int>(n, static_cast<int>(model.num_layers)); ++pp) {
    if (n % pp != 0) continue;
    std::vector<std::vector<int>> groups(pp);
    for (int i = 0; i < n; ++i) groups[i / (n / pp)].push_back(devices[i]);  // equal stages in device order
    auto candidates = ZorseCandidatesForGroups(cluster, model, costs, z, groups);
    for (auto& c : candidates) c.why = fmt::format("mesh pp={}: {}", pp, c.why);
    all.insert(all.end(), candidates.begin(), candidates.end());
  }
  if (all.empty())
    return Failed("torchtitan-het", Status::Infeasible("torchtitan-het: no symmetric mesh fits"));
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.model_step_s < b.model_step_s; });
  // The best six of each tensor-parallel width by the latency model are judged by the simulator
  // (the model misranks widths against each other); the best two when exploring with this strategy
  // alone (--strategy torchtitan-het: a quick plan to compare allocations by, whose front is then
  // planned again in full).
  const int per_width = request.exploring ? 2 : 6;
  Proposals proposals;
  std::map<int, int> taken;
  for (const ZorseCandidate& c : all)
    if (taken[c.tp_degree]++ < per_width) proposals.Add(c.plan, c.why);
  return BestProposal(
      "torchtitan-het", std::move(proposals),
      Failed("torchtitan-het", Status::Infeasible("torchtitan-het: no mesh fits in the simulator")), evaluate,
      {request.only_faster_than_s});
}

}  // namespace

namespace {

// Every plan a strategy makes is judged, and handed out, as the job will run it: with the job's
// gradient clipping.
StrategyOutcome WithClipping(StrategyOutcome o, bool clipping) {
  o.plan.gradient_clipping = clipping;
  return o;
}

StrategyOutcome PlanOneStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                const PlannerCosts& costs, const PlanRequest& request,
                                const PlanEvaluator& evaluate);

constexpr double kSubsetBoundSlack = 0.10;

// The strategy on the whole cluster and on every subset whose lower bound could still beat the
// best plan found (device_subsets.h); the fastest plan that fits.
StrategyOutcome PlanOnSubsets(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                              const PlannerCosts& costs, const PlanRequest& request,
                              const PlanEvaluator& evaluate) {
  const std::vector<DeviceSubset> subsets = DeviceSubsets(
      cluster, model, costs, {request.global_batch_sequences, request.seq_len, request.precision, 256, 2});
  // Every subset skipped: its bound is no better than another strategy's plan, or (an infinite
  // bound, device_subsets.h) no device can run one sequence at all.
  StrategyOutcome best =
      Failed(strategy,
             Status::Infeasible(
                 std::isfinite(request.only_faster_than_s)
                     ? fmt::format("{}: not planned: no plan on these devices can step faster than {}, which "
                                   "another strategy achieves",
                                   strategy, FormatDuration(request.only_faster_than_s))
                     : fmt::format("{}: not planned: no device here can hold one layer's backward for one "
                                   "sequence of {} tokens of {}, even split over tensor parallelism; shorten "
                                   "the sequences or add devices with more memory",
                                   strategy, request.seq_len, model.name)));
  StrategyOutcome whole = best;
  int planned = 0, skipped = 0;
  for (size_t i = 0; i < subsets.size(); ++i) {
    double beat_s = request.only_faster_than_s;
    if (best.status.ok()) beat_s = std::min(beat_s, best.evaluation.step_time_s);
    if (subsets[i].lower_bound_s >= beat_s) {
      ++skipped;
      continue;
    }
    PlanRequest r = request;
    if (i > 0) r.devices = subsets[i].devices;
    // A subset's search is bounded by the best plan so far with the slack its rounds keep kinds
    // alive by (ZorseRequest::kind_slack): its candidates near the best still run to the end, so
    // its rounds widen the same kinds; the rest stop early.
    if (i > 0 && best.status.ok())
      r.only_faster_than_s =
          std::min(r.only_faster_than_s, best.evaluation.step_time_s * (1 + kSubsetBoundSlack));
    StrategyOutcome o = PlanOneStrategy(strategy, cluster, model, costs, r, evaluate);
    ++planned;
    if (i == 0) {
      best = whole = o;
      continue;
    }
    if (!o.status.ok() || (best.status.ok() && !Better(o, best))) continue;
    const int left_out = cluster.num_devices() - static_cast<int>(subsets[i].devices.size());
    o.explain += fmt::format("; leaves {} of the {} devices out ({})", left_out, cluster.num_devices(),
                             subsets[i].description);
    if (whole.status.ok())
      o.explain +=
          fmt::format(": with every device the best plan steps in {}, without those {}",
                      FormatDuration(whole.evaluation.step_time_s), FormatDuration(o.evaluation.step_time_s));
    else
      o.explain += fmt::format(": with every device, {}", whole.status.message());
    best = std::move(o);
  }
  best.subsets_planned = planned;
  best.subsets_skipped = skipped;
  return best;
}

}  // namespace

ZorseRequest ZorseRequestFor(const PlanRequest& request) {
  ZorseRequest z;
  z.global_batch_sequences = request.global_batch_sequences;
  z.seq_len = request.seq_len;
  z.precision = request.precision;
  z.activation_checkpointing = request.activation_checkpointing;
  z.gradient_clipping = request.gradient_clipping;
  return z;
}

PlanRequest PlanRequestForJob(const JobSpec& job) {
  const TrainingConfig& t = job.training;
  PlanRequest request;
  request.global_batch_sequences = t.global_batch_sequences;
  request.seq_len = t.seq_len;
  request.precision = t.precision;
  request.activation_checkpointing = t.activation_checkpointing;
  request.gradient_clipping = job.optimizer.grad_clip_norm > 0;
  return request;
}

StrategyOutcome PlanWithStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                 const PlannerCosts& costs, const PlanRequest& request,
                                 const PlanEvaluator& evaluate) {
  const auto start = std::chrono::steady_clock::now();
  // The wall time while at least one evaluation runs (they run on several threads at once).
  std::mutex mutex;
  int running = 0, evaluations = 0;
  double evaluate_s = 0;
  std::chrono::steady_clock::time_point busy_since;
  const PlanEvaluator as_run = [&](const Plan& given, const EvaluateBound& bound) {
    {
      std::lock_guard lock(mutex);
      if (running++ == 0) busy_since = std::chrono::steady_clock::now();
      ++evaluations;
    }
    Plan plan = given;
    plan.gradient_clipping = request.gradient_clipping;
    Result<PlanEvaluation> e = evaluate(plan, bound);
    std::lock_guard lock(mutex);
    if (--running == 0) evaluate_s += SecondsSince(busy_since);
    return e;
  };
  // motley's own strategies may leave devices out; the baselines train on every device, as the
  // systems they stand for do.
  const bool own = strategy == "zorse" || strategy == "poplar";
  StrategyOutcome o = own && request.devices.empty() && request.leave_devices_out
                          ? PlanOnSubsets(strategy, cluster, model, costs, request, as_run)
                          : PlanOneStrategy(strategy, cluster, model, costs, request, as_run);
  o = WithClipping(std::move(o), request.gradient_clipping);
  if (strategy != "auto") {  // auto's figures are its strategies'
    o.plan_s = SecondsSince(start);
    o.evaluate_s = evaluate_s;
    o.evaluations = evaluations;
  }
  return o;
}

namespace {

StrategyOutcome PlanOneStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                const PlannerCosts& costs, const PlanRequest& request,
                                const PlanEvaluator& evaluate) {
  if (strategy == "auto")
    return BestOutcome(
        PlanEveryStrategy(cluster, model, costs, request, evaluate, EveryStrategy::kOnlyTheBest));
  if (strategy == "zorse" || strategy == "hexiscale")
    return Pipelines(strategy, cluster, model, costs, request, evaluate);
  if (strategy == "poplar")
    return PoplarBest("poplar", 0, 3, Devices(cluster, request), cluster, model, costs, request, evaluate);
  if (strategy == "cephalo") return Cephalo(cluster, model, costs, request, evaluate);
  if (strategy == "deepspeed-even") return DeepSpeedEven(cluster, model, request, evaluate);
  if (strategy == "fastest-only") return FastestOnly(cluster, model, costs, request, evaluate);
  if (strategy == "torchtitan-het") return TorchTitanHet(cluster, model, costs, request, evaluate);
  return Failed(strategy, Status::InvalidArgument(fmt::format("unknown strategy '{}'", strategy)));
}

}  // namespace

StrategyOutcome BestOutcome(const std::vector<StrategyOutcome>& all) {
  // When none has a plan, say why: one reason when every strategy gave the same (an input no
  // plan can satisfy), else each strategy's.
  std::vector<std::string> reasons;
  std::string why;
  for (const auto& o : all) {
    if (o.status.ok()) continue;
    if (std::find(reasons.begin(), reasons.end(), o.status.message()) == reasons.end())
      reasons.push_back(o.status.message());
    why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", o.strategy, o.status.message());
  }
  const bool all_failed =
      std::none_of(all.begin(), all.end(), [](const StrategyOutcome& o) { return o.status.ok(); });
  StrategyOutcome best =
      all_failed && reasons.size() == 1
          ? Failed("auto", all.front().status)
          : Failed("auto", Status::Infeasible(fmt::format("auto: no strategy found a plan that fits{}",
                                                          why.empty() ? "" : " (" + why + ")")));
  for (const auto& o : all)
    if (!o.plan.groups.empty() && Better(o, best)) best = o;
  if (!best.plan.groups.empty())
    best.explain = fmt::format("best of every strategy: {} ({})", best.strategy, best.explain);
  return best;
}

std::vector<StrategyOutcome> PlanEveryStrategy(const Cluster& cluster, const ModelSpec& model,
                                               const PlannerCosts& costs, const PlanRequest& request,
                                               const PlanEvaluator& evaluate, EveryStrategy mode) {
  std::vector<std::string> names;
  for (const auto& name : StrategyNames())
    if (name != "auto" && !(request.exploring && (name == "hexiscale" || name == "torchtitan-het")))
      names.push_back(name);
  // For the best only, motley's pipeline search goes first (its plan is most often the best, and the
  // bar it sets spares Poplar's device subsets), hexiscale's last.
  std::vector<size_t> order(names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (mode == EveryStrategy::kOnlyTheBest)
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return names[i] != "hexiscale"; });
  std::vector<StrategyOutcome> out(names.size());
  PlanRequest r = request;
  for (size_t i : order) {
    out[i] = PlanWithStrategy(names[i], cluster, model, costs, r, evaluate);
    if (mode == EveryStrategy::kOnlyTheBest && out[i].status.ok())
      r.only_faster_than_s = std::min(r.only_faster_than_s, out[i].evaluation.step_time_s);
  }
  return out;
}

}  // namespace motley
