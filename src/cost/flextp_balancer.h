// FlexTpBalancer: how a tensor-parallel team shares its layers' work this step (FlexTP, issue #9
// §3-§6). Each rank of a team owns `units` MLP units (its ffn/t rows of gate and up, columns of
// down) and `heads` attention units — query heads: a head's rows of q and columns of o, with the
// rows of k and v of its key/value group (FlexTP moves whole heads; a rank holding a single
// key/value group, as Llama 3 8B's do at width 8, can still move part of its attention). When a rank
// straggles — slower than the team's normal ranks by more than a threshold (§III-A) — the team can
//   - migrate (§IV-A): the straggler's last units and heads are computed by the normal ranks,
//     each taking a contiguous run of them (virtual renumbering); exact. A run of heads needs the
//     key and value of each group it touches: by broadcast-reduce its receiver computes them (and
//     the owner still does for a group it keeps some heads of), so the model costs a run by the
//     heads it holds and the groups it touches; point to point (FlexTpCosts::kv_from_owner) the
//     owner computes them once for the groups it lends and sends them, so a run costs its receiver
//     its heads alone and its owner the groups it lends;
//   - resize (§III): the straggler prunes a ratio of the units it computes (dual pruning, zeros
//     imputed for their gradients) and, with `attention_prunable`, the same ratio of its attention
//     projections' hidden features; the ratio closes the gap to the normal ranks (Eq. 1); lossy;
//   - semi (§IV-B/C): both, by FlexTP's cost model (`semi_solver = "cost-model"`, SemiSplit below):
//     a single straggler splits its gap by Eq. 2 — the units it migrates are those that balance
//     its own resizing cost (ZERO-resizing's allocation and extraction, FlexTpCosts::resize_*)
//     against the receivers' migration cost (transfers and borrowed compute), the rest it prunes;
//     several stragglers, heaviest first, migrate while Eq. 3 finds it cost-effective (the time a
//     straggler saves exceeds the most any receiver pays for the cumulative migrated work) and the
//     rest resize to the pace the migration leaves. The costs come from FlexTP's pre-test
//     (FlexTpTeam runs it before the first step) and what the steps measure since. Our guard: when
//     the same model finds migration alone (exact) faster than Eq. 2's split, SEMI migrates.
//     `semi_solver = "search"`: every split on a grid, the one that prunes least among those within
//     `straggler_threshold` of the fastest (motley's earlier reading, kept to compare).
//
// How the units travel is the team's `migration` (flextp_team.h): broadcast-reduce, FlexTP's
// choice, or point to point; the cost model charges each rank its part of either.
//
// A split is judged by the team's time block by block (TeamTime), not by its slowest rank's step:
// every attention and MLP block ends in the team's all-reduce, so a straggler that keeps its
// attention heads while giving its MLP units away is the slowest rank in every attention block and
// the receivers in every MLP block — balanced over the step, yet the team waits in both. (On the
// FlexTP bench's team, splits chosen by the slowest rank's step ran 1.8x the no-straggler step
// where the per-rank model had them at 1.2x: bench/reports/flextp_stragglers.md, session 29.)
//
// Torch-free and deterministic: every rank of the team feeds it the same all-gathered times and
// gets the same balance. It works on each rank's *nominal* time — the measured time divided by
// the load it carried (so a straggler that pruned is still known to be slow), its median over the
// last `decision_window_steps` steps (each step's nominal time recomputed under the load model as
// it stands) — and re-balances only when some rank's nominal time moved by more than
// `recheck_change` since the last decision. The window is ours, not the paper's (FlexTP decides
// each iteration on its last one): on a shared host one step of one rank runs 30-100% long now and
// then (bench/reports/flextp_stragglers.md), and a decision on that step moves or prunes work for a
// slowdown that is gone by the next.
//
// The load model learns from what happened: a rank's time is nominal x (fixed + (1 - fixed) x
// (own movable work + borrowed x the units it computes for others)). `fixed` (norms, residuals,
// embedding, head, optimizer: work no unit takes along) starts at 1 - mlp_fraction -
// attention_fraction and `borrowed` (a unit computed for another rank, against one's own) at
// FlexTpCosts::borrowed_cost (1 unless measured);
// whenever a balance changes a rank's load, the two steps' times re-estimate them — `fixed` from
// ranks that gave work away, `borrowed` from ranks that took it — and a change re-decides.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/job.h"
#include "core/model.h"
#include "cost/flextp_costs.h"

