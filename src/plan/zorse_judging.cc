// Zorse phases 4 and 5 (zorse_search.h): the latency model misranks, so the evaluator (the
// simulator) judges the best few candidates of each kind in rounds, and then the neighbours of the
// best it found.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "plan/evaluate_all.h"
#include "plan/zorse_search.h"

namespace motley {
namespace {

// The search's state while the evaluator judges: the best plan so far and every candidate judged.
struct Judging {
  const std::vector<ZorseCandidate>& all;
  ZorsePlan out;
  double best = std::numeric_limits<double>::infinity();
  size_t at = 0;                                     // the best candidate judged so far
  std::vector<size_t> chosen;                        // every candidate judged, in the order judged
  std::vector<std::pair<double, size_t>> evaluated;  // (simulated step, candidate) of those that fit
};

// A kind of candidate: (tensor-parallel width, how its grouping split nodes).
struct Kind {
  std::vector<size_t> queue;  // its candidates, best by the model first, up to its share
  size_t taken = 0;
  double best = std::numeric_limits<double>::infinity();
};
using KindKey = std::pair<int, int>;

// The best few of each kind of candidate (tensor-parallel width; nodes whole, split, or grouped by
// the climb — of these, half as many): the latency model misranks kinds against each other, so a
// wider search must not crowd out the plans a narrower one would judge.
std::map<KindKey, Kind> KindQueues(const std::vector<ZorseCandidate>& all,
                                   const std::vector<int>& split_of_grouping, const ZorseRequest& request) {
  const size_t per_kind = static_cast<size_t>(std::max(1, request.candidates_to_evaluate));
  // A tensor-parallel candidate is judged only where its teams pay in the latency model: where the
  // same plan without them (grouping, microbatch, ministages) fits and steps no slower, the teams
  // only add all-reduces to groups that are not the bottleneck. (On Zorse's cluster C teams fit only
  // its two NVLink nodes: dozens of such candidates judged for nothing tripled HexiScale's time.)
  std::map<std::tuple<int, int64_t, int>, double> without_teams;  // (grouping, microbatch, ministages)
  for (const ZorseCandidate& c : all)
    if (c.tp_degree == 1) without_teams[{c.grouping, c.microbatch, c.ministages}] = c.model_step_s;
  std::map<KindKey, Kind> kinds;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].tp_degree > 1) {
      auto twin = without_teams.find({all[i].grouping, all[i].microbatch, all[i].ministages});
      if (twin != without_teams.end() && twin->second <= all[i].model_step_s) continue;
    }
    const KindKey key{all[i].tp_degree, split_of_grouping[all[i].grouping]};
    Kind& k = kinds[key];
    if (k.queue.size() < (key.second == 0 ? per_kind / 2 + 1 : per_kind)) k.queue.push_back(i);
  }
  return kinds;
}

// Phase 4: the first few of every kind, then more only of the kinds whose best so far is near the
// best of all (a kind the simulator finds far slower is not one the latency model's next choices
// will rescue).
Status JudgeInRounds(Judging& j, const std::vector<int>& split_of_grouping, const ZorseRequest& request,
                     const PlanEvaluator& evaluate) {
  std::map<KindKey, Kind> kinds = KindQueues(j.all, split_of_grouping, request);
  // With a plan from elsewhere (request.bound), candidates are simulated only until they are beyond
  // the slack of it, and a kind is near the best when near the better of the two: a kind whose plans
  // all stopped is not (a strategy that cannot win judges only its first few).
  const auto first = static_cast<size_t>(std::max(1, request.first_judged_per_kind));
  const auto more = static_cast<size_t>(std::max(1, request.more_judged_per_kind));
  for (size_t batch = first;; batch = more) {
    std::vector<size_t> next;
    for (auto& [_, k] : kinds) {
      const double near = std::min(j.best, request.bound.stop_after_s);
      const bool promising =
          k.taken == 0 || !std::isfinite(near) || k.best <= near * (1 + request.kind_slack);
      if (!promising) continue;
      for (size_t n = 0; n < batch && k.taken < k.queue.size(); ++n) next.push_back(k.queue[k.taken++]);
    }
    if (next.empty()) return Status::Ok();
    std::vector<Plan> plans;
    for (size_t i : next) plans.push_back(j.all[i].plan);
    // Beyond the slack of the best so far (here or elsewhere) a candidate can neither win nor keep
    // its kind near the best: its simulation stops there.
    const EvaluateBound stop_now{std::min(request.bound.stop_after_s, j.best) * (1 + request.kind_slack)};
    const std::vector<Result<PlanEvaluation>> evaluations = EvaluateAll(plans, evaluate, stop_now);
    for (size_t k = 0; k < next.size(); ++k) {
      const size_t i = next[k];
      j.chosen.push_back(i);
      if (!evaluations[k].ok()) return evaluations[k].status();
      const PlanEvaluation& e = *evaluations[k];
      if (!e.fits_memory) continue;
      j.evaluated.push_back({e.step_time_s, i});
      Kind& kind = kinds[{j.all[i].tp_degree, split_of_grouping[j.all[i].grouping]}];
      kind.best = std::min(kind.best, e.step_time_s);
      if (e.step_time_s < j.best || (e.step_time_s == j.best && i < j.at)) {
        j.best = e.step_time_s;
        j.at = i;
        j.out.plan = j.all[i].plan;
        j.out.predicted_step_s = e.step_time_s;
        j.out.explain = j.all[i].why;
      }
    }
  }
}

