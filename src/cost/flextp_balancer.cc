#include "cost/flextp_balancer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "cost/straggler_detector.h"

namespace motley {

FlexTpMode FlexTpModeFromName(const std::string& name) {
  if (name == "migrate") return FlexTpMode::kMigrate;
  if (name == "resize") return FlexTpMode::kResize;
  if (name == "semi") return FlexTpMode::kSemi;
  MOTLEY_CHECK_MSG(name == "off", "unknown tensor-parallel mode " + name);
  return FlexTpMode::kOff;
}

bool TeamBalance::any() const {
  if (!moves.empty()) return true;
  for (double p : prune_ratio)
    if (p > 0) return true;
  return false;
}

FlexTpRankLoad RankLoad(const TeamBalance& b, int rank) {
  FlexTpRankLoad l;
  const auto r = static_cast<size_t>(rank);
  if (r < b.predicted_s.size()) l.predicted_s = b.predicted_s[r];
  if (r < b.prune_ratio.size()) l.prune_ratio = b.prune_ratio[r];
  if (r < b.given.size()) l.units_given = b.given[r];
  if (r < b.given_heads.size()) l.heads_given = b.given_heads[r];
  l.units_received = b.received(rank, false);
  l.heads_received = b.received(rank, true);
  l.lend_projections = b.lend_projections && (l.heads_given > 0 || l.heads_received > 0);
  return l;
}

int64_t TeamBalance::received(int rank, bool attention) const {
  int64_t n = 0;
  for (const UnitMove& m : moves)
    if (m.to == rank && m.attention == attention) n += m.count;
  return n;
}

int64_t TeamBalance::migrated_units() const {
  int64_t n = 0;
  for (const UnitMove& m : moves) n += m.count;
  return n;
}

double TeamBalance::pruned_fraction(int64_t units_per_rank) const {
  if (prune_ratio.empty() || units_per_rank <= 0) return 0;
  double pruned = 0;
  for (size_t r = 0; r < prune_ratio.size(); ++r)
    pruned += prune_ratio[r] * static_cast<double>(units_per_rank - given[r]);
  return pruned / (static_cast<double>(units_per_rank) * static_cast<double>(prune_ratio.size()));
}

FlexTpBalancer::FlexTpBalancer(const TensorParallelConfig& config, int team_size, FlexTpCosts costs)
    : config_(config), mode_(FlexTpModeFromName(config.mode)), team_size_(team_size), costs_(costs) {
  MOTLEY_CHECK_GT(costs_.units, 0);
  if (costs_.heads == 0) costs_.attention_fraction = 0;
  MOTLEY_CHECK_GT(costs_.mlp_fraction + costs_.attention_fraction, 0);
  fixed_ = std::max(0.0, 1 - costs_.mlp_fraction - costs_.attention_fraction);
  MOTLEY_CHECK_GT(costs_.borrowed_cost, 0);
  borrowed_ = costs_.borrowed_cost;
  balance_.prune_ratio.assign(team_size, 0);
  balance_.given.assign(team_size, 0);
  balance_.given_heads.assign(team_size, 0);
}

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

bool FlexTpBalancer::Learn(const std::vector<double>& compute_s) {
  bool changed = false;
  if (!last_compute_s_.empty() && !last_ran_.given.empty()) {
    // Two steps at one speed: t2 / t1 = Load(after) / Load(before). Ranks that only gave work tell
    // the fixed share; then ranks that only took work (given the fixed share) tell the borrowed cost.
    auto ratio = [&](int r) { return compute_s[r] / last_compute_s_[r]; };
    auto timed = [&](int r) { return last_compute_s_[r] > 0 && compute_s[r] > 0; };
    std::vector<double> fixed, borrowed;
    for (int r = 0; r < team_size_; ++r) {
      const double o1 = OwnWork(last_ran_, r), o2 = OwnWork(balance_, r);
      if (!timed(r) || BorrowedWork(last_ran_, r) > 0 || BorrowedWork(balance_, r) > 0 ||
          std::abs(o2 - o1) < 0.25)
        continue;
      const double den = ratio(r) * (1 - o1) - (1 - o2);  // rho (f + (1-f) o1) = f + (1-f) o2
      if (std::abs(den) > 1e-9) fixed.push_back((o2 - ratio(r) * o1) / den);
    }
    if (!fixed.empty()) {
      const double f = std::clamp(Median(fixed), 0.0, 0.8);
      const double next = fixed_learned_ ? 0.5 * (fixed_ + f) : f;
      changed = std::abs(next - fixed_) > 0.05;
      fixed_ = next;
      fixed_learned_ = true;
    }
    for (int r = 0; r < team_size_; ++r) {
      const double o = OwnWork(balance_, r), b1 = BorrowedWork(last_ran_, r), b2 = BorrowedWork(balance_, r);
      if (!timed(r) || OwnWork(last_ran_, r) != o || std::abs(b2 - b1) < 0.1) continue;
      // rho (f + (1-f)(o + k b1)) = f + (1-f)(o + k b2)
      const double base = fixed_ + (1 - fixed_) * o, den = (1 - fixed_) * (b2 - ratio(r) * b1);
      if (std::abs(den) > 1e-9) borrowed.push_back((ratio(r) - 1) * base / den);
    }
    if (!borrowed.empty()) {
      const double k = std::clamp(Median(borrowed), 0.5, 4.0);
      const double next = borrowed_learned_ ? 0.5 * (borrowed_ + k) : k;
      changed = changed || std::abs(next - borrowed_) > 0.1 * borrowed_;
      borrowed_ = next;
      borrowed_learned_ = true;
    }
  }
  last_ran_ = balance_;
  last_compute_s_ = compute_s;
  return changed;
}

const TeamBalance& FlexTpBalancer::Update(const std::vector<double>& compute_s) {
  MOTLEY_CHECK_EQ(static_cast<int>(compute_s.size()), team_size_);
  const bool learned = Learn(compute_s);
  window_.push_back({compute_s, balance_});
  const size_t window = static_cast<size_t>(std::max<int64_t>(1, config_.decision_window_steps));
  if (window_.size() > window) window_.erase(window_.begin(), window_.end() - static_cast<int64_t>(window));
  // Nominal times: what each rank would have taken at its own share (the measured compute time
  // excludes the migration's communication), its median over the window.
  nominal_s_.resize(compute_s.size());
  for (int r = 0; r < team_size_; ++r) {
    std::vector<double> each;
    for (const Measured& m : window_)
      each.push_back(std::max(1e-9, m.compute_s[r]) / (Load(m.ran, r) + ResizeOverhead(m.ran, r)));
    nominal_s_[r] = Median(each);
  }
  rebalanced_ = decided_at_s_.empty() || learned;
  for (size_t r = 0; r < decided_at_s_.size() && !rebalanced_; ++r)
    rebalanced_ = std::abs(nominal_s_[r] - decided_at_s_[r]) > config_.recheck_change * decided_at_s_[r];
  if (rebalanced_) {
    decided_at_s_ = nominal_s_;
    balance_ = Decide(nominal_s_);
  }
  return balance_;
}

void FlexTpBalancer::ObserveMigrationCosts(double s_per_unit, double s_per_head) {
  if (s_per_unit > 0) costs_.migrate_s_per_unit = s_per_unit;
  if (s_per_head > 0) costs_.migrate_s_per_head = s_per_head;
}

void FlexTpBalancer::UsePretest(const SemiPretest& pretest) {
  costs_ = WithPretest(costs_, pretest);
  if (last_compute_s_.empty()) borrowed_ = costs_.borrowed_cost;  // nothing learned from steps yet
  decided_at_s_.clear();                                          // the next Update decides anew
}

void FlexTpBalancer::Move(TeamBalance& c, int s, int64_t count, bool attention,
                          const std::vector<int>& normal, const std::vector<double>& nominal) const {
  const int64_t total = attention ? costs_.heads : costs_.units;
  c.moves.erase(std::remove_if(c.moves.begin(), c.moves.end(),
                               [&](const UnitMove& mv) { return mv.from == s && mv.attention == attention; }),
                c.moves.end());
  (attention ? c.given_heads : c.given)[s] = count;
  const int64_t chunk =
      attention ? 1 : std::max<int64_t>(1, count / (8 * static_cast<int64_t>(normal.size())));
  std::vector<int64_t> to(team_size_, 0);
  for (int64_t left = count; left > 0;) {
    const int64_t n = std::min(chunk, left);
    int best = normal.front();
    double best_s = 1e300;
    for (int r : normal) {
      c.moves.push_back({s, r, 0, n, attention});
      const double t = RankTime(c, nominal, r);
      c.moves.pop_back();
      if (t < best_s) best_s = t, best = r;
    }
    c.moves.push_back({s, best, 0, n, attention});
    to[best] += n;
    left -= n;
  }
  c.moves.erase(std::remove_if(c.moves.begin(), c.moves.end(),
                               [&](const UnitMove& mv) { return mv.from == s && mv.attention == attention; }),
                c.moves.end());
  int64_t begin = total - count;
  for (int r = 0; r < team_size_; ++r)
    if (to[r] > 0) {
      c.moves.push_back({s, r, begin, to[r], attention});
      begin += to[r];
    }
}

void FlexTpBalancer::MoveWork(TeamBalance& c, int s, int64_t units, const std::vector<int>& normal,
                              const std::vector<double>& nominal) const {
  // With the units, the number of its query heads that keeps the team's time block by block
  // least (TeamTime over s and the receivers): the same share as the units unless another is better.
  std::vector<bool> skip(team_size_, true);
  skip[s] = false;
  for (int r : normal) skip[r] = false;
  const int64_t share = units * costs_.heads / costs_.units;
  TeamBalance best;
  double best_s = 0;
  for (int64_t a = -1; a <= costs_.heads; ++a) {
    if (a == share) continue;
    TeamBalance t = c;
    Move(t, s, a < 0 ? share : a, true, normal, nominal);
    Move(t, s, units, false, normal, nominal);
    const double time_s = TeamTime(t, nominal, skip);
    if (a < 0 || time_s < best_s * (1 - 1e-12)) best = std::move(t), best_s = time_s;
  }
  c = std::move(best);
}

void FlexTpBalancer::PruneToCatchUp(TeamBalance& c, int s, double target,
                                    const std::vector<double>& nominal) const {
  // The straggler's time a pruning ratio of 1 would save: its own units left, and its attention
  // heads' projections.
  const double all = costs_.mlp_fraction + costs_.attention_fraction;
  const double units = static_cast<double>(costs_.units);
  const double prunable = (1 - fixed_) * nominal[s] *
                          (costs_.mlp_fraction / all * (units - static_cast<double>(c.given[s])) / units +
                           costs_.attention_fraction / all * costs_.attention_prunable * OwnAttention(c, s));
  c.prune_ratio[s] = 0;
  const double gap = RankTime(c, nominal, s) - target;  // Eq. 1: the savings offset the gap
  if (prunable > 0) c.prune_ratio[s] = std::clamp(gap / prunable, 0.0, config_.max_prune_ratio);
}

// FlexTP §IV-B. Who migrates (Eq. 3): heaviest first, straggler k migrates while that is
// cost-effective — the time it would save by migrating the work that brings it alone to the
// reference (T_k - T_ref) exceeds the most any receiver pays for the work of stragglers 1..k
// (transfers and borrowed compute); the first that is not ends it. A single straggler migrates.
// How much (Eq. 2): the work the migrating stragglers would need is split into a migrated part and a
// pruned part (Eq. 1's ratio to the reference, capped at `max_prune_ratio`) so that the stragglers'
// resizing cost — ZERO-resizing's overhead, and what the cap leaves — balances the receivers'
// migration cost: one share of each migrating straggler's work, found by bisection (the
// stragglers' lead over the slowest receiver falls as the share grows). With resizing free and
// within its cap the balance is at no migration: SEMI "solely runs resizing if the speed
// difference is tolerable". The stragglers that do not migrate prune by Eq. 1 to the pace the
// migration leaves (the slowest receiver).
// Our reading where the paper is silent: Eq. 2's balance also sizes the migration of several
// stragglers (the paper migrates their whole excess, which overloads the receivers when half the
// team straggles), and the receivers are the normal ranks only.
void FlexTpBalancer::SemiSplit(TeamBalance& b, const std::vector<double>& nominal,
                               const std::vector<int>& stragglers, const std::vector<int>& normal,
                               double reference) const {
  const int64_t units = costs_.units;
  auto slowest = [&](const TeamBalance& c, const std::vector<int>& ranks) {
    double t = 0;
    for (int r : ranks) t = std::max(t, RankTime(c, nominal, r));
    return t;
  };
  // The units that bring straggler s alone to the reference by migration (all of them if none do).
  auto needed = [&](int s) {
    int64_t lo = 0, hi = units;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      TeamBalance c = b;
      MoveWork(c, s, mid, normal, nominal);
      if (RankTime(c, nominal, s) <= reference) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  };
  // Eq. 3: the migrating stragglers and the work each needs.
  std::vector<std::pair<int, int64_t>> migrating;
  const double receivers_before = slowest(b, normal);
  TeamBalance cumulative = b;
  for (int s : stragglers) {
    const int64_t work = needed(s);
    MoveWork(cumulative, s, work, normal, nominal);
    const double cost = slowest(cumulative, normal) - receivers_before;
    const double reduction = RankTime(b, nominal, s) - reference;
    if (stragglers.size() > 1 && reduction <= cost) break;
    migrating.push_back({s, work});
  }
  // Eq. 2: the migrated share k / units of that work; the others prune to the pace it leaves.
  std::vector<int> migrants;
  for (const auto& [s, work] : migrating) migrants.push_back(s);
  auto split = [&](int64_t k) {
    TeamBalance c = b;
    for (const auto& [s, work] : migrating) MoveWork(c, s, work * k / units, normal, nominal);
    const double pace = std::max(reference, slowest(c, normal));
    for (int s : stragglers)
      PruneToCatchUp(
          c, s, std::find(migrants.begin(), migrants.end(), s) != migrants.end() ? reference : pace, nominal);
    return c;
  };
  auto lead = [&](const TeamBalance& c) { return slowest(c, migrants) - slowest(c, normal); };
  TeamBalance lo_b = split(0);
  if (migrating.empty() || lead(lo_b) <= 0) {  // resizing alone keeps pace
    b = std::move(lo_b);
    return;
  }
  TeamBalance hi_b = split(units);
  if (lead(hi_b) >= 0) {  // even migrating all that work leaves a straggler behind
    b = std::move(hi_b);
    return;
  }
  int64_t lo = 0, hi = units;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    TeamBalance c = split(mid);
    if (lead(c) > 0) {
      lo = mid, lo_b = std::move(c);
    } else {
      hi = mid, hi_b = std::move(c);
    }
  }
  std::vector<int> team(team_size_);
  std::iota(team.begin(), team.end(), 0);
  b = slowest(lo_b, team) <= slowest(hi_b, team) ? std::move(lo_b) : std::move(hi_b);
}

