#include "plan/offer_search.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "plan/evaluate_all.h"

namespace motley {
namespace {

// a dominates b: no dearer, no slower, and better in one.
bool Dominates(const AllocationOutcome& a, const AllocationOutcome& b) {
  return a.usd_per_hour <= b.usd_per_hour && a.tokens_per_s >= b.tokens_per_s &&
         (a.usd_per_hour < b.usd_per_hour || a.tokens_per_s > b.tokens_per_s);
}

// The Pareto front, one outcome more: `o` joins `front` (kept in the order its members joined)
// unless a member beats or equals it, and the members it beats go.
void JoinFront(std::vector<AllocationOutcome>& front, const AllocationOutcome& o) {
  if (!o.feasible) return;
  for (const AllocationOutcome& f : front)
    if (Dominates(f, o) || (f.usd_per_hour == o.usd_per_hour && f.tokens_per_s == o.tokens_per_s)) return;
  std::erase_if(front, [&](const AllocationOutcome& f) { return Dominates(o, f); });
  front.push_back(o);
}

std::vector<AllocationOutcome> ByPrice(std::vector<AllocationOutcome> front) {
  std::stable_sort(front.begin(), front.end(), [](const AllocationOutcome& a, const AllocationOutcome& b) {
    return a.usd_per_hour < b.usd_per_hour;
  });
  return front;
}

// The Pareto front of feasible outcomes, by ascending price; of two equal ones the first found.
std::vector<AllocationOutcome> Front(const std::vector<AllocationOutcome>& all) {
  std::vector<AllocationOutcome> front;
  for (const AllocationOutcome& o : all) JoinFront(front, o);
  return ByPrice(std::move(front));
}

// Allocations as keys of hashed sets and maps: the search over an estimate looks them up by the
// hundred thousand (ordered ones took most of its time).
struct AllocationHash {
  size_t operator()(const Allocation& a) const {
    size_t h = a.size();
    for (int n : a) h = h * 1000003u ^ static_cast<size_t>(n);
    return h;
  }
};
using AllocationSet = std::unordered_set<Allocation, AllocationHash>;

// A local search over allocations with one evaluator (the planner, or the estimate).
// The allocations in an order that spreads over the list first: its middle, its quarters, its
// eighths, ... (so that a search running out of evaluations has varied every part of the front).
std::vector<Allocation> SpreadOrder(const std::vector<Allocation>& v) {
  std::vector<Allocation> out;
  std::vector<bool> taken(v.size(), false);
  for (size_t parts = 1; out.size() < v.size(); parts *= 2)
    for (size_t p = 0; p < parts; ++p) {
      const size_t i = (2 * p + 1) * v.size() / (2 * parts);
      if (i < v.size() && !taken[i]) {
        taken[i] = true;
        out.push_back(v[i]);
      }
      if (parts > 2 * v.size())
        for (size_t j = 0; j < v.size(); ++j)
          if (!taken[j]) {
            taken[j] = true;
            out.push_back(v[j]);
          }
    }
  return out;
}

class Search {
 public:
  Search(const std::vector<int>& max_nodes, const AllocationEvaluator& evaluate,
         const OfferSearchConfig& config, int budget, double near_front)
      : max_(max_nodes), evaluate_(evaluate), config_(config), budget_(budget), near_front_(near_front) {}

  // Plans an allocation once (the answer is remembered under what it was given and what its plan
  // uses). False when the evaluations have run out.
  bool Try(const Allocation& given) { return TryAll({given}); }

