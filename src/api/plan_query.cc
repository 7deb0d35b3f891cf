#include "api/plan_query.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "api/offer_plan.h"
#include "api/plan_inputs.h"
#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "core/units.h"
#include "plan/plan_io.h"
#include "sim/routing_costs.h"

namespace motley {
namespace {

nlohmann::json FlexTpJson(const FlexTpChoice& c) {
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& [mode, step] : c.step_s) modes[mode] = step;
  return {{"device", c.probe.device},
          {"factor", c.probe.factor},
          {"step_time_s", c.straggling_step_s},
          {"step_time_s_by_mode", modes},
          {"why", c.why}};
}

nlohmann::json OutcomeJson(const StrategyOutcome& o, int64_t tokens, const FlexTpChoice* flextp) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : o.plan.groups) {
    nlohmann::json devices = nlohmann::json::array(), microbatches = nlohmann::json::array(),
                   ministages = nlohmann::json::array();
    for (const auto& d : g.devices) {
      devices.push_back(d.device);
      microbatches.push_back(d.num_microbatches);
    }
    for (const auto& r : g.ministages) ministages.push_back({r.begin, r.end});
    groups.push_back({{"devices", devices},
                      {"layers",
                       {g.ministages.empty() ? 0 : g.ministages.front().begin,
                        g.ministages.empty() ? 0 : g.ministages.back().end}},
                      {"ministages", ministages},
                      {"num_ministages", g.ministages.size()},
                      {"microbatch_size", g.devices.empty() ? 0 : g.devices.front().microbatch_size},
                      {"microbatches_per_device", microbatches},
                      {"tp_degree", g.tp_degree}});
  }
  const bool has_plan = !o.plan.groups.empty();
  nlohmann::json j = {
      {"strategy", o.strategy},
      {"step_time_s", has_plan ? nlohmann::json(o.evaluation.step_time_s) : nullptr},
      {"tokens_per_s", has_plan ? nlohmann::json(tokens / o.evaluation.step_time_s) : nullptr},
      {"tflops", o.evaluation.tflops},
      {"hfu", o.evaluation.hfu},
      {"fits_memory", has_plan && o.evaluation.fits_memory},
      {"zero_stage", o.plan.zero_stage},
      {"schedule", PipelineScheduleName(o.plan.schedule)},
      {"groups", groups},
      {"explain", o.explain}};
  if (!o.plan.flextp_mode.empty()) j["flextp_mode"] = o.plan.flextp_mode;
  if (flextp != nullptr) j["straggler"] = FlexTpJson(*flextp);
  if (!o.status.ok()) j["error"] = o.status.message();
  return j;
}

// Where the planning time went (--explain --json): the evaluator's lowering and simulation, and
// each strategy's whole time and its part in the evaluator (the rest is its own search).
nlohmann::json TimingJson(double planning_s, const EvaluationStats& stats,
                          const std::vector<StrategyOutcome>& rows) {
  nlohmann::json strategies = nlohmann::json::array();
  for (const auto& o : rows)
    strategies.push_back({{"strategy", o.strategy},
                          {"total_s", o.plan_s},
                          {"search_s", o.plan_s - o.evaluate_s},
                          {"evaluate_s", o.evaluate_s},
                          {"evaluations", o.evaluations},
                          {"device_subsets_planned", o.subsets_planned},
                          {"device_subsets_skipped", o.subsets_skipped}});
  return {{"planning_s", planning_s},          {"plans_simulated", stats.evaluations},
          {"plans_asked_again", stats.cached}, {"plans_stopped", stats.stopped},
          {"lower_s", stats.lower_s},          {"simulate_s", stats.simulate_s},
          {"strategies", strategies}};
}