void FlexTpBalancer::Search(TeamBalance& b, const std::vector<double>& nominal,
                            const std::vector<std::pair<int, double>>& stragglers,
                            const std::vector<int>& normal, double reference, bool may_move,
                            bool may_prune) const {
  const int64_t units = costs_.units, heads = costs_.heads;
  // Stragglers not served yet: an option for the one being served is judged without them (they
  // are slow whatever it does, and will be served next).
  std::vector<bool> pending(team_size_, false);
  for (const auto& [s, skew] : stragglers) pending[s] = true;
  for (const auto& [s, skew] : stragglers) {
    (void)skew;
    pending[s] = false;
    struct Option {
      TeamBalance b;
      double time_s, pruned;
    };
    std::vector<Option> options;
    const int64_t step = std::max<int64_t>(1, units / 20);
    for (int64_t a = 0; a <= (may_move ? heads : 0); ++a)
      for (int64_t m = 0; m <= (may_move ? units : 0);
           m = (m == units ? units + 1 : std::min(units, m + step))) {
        TeamBalance c = b;
        Move(c, s, a, true, normal, nominal);
        Move(c, s, m, false, normal, nominal);
        if (may_prune) PruneToCatchUp(c, s, reference, nominal);
        // The team's time block by block (TeamTime): a balance even over the step but not within
        // each block still waits at every block's all-reduce.
        const double time_s = TeamTime(c, nominal, pending);
        options.push_back({c, time_s, c.prune_ratio[s] * static_cast<double>(units - m)});
      }
    double fastest = 1e300;
    for (const Option& o : options) fastest = std::min(fastest, o.time_s);
    const Option* pick = nullptr;
    for (const Option& o : options) {
      if (may_move && may_prune) {  // the least pruning among the nearly fastest
        if (o.time_s <= fastest * (1 + config_.straggler_threshold) &&
            (pick == nullptr || o.pruned < pick->pruned))
          pick = &o;
      } else if (pick == nullptr || o.time_s < pick->time_s) {
        pick = &o;
      }
    }
    b = pick->b;
  }
}

