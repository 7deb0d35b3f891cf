#include "plan/baselines.h"

#include <cstdint>
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/job.h"
#include "plan/memory_model.h"
#include "plan/poplar_planner.h"

namespace motley {
namespace {

StrategyOutcome Failed(const std::string& strategy, Status status) {
  StrategyOutcome o;
  o.strategy = strategy;
  o.status = std::move(status);
  return o;
}

// Evaluates a plan and fills the outcome.
StrategyOutcome Evaluated(const std::string& strategy, Plan plan, std::string explain,
                          const PlanEvaluator& evaluate) {
  plan.strategy = strategy;
  Result<PlanEvaluation> e = evaluate(plan);
  if (!e.ok()) return Failed(strategy, e.status());
  StrategyOutcome o;
  o.strategy = strategy;
  o.plan = std::move(plan);
  o.evaluation = *e;
  o.explain = std::move(explain);
  if (!e->fits_memory) o.status = Status::OutOfMemory(fmt::format("{}: out of memory: {}", strategy, e->oom));
  return o;
}

// The better of two outcomes: a plan that fits over one that does not, then the faster.
bool Better(const StrategyOutcome& a, const StrategyOutcome& b) {
  if (a.status.ok() != b.status.ok()) return a.status.ok();
  if (a.plan.groups.empty() != b.plan.groups.empty()) return !a.plan.groups.empty();
  return a.evaluation.step_time_s < b.evaluation.step_time_s;
}

std::vector<int> AllDevices(const Cluster& c) {
  std::vector<int> d(c.num_devices());
  for (int i = 0; i < c.num_devices(); ++i) d[i] = i;
  return d;
}

// Poplar at every ZeRO stage from `first` (each raised while a device cannot fit one sequence).
StrategyOutcome PoplarBest(const std::string& strategy, int first, int last, const std::vector<int>& devices,
                           const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                           const PlanRequest& request, const PlanEvaluator& evaluate) {
  StrategyOutcome best = Failed(strategy, Status::Infeasible(strategy + ": no ZeRO stage fits"));
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
    StrategyOutcome o = Evaluated(strategy, p->plan, p->explain, evaluate);
    if (Better(o, best)) best = std::move(o);
  }
  return best;
}

StrategyOutcome DeepSpeedEven(const Cluster& cluster, const ModelSpec& model, const PlanRequest& request,
                              const PlanEvaluator& evaluate) {
  const std::vector<int> devices = AllDevices(cluster);
  const int64_t n = static_cast<int64_t>(devices.size());
  StrategyOutcome best =
      Failed("deepspeed-even", Status::Infeasible("deepspeed-even: no ZeRO stage fits one sequence"));
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
                                cluster.emulated()};
    int64_t mbs = std::numeric_limits<int64_t>::max();
    for (int d : devices) mbs = std::min(mbs, DataParallelMaxMicrobatch(mem, cluster.memory_bytes(d), 256));
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
    StrategyOutcome o = Evaluated("deepspeed-even", p,
                                  fmt::format("ZeRO-{}, {} sequences per device in microbatches of up to {}",
                                              stage, request.global_batch_sequences / n, mbs),
                                  evaluate);
    if (Better(o, best)) best = std::move(o);
  }
  return best;
}

StrategyOutcome FastestOnly(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                            const PlanRequest& request, const PlanEvaluator& evaluate) {
  auto peak = [&](int d) {
    const GpuSpec& s = cluster.spec(d);
    return PeakFlops(s, request.precision) /
           costs.Slowdown(d);
  };
  double fastest = 0;
  for (int d = 0; d < cluster.num_devices(); ++d) fastest = std::max(fastest, peak(d));
  std::vector<int> devices;
  for (int d = 0; d < cluster.num_devices(); ++d)
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
  ZorseRequest z;
  z.global_batch_sequences = request.global_batch_sequences;
  z.seq_len = request.seq_len;
  z.precision = request.precision;
  z.activation_checkpointing = request.activation_checkpointing;
  z.gradient_clipping = request.gradient_clipping;
  if (strategy == "hexiscale") {
    z.offload = false;
    z.max_ministages = 1;
    z.schedule = PipelineSchedule::k1F1B;
    z.try_tensor_parallel = true;
  }
  Result<ZorsePlan> p = PlanZorse(cluster, model, costs, z, evaluate);
  if (!p.ok()) return Failed(strategy, p.status());
  return Evaluated(strategy, p->plan, p->explain, evaluate);
}