nlohmann::json MoneyJson(const PlanMoney& m, double train_tokens) {
  nlohmann::json j = {{"tokens_per_s", m.tokens_per_s},
                      {"usd_per_hour", m.usd_per_hour},
                      {"compute_usd_per_hour", m.compute_usd_per_hour},
                      {"egress_usd_per_hour", m.egress_usd_per_hour},
                      {"usd_per_million_tokens", m.usd_per_million_tokens},
                      {"inter_region_bytes_per_step", m.inter_region_bytes_per_step},
                      {"spot_devices", m.spot_devices},
                      {"interruptions_per_hour", m.interruptions_per_hour},
                      {"availability", m.availability},
                      {"nominal_tokens_per_s", m.nominal_tokens_per_s},
                      {"on_demand_usd_per_hour", m.on_demand_usd_per_hour},
                      {"on_demand_usd_per_million_tokens", m.on_demand_usd_per_million_tokens}};
  if (train_tokens > 0) {
    j["job_tokens"] = train_tokens;
    j["job_s"] = train_tokens / m.tokens_per_s;
    j["job_usd"] = m.usd_per_hour * train_tokens / m.tokens_per_s / 3600;
  }
  return j;
}

// A search over what to rent (offers, or an objective): needs prices, and lists its own plans.
Status CheckSearchable(const PlanQuery& query, const Cluster& cluster) {
  if (query.compare)
    return Status::InvalidArgument(
        "--compare lists every strategy on one cluster; with --offers or --objective the plans of what to "
        "rent "
        "are listed instead: drop --compare");
  if (!cluster.priced())
    return Status::InvalidArgument(fmt::format(
        "--objective {} needs prices, and cluster '{}' has none: add [[prices]] rows (device, region, "
        "price = \"2.99 USD/h\") to it, or choose from an offers file with --offers",
        query.objective, query.cluster));
  return Status::Ok();
}

// The query's cluster, or the cluster of everything its offers file offers (kept in `offers`).
Result<Cluster> LoadClusterOrOffers(const PlanQuery& query, std::optional<OfferList>* offers) {
  if (query.offers.empty()) return LoadCluster(query.cluster);
  if (!query.cluster.empty())
    return Status::InvalidArgument(
        "give --cluster or --offers, not both: an offers file says what can be rented");
  MOTLEY_ASSIGN_OR_RETURN(OfferList list, LoadOffers(query.offers));
  *offers = std::move(list);
  return ClusterOfAllocation(**offers, AllOffered(**offers));
}

}  // namespace

std::vector<int> LeftOut(const Plan& plan, const Cluster& cluster) {
  std::vector<bool> used(cluster.num_devices(), false);
  for (const auto& g : plan.groups)
    for (const auto& d : g.devices)
      if (d.device >= 0 && d.device < cluster.num_devices()) used[d.device] = true;
  std::vector<int> out;
  for (int d = 0; d < cluster.num_devices(); ++d)
    if (!used[d]) out.push_back(d);
  return out;
}

std::string TensorParallelColumn(const Plan& plan) {
  std::vector<int> tp;
  bool any = false, same = true;
  for (const auto& g : plan.groups) {
    tp.push_back(g.tp_degree);
    any = any || g.tp_degree > 1;
    same = same && g.tp_degree == plan.groups.front().tp_degree;
  }
  if (!any) return "-";
  return same ? fmt::format("{}", tp.front()) : fmt::format("{}", fmt::join(tp, "/"));
}

const FlexTpChoice* PlanAnswer::FlexTpOf(const StrategyOutcome& o) const {
  auto it = flextp.find(o.strategy);
  return it == flextp.end() || o.plan.groups.empty() ? nullptr : &it->second;
}