  // Plans each allocation not planned before, all at once (on up to config_.batch threads), each
  // with what it must reach as the outcomes before them set it (so the answers are the same on any
  // machine). False when the evaluations have run out.
  bool TryAll(const std::vector<Allocation>& given) {
    std::vector<Allocation> batch;
    bool more = true;
    for (const Allocation& g : given) {
      Allocation a = config_.within ? config_.within(g) : g;
      if (std::all_of(a.begin(), a.end(), [](int n) { return n == 0; })) continue;
      if (seen_.count(a) || std::find(batch.begin(), batch.end(), a) != batch.end()) continue;
      if (static_cast<int>(outcomes_.size() + batch.size()) >= budget_) {
        more = false;
        break;
      }
      batch.push_back(std::move(a));
    }
    std::vector<double> need;
    for (const Allocation& a : batch) need.push_back(Need(a));
    std::vector<AllocationOutcome> answers(batch.size());
    // (The estimate takes microseconds: on this thread, not on threads started for it.)
    const bool estimating = &evaluate_ == &config_.estimate;
    ForEachOnEveryCore(
        batch.size(), [&](size_t i) { answers[i] = evaluate_(batch[i], need[i]); },
        estimating ? 1 : static_cast<size_t>(std::max(1, config_.batch)));
    for (size_t i = 0; i < batch.size(); ++i) {
      AllocationOutcome& o = answers[i];
      if (o.nodes.empty()) o.nodes = batch[i];
      seen_.insert(batch[i]);
      seen_.insert(o.nodes);
      outcomes_.push_back(std::move(o));
    }
    return more;
  }

  // The speed an allocation must reach to be near the front: the fastest found at its price (as the
  // estimate bounds it from below) or less, less the near_front margin.
  double Need(const Allocation& a) const {
    if (!config_.estimate || &evaluate_ == &config_.estimate) return 0;
    const double usd = config_.estimate(a, 0).usd_per_hour;
    double fastest = 0;
    for (const AllocationOutcome& o : outcomes_)
      if (o.feasible && o.usd_per_hour <= usd) fastest = std::max(fastest, o.tokens_per_s);
    return fastest / near_front_;
  }

  // Each offer alone at 1, 2, 4, ... of its nodes and at all of them; every offer at all its nodes
  // and all but one, in the whole list and within each region.
  std::vector<Allocation> Seeds() const {
    const size_t k = max_.size();
    std::set<int> regions(config_.region.begin(), config_.region.end());
    regions.insert(-1);  // every region
    std::vector<Allocation> out;
    for (int r : regions) {
      Allocation all(k, 0);
      for (size_t i = 0; i < k; ++i)
        if (r < 0 || config_.region.empty() || config_.region[i] == r) all[i] = max_[i];
      out.push_back(all);
      for (size_t i = 0; i < k; ++i) {
        if (all[i] == 0) continue;
        Allocation b = all;
        b[i] = 0;
        out.push_back(b);
      }
    }
    for (size_t i = 0; i < k; ++i)
      for (int n = 1; n <= max_[i]; n = n < max_[i] && n * 2 > max_[i] ? max_[i] : n * 2) {
        Allocation a(k, 0);
        a[i] = n;
        out.push_back(a);
      }
    return out;
  }