// Phase 5: the latency model misranks neighbours of the best plan it found (another ministage
// count, microbatch size or grouping), so the evaluator judges those too, and the search moves to a
// better one, `request.climb_rounds` times at most.
Status ClimbFromBest(Judging& j, const ZorseRequest& request, const PlanEvaluator& evaluate) {
  const std::vector<ZorseCandidate>& all = j.all;
  std::map<std::tuple<int, int, int64_t, int>, size_t> index;  // (grouping, tp, microbatch, ministages)
  std::map<int, std::vector<int64_t>> sizes;                   // per grouping, its microbatch sizes
  std::vector<int> liked;                                      // groupings by their best model step
  for (size_t i = 0; i < all.size(); ++i) {
    const ZorseCandidate& c = all[i];
    index.emplace(std::make_tuple(c.grouping, c.tp_degree, c.microbatch, c.ministages), i);
    sizes[c.grouping].push_back(c.microbatch);
    if (std::find(liked.begin(), liked.end(), c.grouping) == liked.end()) liked.push_back(c.grouping);
  }
  for (auto& [_, v] : sizes) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  const double stop_after_s = request.bound.stop_after_s * (1 + request.kind_slack);
  std::set<size_t> judged(j.chosen.begin(), j.chosen.end());
  for (int round = 0; round < request.climb_rounds; ++round) {
    const ZorseCandidate& c = all[j.at];
    std::vector<size_t> next;
    auto consider = [&](int g, int64_t b, int s) {
      auto it = index.find({g, c.tp_degree, b, s});
      if (it != index.end() && judged.insert(it->second).second) next.push_back(it->second);
    };
    for (int s : {c.ministages * 2, c.ministages / 2, c.ministages + 1, c.ministages - 1})
      consider(c.grouping, c.microbatch, s);
    const auto& b = sizes[c.grouping];
    const auto pos = std::lower_bound(b.begin(), b.end(), c.microbatch) - b.begin();
    if (pos > 0) consider(c.grouping, b[pos - 1], c.ministages);
    if (pos + 1 < static_cast<std::ptrdiff_t>(b.size())) consider(c.grouping, b[pos + 1], c.ministages);
    for (size_t k = 0, other = 0; k < liked.size() && other < 3; ++k)
      if (liked[k] != c.grouping) {
        consider(liked[k], c.microbatch, c.ministages);
        ++other;
      }
    if (next.empty()) break;
    std::vector<Plan> more;
    for (size_t i : next) more.push_back(all[i].plan);
    // Only a faster plan moves the climb: a slower one's simulation stops at the best.
    const std::vector<Result<PlanEvaluation>> answers =
        EvaluateAll(more, evaluate, EvaluateBound{std::min(stop_after_s, j.best)});
    const size_t was = j.at;
    for (size_t k = 0; k < next.size(); ++k) {
      if (!answers[k].ok()) return answers[k].status();
      if (!answers[k]->fits_memory) continue;
      j.evaluated.push_back({answers[k]->step_time_s, next[k]});
      if (answers[k]->step_time_s < j.best) {
        j.best = answers[k]->step_time_s;
        j.at = next[k];
        j.out.plan = all[j.at].plan;
        j.out.predicted_step_s = j.best;
        j.out.explain = all[j.at].why + "; found by climbing from the latency model's choices";
      }
    }
    if (j.at == was) break;
  }
  return Status::Ok();
}

}  // namespace

Result<ZorsePlan> JudgeCandidates(const std::vector<ZorseCandidate>& all,
                                  const std::vector<int>& split_of_grouping, const ZorseRequest& request,
                                  const PlanEvaluator& evaluate) {
  Judging j{all, {}, std::numeric_limits<double>::infinity(), 0, {}, {}};
  if (request.candidates_to_evaluate == 0) {  // search only: trust the latency model
    j.out.plan = all.front().plan;
    j.out.predicted_step_s = all.front().model_step_s;
    j.out.explain = all.front().why;
    j.out.considered.push_back(all.front());
    return j.out;
  }
  if (Status s = JudgeInRounds(j, split_of_grouping, request, evaluate); !s.ok()) return s;
  if (j.evaluated.empty())
    return Status::Infeasible(fmt::format(
        "zorse planner: the {} best candidates by the memory model all ran out of memory in the simulator",
        j.chosen.size()));
  if (Status s = ClimbFromBest(j, request, evaluate); !s.ok()) return s;
  std::sort(j.evaluated.begin(), j.evaluated.end());
  for (const auto& [t, i] : j.evaluated) j.out.considered.push_back(all[i]);
  return j.out;
}

}  // namespace motley