Result<PlanAnswer> AnswerPlanQuery(const PlanQuery& query) {
  PlanAnswer a;
  a.query = query;
  const int64_t seq_len = query.seq_len, tokens = query.global_batch_tokens;
  // The command line's ranges, for every caller (the Python module's plan() included: a batch of
  // 2^45 tokens planned for hours).
  if (seq_len < 1 || seq_len > kMaxPlanSeqLen)
    return Status::InvalidArgument(fmt::format(
        "seq_len {}: must be between 1 and {} (as motley plan --seq-len)", seq_len, kMaxPlanSeqLen));
  if (tokens < 1 || tokens > kMaxPlanBatchTokens)
    return Status::InvalidArgument(
        fmt::format("global_batch_tokens {}: must be between 1 and {} (as motley plan "
                    "--global-batch-tokens)",
                    tokens, kMaxPlanBatchTokens));
  if (seq_len < 1 || tokens < 1 || tokens % seq_len != 0)
    return Status::InvalidArgument(fmt::format(
        "global batch of {} tokens in sequences of {}: give a positive sequence length and a multiple of it, "
        "e.g. {}",
        tokens, seq_len,
        std::max<int64_t>(1, tokens / std::max<int64_t>(seq_len, 1)) * std::max<int64_t>(seq_len, 1)));
  std::optional<Precision> precision = PrecisionFromName(query.precision);
  if (!precision && query.precision != "auto")
    return Status::InvalidArgument(fmt::format("precision \"{}\": use one of {}, or auto", query.precision,
                                               fmt::join(PrecisionNames(), ", ")));
  const std::vector<std::string> strategies = StrategyNames();
  if (std::find(strategies.begin(), strategies.end(), query.strategy) == strategies.end())
    return Status::InvalidArgument(
        fmt::format("strategy \"{}\": use one of {}", query.strategy, fmt::join(strategies, ", ")));
  const std::vector<std::string> modes = {"auto", "off", "migrate", "resize", "semi"};
  if (std::find(modes.begin(), modes.end(), query.flextp_mode) == modes.end())
    return Status::InvalidArgument(
        fmt::format("FlexTP mode \"{}\": use one of {}", query.flextp_mode, fmt::join(modes, ", ")));
  MOTLEY_ASSIGN_OR_RETURN(const ObjectiveSpec objective, ObjectiveOfQuery(query));
  const bool search = !query.offers.empty() || !query.objective.empty();
  std::optional<OfferList> offers;
  MOTLEY_ASSIGN_OR_RETURN(Cluster cluster, LoadClusterOrOffers(query, &offers));
  if (search) MOTLEY_RETURN_IF_ERROR(CheckSearchable(query, cluster));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, LoadModel(query.model));
  a.cluster = std::make_unique<Cluster>(std::move(cluster));
  a.model = std::make_unique<ModelSpec>(std::move(model));
  if (!precision) precision = a.cluster->TrainingPrecision(&a.precision_reason);  // --precision auto
  if (seq_len > a.model->max_seq_len)
    return Status::InvalidArgument(fmt::format(
        "--seq-len {} is longer than {}'s max_seq_len ({}): shorten it, or give a model file with a larger "
        "max_seq_len",
        seq_len, a.model->name, a.model->max_seq_len));
  if (!query.profile.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Profile p, LoadAnyProfile(query.profile));
    MOTLEY_RETURN_IF_ERROR(ApplyMeasuredReserves(p, query.profile, a.cluster.get()));
    a.profile = std::make_unique<Profile>(std::move(p));
  }
  std::optional<StragglerProbe> probe;
  if (!query.straggler.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(StragglerProbe p,
                            ParseStragglerProbe(query.straggler, *a.cluster, "--straggler"));
    probe = p;
  }
  a.request.global_batch_sequences = tokens / seq_len;
  a.request.seq_len = seq_len;
  a.request.precision = *precision;
  a.request.gradient_clipping = query.gradient_clipping;
  a.costs = std::make_unique<CostModel>(*a.cluster, *a.model, a.profile.get(), seq_len, *precision, true);
  a.stats = std::make_unique<EvaluationStats>();
  a.evaluate = SimulationEvaluator(*a.cluster, *a.model, *a.costs, a.stats.get());

  const auto start = std::chrono::steady_clock::now();
  const std::string& strategy = query.strategy;
  if (search) {
    MOTLEY_RETURN_IF_ERROR(
        ChooseWhatToRent(&a, offers ? GroupsOfOffers(*offers) : GroupsOfCluster(*a.cluster), objective));
  } else if (query.compare || strategy == "auto") {
    a.rows = PlanEveryStrategy(*a.cluster, *a.model, *a.costs, a.request, a.evaluate,
                               query.compare ? EveryStrategy::kEachItsBest : EveryStrategy::kOnlyTheBest);
    a.chosen = BestOutcome(a.rows);
    if (strategy != "auto") {
      a.chosen.status = Status::Infeasible(fmt::format("{} found no plan that fits", strategy));
      for (const auto& o : a.rows)
        if (o.strategy == strategy) a.chosen = o;
    }
  } else {
    a.chosen = PlanWithStrategy(strategy, *a.cluster, *a.model, *a.costs, a.request, a.evaluate);
    a.rows.push_back(a.chosen);
  }
  if (!search && a.cluster->priced()) PricePlans(&a);
  a.planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // FlexTP's mode for plans with tensor-parallel teams, judged with a straggler (sim/flextp_choice.h):
  // the chosen plan's, and with --compare every row's. Keyed by strategy.
  for (StrategyOutcome* o : [&] {
         std::vector<StrategyOutcome*> all = {&a.chosen};
         if (query.compare)
           for (auto& r : a.rows) all.push_back(&r);
         return all;
       }()) {
    if (o->plan.groups.empty()) continue;
    if (!a.flextp.count(o->strategy)) {
      Result<FlexTpChoice> c =
          ChooseFlexTpMode(o->plan, *a.cluster, *a.model, a.profile.get(), query.flextp_mode, probe);
      if (!c.ok()) return c.status();
      if (c->step_s.empty()) continue;
      a.flextp[o->strategy] = *c;
    }
    o->plan.flextp_mode = a.flextp[o->strategy].mode;
  }
  // The plan names what it is for and carries its routing, so it runs unchanged when written.
  if (!a.chosen.plan.groups.empty()) {
    a.chosen.plan.model = query.model;
    a.chosen.plan.cluster = offers ? query.offers : query.cluster;
    FillZorseRouting(&a.chosen.plan, *a.costs);
  }
  return a;
}