  // Its variations, the likeliest first: one node more or less of an offer it takes, one node of
  // one it takes traded for one of another it takes, every offer twice or half as much, an offer it
  // takes twice or half as much, one node of an offer it does not take (its own regions' first),
  // and one node of an offer it takes traded for one of an offer it does not take. The first
  // `limit` of them.
  std::vector<Allocation> Neighbours(const Allocation& a, size_t limit = SIZE_MAX) const {
    std::vector<Allocation> out;
    AllocationSet listed;
    const size_t k = a.size();
    auto add = [&](Allocation b) {
      for (size_t i = 0; i < k; ++i)
        if (b[i] < 0 || b[i] > max_[i]) return;
      if (b != a && listed.insert(b).second) out.push_back(std::move(b));
    };
    auto with = [&](size_t i, int n) {
      Allocation b = a;
      b[i] = n;
      return b;
    };
    auto traded = [&](size_t from, size_t to) {
      Allocation b = a;
      --b[from];
      ++b[to];
      return b;
    };
    std::set<int> regions;
    for (size_t i = 0; i < k; ++i)
      if (a[i] > 0 && !config_.region.empty()) regions.insert(config_.region[i]);
    auto own_region = [&](size_t i) {
      return config_.region.empty() || regions.count(config_.region[i]) > 0;
    };
    auto more = [&] { return out.size() < limit; };
    for (size_t i = 0; i < k && more(); ++i)
      if (a[i] > 0) {
        add(with(i, a[i] + 1));
        add(with(i, a[i] - 1));
      }
    for (size_t i = 0; i < k && more(); ++i)
      for (size_t j = 0; j < k && more(); ++j)
        if (i != j && a[i] > 0 && a[j] > 0) add(traded(i, j));
    for (bool twice : {true, false}) {
      if (!more()) break;
      Allocation b = a;
      for (size_t i = 0; i < k; ++i) b[i] = twice ? std::min(a[i] * 2, max_[i]) : a[i] / 2;
      add(std::move(b));
    }
    for (size_t i = 0; i < k && more(); ++i)
      if (a[i] > 0) {
        add(with(i, a[i] * 2));
        add(with(i, a[i] / 2));
      }
    for (bool own : {true, false})
      for (size_t i = 0; i < k && more(); ++i)
        if (a[i] == 0 && own_region(i) == own) add(with(i, 1));
    for (bool own : {true, false})
      for (size_t i = 0; i < k && more(); ++i)
        for (size_t j = 0; j < k && more(); ++j)
          if (a[i] > 0 && a[j] == 0 && own_region(j) == own) add(traded(i, j));
    return out;
  }

  // Feasible outcomes no front member beats by near_front in both price and speed, by ascending price.
  std::vector<Allocation> NearFront(double near_front) {
    // Front(outcomes_), carried on from the outcomes it last saw (the climb asks after each batch).
    for (; front_upto_ < outcomes_.size(); ++front_upto_) JoinFront(front_, outcomes_[front_upto_]);
    const std::vector<AllocationOutcome> front = ByPrice(front_);
    std::vector<const AllocationOutcome*> near;
    for (const AllocationOutcome& o : outcomes_) {
      if (!o.feasible) continue;
      const bool far = std::any_of(front.begin(), front.end(), [&](const AllocationOutcome& m) {
        return m.usd_per_hour * near_front <= o.usd_per_hour &&
               m.tokens_per_s >= o.tokens_per_s * near_front &&
               (near_front > 1 || m.usd_per_hour < o.usd_per_hour || m.tokens_per_s > o.tokens_per_s);
      });
      if (!far) near.push_back(&o);
    }
    std::stable_sort(near.begin(), near.end(), [](const AllocationOutcome* x, const AllocationOutcome* y) {
      return x->usd_per_hour < y->usd_per_hour;
    });
    std::vector<Allocation> out;
    for (const AllocationOutcome* o : near) out.push_back(o->nodes);
    return out;
  }

  // Varies what is on or near the front a few ways at a time, round after round over all of it
  // (so that the evaluations are spread over the whole front), until every variation of it has been
  // tried or the evaluations run out.
  void Climb() {
    constexpr size_t kTriesARound = 4;
    // The variations of each allocation tried so far.
    std::unordered_map<Allocation, size_t, AllocationHash> tried;
    for (bool more = true; more;) {
      more = false;
      for (double near : {1.0, near_front_}) {
        for (const Allocation& f : SpreadOrder(NearFront(near))) {
          size_t& at = tried[f];
          const std::vector<Allocation> next = Neighbours(f, at + kTriesARound);  // (the first ones)
          std::vector<Allocation> these;
          for (size_t n = 0; n < kTriesARound && at < next.size(); ++n, ++at) these.push_back(next[at]);
          if (these.empty()) continue;
          more = true;
          if (!TryAll(these)) return;
        }
        if (more) break;  // the front first: what is near it once the front is done
      }
    }
  }

  OfferSearchResult Result() const {
    return {Front(outcomes_), static_cast<int>(outcomes_.size()), refined_};
  }