StrategyOutcome TorchTitanHet(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const PlanRequest& request, const PlanEvaluator& evaluate) {
  ZorseRequest z;
  z.global_batch_sequences = request.global_batch_sequences;
  z.seq_len = request.seq_len;
  z.precision = request.precision;
  z.activation_checkpointing = request.activation_checkpointing;
  z.gradient_clipping = request.gradient_clipping;
  z.offload = false;
  z.max_ministages = 1;
  z.schedule = PipelineSchedule::k1F1B;
  z.try_tensor_parallel = true;
  z.even_microbatches = true;
  const int n = cluster.num_devices();
  std::vector<ZorseCandidate> all;
  for (int pp = 1; pp <= std::min<int>(n, static_cast<int>(model.num_layers)); ++pp) {
    if (n % pp != 0) continue;
    std::vector<std::vector<int>> groups(pp);
    for (int d = 0; d < n; ++d) groups[d / (n / pp)].push_back(d);  // equal stages in device order
    auto candidates = ZorseCandidatesForGroups(cluster, model, costs, z, groups);
    for (auto& c : candidates) c.why = fmt::format("mesh pp={}: {}", pp, c.why);
    all.insert(all.end(), candidates.begin(), candidates.end());
  }
  if (all.empty())
    return Failed("torchtitan-het", Status::Infeasible("torchtitan-het: no symmetric mesh fits"));
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.model_step_s < b.model_step_s; });
  StrategyOutcome best =
      Failed("torchtitan-het", Status::Infeasible("torchtitan-het: no mesh fits in the simulator"));
  for (size_t i = 0; i < std::min<size_t>(all.size(), 6); ++i) {
    StrategyOutcome o = Evaluated("torchtitan-het", all[i].plan, all[i].why, evaluate);
    if (Better(o, best)) best = std::move(o);
  }
  return best;
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
                                const PlannerCosts& costs, const PlanRequest& request, const PlanEvaluator& evaluate);

}  // namespace

StrategyOutcome PlanWithStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                 const PlannerCosts& costs, const PlanRequest& request,
                                 const PlanEvaluator& evaluate) {
  const PlanEvaluator as_run = [&](const Plan& given) {
    Plan plan = given;
    plan.gradient_clipping = request.gradient_clipping;
    return evaluate(plan);
  };
  return WithClipping(PlanOneStrategy(strategy, cluster, model, costs, request, as_run), request.gradient_clipping);
}

namespace {

StrategyOutcome PlanOneStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                const PlannerCosts& costs, const PlanRequest& request, const PlanEvaluator& evaluate) {
  if (strategy == "auto") {
    std::vector<StrategyOutcome> all = PlanEveryStrategy(cluster, model, costs, request, evaluate);
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
    const bool all_failed = std::none_of(all.begin(), all.end(), [](const StrategyOutcome& o) { return o.status.ok(); });
    StrategyOutcome best =
        all_failed && reasons.size() == 1
            ? Failed("auto", all.front().status)
            : Failed("auto", Status::Infeasible(fmt::format("auto: no strategy found a plan that fits{}",
                                                            why.empty() ? "" : " (" + why + ")")));
    for (auto& o : all)
      if (!o.plan.groups.empty() && Better(o, best)) best = o;
    if (!best.plan.groups.empty())
      best.explain = fmt::format("best of every strategy: {} ({})", best.strategy, best.explain);
    return best;
  }
  if (strategy == "zorse" || strategy == "hexiscale")
    return Pipelines(strategy, cluster, model, costs, request, evaluate);
  if (strategy == "poplar")
    return PoplarBest("poplar", 0, 3, AllDevices(cluster), cluster, model, costs, request, evaluate);
  if (strategy == "cephalo")
    return PoplarBest("cephalo", 3, 3, AllDevices(cluster), cluster, model, costs, request, evaluate);
  if (strategy == "deepspeed-even") return DeepSpeedEven(cluster, model, request, evaluate);
  if (strategy == "fastest-only") return FastestOnly(cluster, model, costs, request, evaluate);
  if (strategy == "torchtitan-het") return TorchTitanHet(cluster, model, costs, request, evaluate);
  return Failed(strategy, Status::InvalidArgument(fmt::format("unknown strategy '{}'", strategy)));
}

}  // namespace

std::vector<StrategyOutcome> PlanEveryStrategy(const Cluster& cluster, const ModelSpec& model,
                                               const PlannerCosts& costs, const PlanRequest& request,
                                               const PlanEvaluator& evaluate) {
  std::vector<StrategyOutcome> out;
  for (const auto& name : StrategyNames())
    if (name != "auto") out.push_back(PlanWithStrategy(name, cluster, model, costs, request, evaluate));
  return out;
}

}  // namespace motley