nlohmann::json PlanAnswerJson(const PlanAnswer& a, bool timing) {
  const int64_t tokens = a.query.global_batch_tokens;
  nlohmann::json j = OutcomeJson(a.chosen, tokens, a.FlexTpOf(a.chosen));
  if (a.money) j["money"] = MoneyJson(*a.money, a.query.train_tokens);
  if (a.money && a.money->spot_devices > 0)  // what its expected speed assumed of an interruption
    j["interruptions"] = {{"checkpoint_interval_s", a.query.interruptions.checkpoint_interval_s},
                          {"restart_s", a.query.interruptions.restart_s},
                          {"measured", a.query.interruptions.measured}};
  if (!a.front.empty()) {
    j["front"] = nlohmann::json::array();
    for (size_t i = 0; i < a.front.size(); ++i) {
      const RentedPlan& p = a.front[i];
      j["front"].push_back({{"nodes", p.nodes},
                            {"rent", p.description},
                            {"strategy", p.outcome.strategy},
                            {"step_time_s", p.outcome.evaluation.step_time_s},
                            {"chosen", static_cast<int>(i) == a.chosen_on_front},
                            {"money", MoneyJson(p.money, a.query.train_tokens)}});
    }
    j["allocations_planned"] = a.allocations_planned;
    j["allocations_refined"] = a.allocations_refined;
    j["planned"] = nlohmann::json::array();  // every allocation with a plan: what the front was chosen from
    for (const RentedPlan& p : a.planned)
      j["planned"].push_back({{"rent", p.description},
                              {"strategy", p.outcome.strategy},
                              {"tokens_per_s", p.money.tokens_per_s},
                              {"usd_per_hour", p.money.usd_per_hour}});
    j["objective"] = a.query.objective.empty() ? "time" : a.query.objective;
    j["why_chosen"] = a.objective_why;
  }
  if (!a.chosen.plan.groups.empty()) {
    j["devices_left_out"] = LeftOut(a.chosen.plan, *a.cluster);
    j["plan"] = PlanToJson(a.chosen.plan);
  }
  if (timing) j["timing"] = TimingJson(a.planning_s, *a.stats, a.rows);
  if (a.query.compare) {
    j["candidates"] = nlohmann::json::array();
    for (const auto& o : a.rows) {
      j["candidates"].push_back(OutcomeJson(o, tokens, a.FlexTpOf(o)));
      if (auto it = a.row_money.find(o.strategy); it != a.row_money.end())
        j["candidates"].back()["money"] = MoneyJson(it->second, a.query.train_tokens);
    }
  }
  return j;
}

}  // namespace motley