  // Plans what is within near_refine of the front again with the full planning (spread over the
  // front's prices, at most max_refinements): its answers replace the quick ones.
  void Refine() {
    // The front first, then what could join it were its speed up to near_refine faster (its
    // price is no estimate: no outcome as cheap is near_refine times faster); each spread over
    // its prices, each allocation once.
    std::vector<Allocation> near;
    std::set<Allocation> once;
    for (const double margin : {1.0, config_.near_refine}) {
      std::vector<const AllocationOutcome*> could;
      for (const AllocationOutcome& o : outcomes_) {
        if (!o.feasible) continue;
        const bool beaten = std::any_of(outcomes_.begin(), outcomes_.end(), [&](const AllocationOutcome& m) {
          return m.feasible && m.usd_per_hour <= o.usd_per_hour &&
                 m.tokens_per_s >= o.tokens_per_s * margin && (margin > 1 || Dominates(m, o));
        });
        if (!beaten) could.push_back(&o);
      }
      std::stable_sort(could.begin(), could.end(),
                       [](const AllocationOutcome* x, const AllocationOutcome* y) {
                         return x->usd_per_hour < y->usd_per_hour;
                       });
      std::vector<Allocation> tier;
      for (const AllocationOutcome* o : could)
        if (once.insert(o->nodes).second) tier.push_back(o->nodes);
      for (Allocation& a : SpreadOrder(tier)) near.push_back(std::move(a));
    }
    std::map<Allocation, size_t> at;  // an outcome by the allocation it was planned on
    for (size_t i = 0; i < outcomes_.size(); ++i) at.emplace(outcomes_[i].nodes, i);
    near.resize(std::min(near.size(), static_cast<size_t>(std::max(0, config_.max_refinements))));
    // Each is asked for a plan faster than its quick one (the full planning stops what is slower
    // early); where it finds none, the quick plan stays — as it stays where it beats the full one's.
    std::vector<AllocationOutcome> full(near.size());
    ForEachOnEveryCore(
        near.size(),
        [&](size_t i) { full[i] = config_.refine(near[i], outcomes_[at.at(near[i])].tokens_per_s); },
        static_cast<size_t>(std::max(1, config_.batch)));
    for (size_t i = 0; i < near.size(); ++i) {
      AllocationOutcome& o = full[i];
      if (o.nodes.empty()) o.nodes = near[i];
      ++refined_;
      AllocationOutcome& quick = outcomes_[at.at(near[i])];
      if (!o.feasible) continue;
      if (!quick.feasible || !Dominates(quick, o)) quick = std::move(o);
    }
    front_.clear();
    front_upto_ = 0;
  }