namespace motley {

enum class FlexTpMode { kOff, kMigrate, kResize, kSemi };
FlexTpMode FlexTpModeFromName(const std::string& name);  // REQUIRES: a name the job parser accepts

/// Units (or attention heads) [begin, begin + count) of rank `from`'s slice computed by rank `to`
/// this step.
struct UnitMove {
  int from = 0, to = 0;
  int64_t begin = 0, count = 0;
  bool attention = false;  // query heads, else MLP units
};

struct TeamBalance {
  std::vector<double> prune_ratio;  // per rank: the fraction of the units it computes of its own that it
                                    // prunes (and of its attention projections' features)
  std::vector<int64_t>
      given;  // per rank: its own MLP units computed elsewhere (the last `given` of its slice)
  std::vector<int64_t> given_heads;  // per rank: its own query heads computed elsewhere (the last ones)
  std::vector<UnitMove> moves;
  std::vector<double> predicted_s;  // per rank: the cost model's compute time under this balance
  // The team's: every attention and MLP block ends in the team's all-reduce, so each lasts as long
  // as its slowest rank (FlexTpBalancer::TeamTime); at least the slowest rank's predicted_s.
  double team_s = 0;
  // Point to point, a lent query head's receiver computes only its q and o projections; the owner
  // keeps its scores (TensorParallelConfig::lend_attention). Else the receiver computes it whole.
  bool lend_projections = false;

  bool any() const;
  int64_t received(int rank, bool attention = false) const;
  int64_t migrated_units() const;  // MLP units and query heads
  /// The team's pruned units over all its units.
  double pruned_fraction(int64_t units_per_rank) const;
};

/// One rank's part of a balance, as a run's metrics report it per rank and step.
struct FlexTpRankLoad {
  double predicted_s =
      0;  // the cost model's compute time for the rank under the balance (0: not decided yet)
  double prune_ratio = 0;
  int64_t units_given = 0, heads_given = 0;        // its own MLP units and query heads computed elsewhere
  int64_t units_received = 0, heads_received = 0;  // others' it computes
  bool lend_projections = false;  // the heads it lends or borrows move as their q and o projections
};
FlexTpRankLoad RankLoad(const TeamBalance& b, int rank);

class FlexTpBalancer {
 public:
  FlexTpBalancer(const TensorParallelConfig& config, int team_size, FlexTpCosts costs);

  /// The last step's measured compute times (team order), under the balance that step ran with;
  /// returns the balance for the next step.
  const TeamBalance& Update(const std::vector<double>& compute_s);

  const TeamBalance& balance() const { return balance_; }
  /// Measured migration costs (seconds per moved unit or head and step; 0: keep the estimate).
  void ObserveMigrationCosts(double s_per_unit, double s_per_head);
  const FlexTpCosts& costs() const { return costs_; }
  /// FlexTP's pre-test: its measured costs replace the estimates (and re-decide at the next Update).
  void UsePretest(const SemiPretest& pretest);
  /// Each rank's compute time at its nominal load, from the last measurement.
  const std::vector<double>& nominal_s() const { return nominal_s_; }
  /// Whether the last Update decided anew (else the previous balance stands).
  bool rebalanced() const { return rebalanced_; }
  /// The team's compute time under `b` at `nominal` times, block by block: each rank's attention
  /// and MLP blocks as its predicted time splits them (its own work there, what it computes for
  /// others, the block's share of the work no unit takes along; resizing's overhead in the MLP),
  /// the slowest rank's of each, plus the slowest rank's migration transfers. Ranks with skip[r]
  /// are left out (skip empty: none). What migrate and resize choose by.
  double TeamTime(const TeamBalance& b, const std::vector<double>& nominal,
                  const std::vector<bool>& skip) const;
  /// The learned load model: the share of a rank's work no unit takes along, and the cost of a
  /// borrowed unit against an own one.
  double fixed_fraction() const { return fixed_; }
  double borrowed_cost() const { return borrowed_; }