TeamBalance FlexTpBalancer::Decide(const std::vector<double>& nominal) const {
  TeamBalance b;
  // Lent heads move as their projections where the team says so (point to point only).
  b.lend_projections = costs_.kv_from_owner && config_.lend_attention == "projections";
  b.prune_ratio.assign(team_size_, 0);
  b.given.assign(team_size_, 0);
  b.given_heads.assign(team_size_, 0);
  auto finish = [&](TeamBalance& t) {
    t.predicted_s.resize(team_size_);
    for (int r = 0; r < team_size_; ++r) t.predicted_s[r] = RankTime(t, nominal, r);
    t.team_s = TeamTime(t, nominal, {});
  };
  // Migrate and resize judge by the team's average (FlexTP §III-A); SEMI by its fastest rank when
  // asked (§IV-B's strictest criterion: `semi_reference`), else by the average too.
  const StragglerReference criterion = mode_ == FlexTpMode::kSemi && config_.semi_reference == "fastest"
                                           ? StragglerReference::kFastest
                                           : StragglerReference::kAverage;
  const auto stragglers = StragglersBySkew(nominal, config_.straggler_threshold, criterion);
  if (mode_ == FlexTpMode::kOff || stragglers.empty()) {
    finish(b);
    return b;
  }
  std::vector<int> normal;
  for (int r = 0; r < team_size_; ++r)
    if (std::none_of(stragglers.begin(), stragglers.end(), [&](const auto& s) { return s.first == r; }))
      normal.push_back(r);
  // What a straggler catches up with: the normal ranks' mean (they are all within the threshold of
  // the reference; for SEMI that is within it of the fastest).
  double reference = 0;
  for (int r : normal) reference += nominal[r] / static_cast<double>(normal.size());

  if (mode_ == FlexTpMode::kSemi && config_.semi_solver == "cost-model") {
    std::vector<int> order;
    for (const auto& [s, skew] : stragglers) order.push_back(s);
    TeamBalance split = b;
    SemiSplit(split, nominal, order, normal, reference);
    finish(split);
    // Our guard where the paper is silent: Eq. 2 balances the stragglers' resizing cost against the
    // receivers' migration cost, which is not the team's time; when the same cost model finds
    // migration alone (exact) faster block by block, SEMI migrates. (On the FlexTP bench with one
    // rank 4x, Eq. 2 pruned half of what the straggler kept and ran 1.21-1.28x the no-straggler
    // step where migration alone ran 1.14-1.16x: bench/reports/flextp_stragglers.md, session 31.)
    TeamBalance moved = b;
    Search(moved, nominal, stragglers, normal, reference, /*may_move=*/true, /*may_prune=*/false);
    finish(moved);
    return moved.team_s < split.team_s ? moved : split;
  }
  Search(b, nominal, stragglers, normal, reference,
         /*may_move=*/mode_ == FlexTpMode::kMigrate || mode_ == FlexTpMode::kSemi,
         /*may_prune=*/mode_ == FlexTpMode::kResize || mode_ == FlexTpMode::kSemi);
  finish(b);
  return b;
}