 private:
  const std::vector<int>& max_;
  const AllocationEvaluator& evaluate_;
  const OfferSearchConfig& config_;
  const int budget_;
  const double near_front_;
  std::vector<AllocationOutcome> outcomes_;
  // NearFront's front of outcomes_[0, front_upto_), as Front keeps it before sorting (outcomes only
  // grow until Refine, which replaces some and clears it).
  std::vector<AllocationOutcome> front_;
  size_t front_upto_ = 0;
  AllocationSet seen_;
  int refined_ = 0;
};

}  // namespace

OfferSearchResult SearchOffers(const std::vector<int>& max_nodes, const AllocationEvaluator& evaluate,
                               const OfferSearchConfig& config) {
  MOTLEY_CHECK(config.region.empty() || config.region.size() == max_nodes.size());
  if (!config.estimate) {
    Search search(max_nodes, evaluate, config, config.max_evaluations, config.near_front);
    for (const Allocation& a : search.Seeds()) search.Try(a);
    search.Climb();
    if (config.refine) search.Refine();
    return search.Result();
  }
  // With an estimate: the search runs on it, the planner plans what the estimate puts near its
  // front (spread over its prices), and the search goes on from the planner's front by counts.
  Search rough(max_nodes, config.estimate, config, config.max_estimates, config.near_estimate);
  for (const Allocation& a : rough.Seeds()) rough.Try(a);
  rough.Climb();
  std::vector<Allocation> near = rough.NearFront(config.near_estimate);
  Search search(max_nodes, evaluate, config, config.max_evaluations, config.near_front);
  const size_t first = std::min<size_t>(near.size(), static_cast<size_t>(config.max_evaluations / 2));
  std::vector<Allocation> batch;
  for (size_t i = 0; i < first; ++i) {
    batch.push_back(near[first == near.size() ? i : i * (near.size() - 1) / std::max<size_t>(first - 1, 1)]);
    if (batch.size() == static_cast<size_t>(std::max(1, config.batch)) || i + 1 == first) {
      search.TryAll(batch);
      batch.clear();
    }
  }
  search.Climb();
  if (config.refine) search.Refine();
  return search.Result();
}

OfferSearchResult SearchAllOffers(const std::vector<int>& max_nodes, const AllocationEvaluator& evaluate,
                                  const std::function<Allocation(const Allocation&)>& within) {
  std::vector<AllocationOutcome> all;
  Allocation a(max_nodes.size(), 0);
  while (true) {
    size_t i = 0;
    while (i < a.size() && a[i] == max_nodes[i]) a[i++] = 0;
    if (i == a.size()) break;
    ++a[i];
    if (within && within(a) != a) continue;
    AllocationOutcome o = evaluate(a, 0);
    if (o.nodes.empty()) o.nodes = a;
    all.push_back(std::move(o));
  }
  return {Front(all), static_cast<int>(all.size())};
}

std::optional<Objective> ObjectiveFromName(const std::string& name) {
  if (name == "time") return Objective::kTime;
  if (name == "cost") return Objective::kCost;
  if (name == "time-within-budget") return Objective::kTimeWithinBudget;
  if (name == "cost-within-deadline") return Objective::kCostWithinDeadline;
  return std::nullopt;
}

std::vector<std::string> ObjectiveNames() {
  return {"time", "cost", "time-within-budget", "cost-within-deadline"};
}

bool MeetsConstraints(const ObjectiveSpec& spec, const AllocationOutcome& o) {
  if (!o.feasible || !(o.tokens_per_s > 0)) return false;
  const double usd_per_million = o.usd_per_hour / (o.tokens_per_s * 3600) * 1e6;
  return o.usd_per_hour <= spec.max_usd_per_hour * (1 + 1e-12) &&
         usd_per_million <= spec.max_usd_per_million_tokens * (1 + 1e-12) &&
         o.tokens_per_s >= spec.min_tokens_per_s * (1 - 1e-12);
}

double ObjectiveScore(const ObjectiveSpec& spec, const AllocationOutcome& o) {
  MOTLEY_CHECK(o.tokens_per_s > 0);
  if (spec.objective == Objective::kCost || spec.objective == Objective::kCostWithinDeadline)
    return o.usd_per_hour / (o.tokens_per_s * 3600) * 1e6;  // dollars a million tokens
  return 1e6 / o.tokens_per_s;                              // seconds a million tokens
}

std::optional<AllocationOutcome> ChooseFromFront(const std::vector<AllocationOutcome>& front,
                                                 const ObjectiveSpec& spec) {
  std::optional<AllocationOutcome> best;
  for (const AllocationOutcome& o : front) {
    if (!MeetsConstraints(spec, o)) continue;
    if (!best) {
      best = o;
      continue;
    }
    const double a = ObjectiveScore(spec, o), b = ObjectiveScore(spec, *best);
    // Ties: the cheaper for time, the faster for cost.
    const bool cost = spec.objective == Objective::kCost || spec.objective == Objective::kCostWithinDeadline;
    if (a < b ||
        (a == b && (cost ? o.tokens_per_s > best->tokens_per_s : o.usd_per_hour < best->usd_per_hour)))
      best = o;
  }
  return best;
}

}  // namespace motley