 private:
  TeamBalance Decide(const std::vector<double>& nominal) const;
  // SEMI by FlexTP's cost model (Eq. 2 and 3) for `stragglers` (heaviest first) catching up with
  // `reference`, the `normal` ranks receiving.
  void SemiSplit(TeamBalance& b, const std::vector<double>& nominal, const std::vector<int>& stragglers,
                 const std::vector<int>& normal, double reference) const;
  // Every split on a grid for each straggler in turn (heaviest first): the heads and units it
  // moves (`may_move`), the ratio that then catches it up with `reference` (`may_prune`); the one
  // the team's time block by block (TeamTime) finds fastest — with both, the least pruning among
  // those within straggler_threshold of the fastest.
  void Search(TeamBalance& b, const std::vector<double>& nominal,
              const std::vector<std::pair<int, double>>& stragglers, const std::vector<int>& normal,
              double reference, bool may_move, bool may_prune) const;
  // Moves `count` of straggler s's units (or heads) to the normal ranks: a chunk at a time to the
  // receiver that would finish first, then one contiguous run per receiver from the end of s's slice.
  void Move(TeamBalance& b, int s, int64_t count, bool attention, const std::vector<int>& normal,
            const std::vector<double>& nominal) const;
  // SEMI's workload unit: `units` of straggler s's MLP units and its query heads — the same
  // share of them, or the number that leaves the team's time block by block (TeamTime) least.
  void MoveWork(TeamBalance& b, int s, int64_t units, const std::vector<int>& normal,
                const std::vector<double>& nominal) const;
  // Eq. 1: the pruning ratio that brings straggler s down to `target` under b (capped), set in b.
  void PruneToCatchUp(TeamBalance& b, int s, double target, const std::vector<double>& nominal) const;
  // ZERO-resizing's own cost for rank r under b, per second of its nominal time.
  double ResizeOverhead(const TeamBalance& b, int r) const;
  double RankTime(const TeamBalance& b, const std::vector<double>& nominal, int r) const;

  double Load(const TeamBalance& b, int r) const;
  // The work rank r computes of its own units and of others', each relative to its own share.
  double OwnWork(const TeamBalance& b, int r) const;
  double BorrowedWork(const TeamBalance& b, int r) const;
  // The same for its attention alone, relative to its own attention (unpruned): the heads' part
  // by heads, the key/value part by the groups those heads touch; lending projections, the owner
  // keeps its lent heads' scores and the receiver computes their q and o projections alone.
  double OwnAttention(const TeamBalance& b, int r) const;
  double BorrowedAttention(const TeamBalance& b, int r) const;
  // Re-estimates fixed_ and borrowed_ from two steps that ran under different balances; true
  // when either moved enough to re-decide.
  bool Learn(const std::vector<double>& compute_s);

  TensorParallelConfig config_;
  FlexTpMode mode_;
  int team_size_;
  FlexTpCosts costs_;
  TeamBalance balance_;
  std::vector<double> nominal_s_, decided_at_s_;
  bool rebalanced_ = false;
  double fixed_ = 0, borrowed_ = 1;
  bool fixed_learned_ = false, borrowed_learned_ = false;
  TeamBalance last_ran_;  // the balance of the step before the last, and its times
  std::vector<double> last_compute_s_;
  struct Measured {
    std::vector<double> compute_s;
    TeamBalance ran;  // the balance the step ran under
  };
  std::vector<Measured> window_;  // the last decision_window_steps steps, oldest first
};

/// Per-layer pruning ratios (FlexTP's differentiated ratios, §III-B), from each layer's units'
/// weight variations. The paper: a unit is a pruning candidate when its variation is below a
/// threshold (an epoch's iterations times a "micro-threshold"), a layer's candidate share suggests its
/// ratio, and a decay factor (0.8) blends that with the uniform ratio of Eq. (1) so that the team
/// still keeps pace. The extracted text lost the formulas' symbols and the micro-threshold's value;
/// our reading: the threshold is the median variation of all the rank's units (scale-free: weights
/// move by about the learning rate a step, whatever it is), layer l's share of candidates c_l, and
///   ratio_l = ratio x ((1 - decay) + decay x c_l / mean(c)),
/// so the mean ratio is `ratio` (Eq. 1 still holds), layers that moved least prune most; each is
/// capped at `max_ratio`, the excess handed to the others (evenly when the rule gives them none).
/// No candidates anywhere (equal variations, or none measured yet): `ratio` everywhere.
std::vector<double> LayerPruneRatios(const std::vector<std::vector<double>>& unit_variation, double ratio,
                                     double decay, double max_ratio);

}  // namespace motley
