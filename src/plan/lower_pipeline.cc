// Pipelines (GPipe, 1F1B, interleaved ministages): the global task order (pipeline_order.h) with
// each visit's parameter preparation and finish put where they belong in it.
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "plan/lowerer.h"

namespace motley::lowering {

Lowerer::PipelineVisits Lowerer::ScanVisits(const std::vector<Task>& order) {
  PipelineVisits out;
  out.of_group.resize(plan_.groups.size());
  std::vector<int> started_visit(s_.programs.size(), -1);  // rank -> the visit (ordinal) it last started
  // (Tasks of one visit mostly follow each other: its entries are looked up again only when it changes.)
  std::pair<int, int> visit{-1, -1};
  std::pair<size_t, size_t>* visit_span = nullptr;
  std::vector<std::pair<int, size_t>>* visit_started = nullptr;
  int visit_ordinal = -1;
  for (size_t i = 0; i < order.size(); ++i) {
    const Task& t = order[i];
    const int g = ministages_[t.v].group;
    if (const std::pair<int, int> now{g, (t.backward ? 1 : 0) * num_ministages_ + t.v}; now != visit) {
      visit = now;
      auto [it, inserted] = out.span.try_emplace(visit, i, i);
      if (inserted) {
        visit_number_[visit] = static_cast<int>(out.of_group[g].size());
        out.of_group[g].push_back({t.backward, t.v});
      }
      visit_span = &it->second;
      visit_started = &out.started[visit];
      visit_ordinal = visit_number_[visit];
    }
    visit_span->second = i;
    const int leader = RankOf(t.v, t.m);
    if (int& last = started_visit[static_cast<size_t>(leader)]; last != visit_ordinal) {
      last = visit_ordinal;
      visit_started->emplace_back(leader, i);
    }
  }
  return out;
}

void Lowerer::EmitPipeline() {
  const int num_groups = static_cast<int>(plan_.groups.size());
  // Visits and where their preparation and finish go in the global order.
  std::vector<Task> order = PipelineOrder(plan_, ministages_, num_mb_, routing_rank_);
  PipelineVisits scanned = ScanVisits(order);
  const auto& visits = scanned.of_group;
  auto& span = scanned.span;
  auto& started = scanned.started;
  // Where each visit's preparation goes. The first visit's: before everything. The next visit's
  // (prefetched while this one computes): on each rank right after its first task of this one —
  // so that no rank's program differs from another's by where it falls — and on a rank without a
  // task here once the last has started; but never before the visit before this one has finished
  // on every rank (its reduction), so that every rank meets the group's collectives in one order.
  struct Prepare {
    size_t at = 0;
    bool after_finishes = false;  // (at `at`: before or after the finishes there)
    bool backward = false;
    int g = 0, v = 0;
    bool continuation = false;
    std::vector<int> ranks;  // empty: all of the group's
  };
  std::vector<Prepare> prepares;
  std::vector<std::pair<size_t, std::pair<int, int>>> finishes;  // (after position, (g, key))
  auto key_of = [&](int g, size_t k) {
    return (visits[g][k].first ? 1 : 0) * num_ministages_ + visits[g][k].second;
  };
  for (int g = 0; g < num_groups; ++g) {
    for (size_t k = 0; k < visits[g].size(); ++k) {
      const auto [backward, v] = visits[g][k];
      const int key = key_of(g, k);
      // The last ministage turns around: its backward follows its forward with parameters in place.
      const bool continuation = k > 0 && backward && !visits[g][k - 1].first && visits[g][k - 1].second == v;
      const bool continued =
          k + 1 < visits[g].size() && !backward && visits[g][k + 1].first && visits[g][k + 1].second == v;
      if (backward || (policy_.gather_per_visit && !continued))
        finishes.push_back({span[{g, key}].second, {g, key}});
      if (!(policy_.gather_per_visit || (policy_.gather_once && !backward)) ||
          (continuation && !policy_.offload_params))
        continue;
      const Prepare prepare{0, false, backward, g, v, continuation, {}};
      if (k == 0 || !policy_.gather_per_visit) {
        EmitVisitPrepare(g, v, backward, continuation);  // before any task
        continue;
      }
      const auto& firsts = started[{g, key_of(g, k - 1)}];
      const bool settled_first = k < 2;
      const size_t settled = settled_first ? 0 : span[{g, key_of(g, k - 2)}].second;
      auto add = [&](size_t first, std::vector<int> ranks) {
        Prepare p = prepare;
        p.at = settled_first || first > settled ? first : settled;
        p.after_finishes = p.at != first;
        p.ranks = std::move(ranks);
        prepares.push_back(std::move(p));
      };
      std::vector<int> idle;  // the group's ranks without a task in the visit
      for (size_t r = 0; r < group_ranks_[g].size(); r += static_cast<size_t>(Tp(g))) {
        const int leader = group_ranks_[g][r];
        if (std::none_of(firsts.begin(), firsts.end(), [&](const auto& f) { return f.first == leader; }))
          for (int j = 0; j < Tp(g); ++j) idle.push_back(leader + j);
      }
      for (const auto& [leader, first] : firsts) {
        std::vector<int> team;
        for (int j = 0; j < Tp(g); ++j) team.push_back(leader + j);
        add(first, std::move(team));
      }
      if (!idle.empty()) add(firsts.back().second, std::move(idle));
    }
  }
  std::stable_sort(prepares.begin(), prepares.end(), [](const Prepare& a, const Prepare& b) {
    return std::tie(a.at, a.after_finishes) < std::tie(b.at, b.after_finishes);
  });
  std::stable_sort(finishes.begin(), finishes.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  auto prepare = prepares.begin();
  auto finish = finishes.begin();
  auto emit_prepares = [&](size_t i, bool after_finishes) {
    for (; prepare != prepares.end() && prepare->at == i && prepare->after_finishes == after_finishes;
         ++prepare)
      EmitVisitPrepare(prepare->g, prepare->v, prepare->backward, prepare->continuation, prepare->ranks);
  };
  for (size_t i = 0; i < order.size(); ++i) {
    emitted_share_ = static_cast<double>(i) / static_cast<double>(order.size());
    EmitTask(order[i]);
    emit_prepares(i, false);
    for (; finish != finishes.end() && finish->first == i; ++finish) {
      const auto [g, key] = finish->second;
      if (key >= num_ministages_) {
        EmitFinishBackward(g, key % num_ministages_);
      } else {
        EmitFinishForward(g, key);
      }
    }
    emit_prepares(i, true);
  }
  emitted_share_ = 0;
}

}  // namespace motley::lowering