std::vector<double> LayerPruneRatios(const std::vector<std::vector<double>>& unit_variation, double ratio,
                                     double decay, double max_ratio) {
  const size_t n = unit_variation.size();
  std::vector<double> out(n, std::min(ratio, max_ratio));
  std::vector<double> all;
  for (const auto& v : unit_variation) all.insert(all.end(), v.begin(), v.end());
  if (n < 2 || ratio <= 0 || all.empty()) return out;
  const double threshold = Median(all);
  std::vector<double> candidates(n, 0);  // each layer's share of units below the threshold
  double mean = 0;
  for (size_t l = 0; l < n; ++l) {
    const auto& v = unit_variation[l];
    if (!v.empty())
      candidates[l] =
          static_cast<double>(std::count_if(v.begin(), v.end(), [&](double x) { return x < threshold; })) /
          static_cast<double>(v.size());
    mean += candidates[l] / static_cast<double>(n);
  }
  if (mean <= 0) return out;
  std::vector<double> weight(n);
  for (size_t l = 0; l < n; ++l) weight[l] = (1 - decay) + decay * candidates[l] / mean;
  // Scale to the mean `ratio`, capping and handing the excess on (water-filling).
  std::vector<bool> capped(n, false);
  double budget = ratio * static_cast<double>(n);
  for (size_t round = 0; round < n; ++round) {
    double w = 0;
    size_t open = 0;
    for (size_t l = 0; l < n; ++l)
      if (!capped[l]) w += weight[l], ++open;
    if (open == 0) break;
    bool changed = false;
    for (size_t l = 0; l < n; ++l)
      if (!capped[l]) out[l] = w > 0 ? budget * weight[l] / w : budget / static_cast<double>(open);
    for (size_t l = 0; l < n; ++l)
      if (!capped[l] && out[l] > max_ratio) {
        out[l] = max_ratio;
        capped[l] = true;
        budget -= max_ratio;
        changed = true;
      }
    if (!changed) break;
    // With the rule giving the rest nothing, they share what is left evenly.
    double rest = 0;
    for (size_t l = 0; l < n; ++l)
      if (!capped[l]) rest += weight[l];
    if (rest <= 0)
      for (size_t l = 0; l < n; ++l)
        if (!capped[l]) weight[l] = 1;
  }
  return out;
}

}  // namespace motley
