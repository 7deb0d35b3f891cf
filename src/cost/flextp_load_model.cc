// FlexTpBalancer's load model: what a rank's compute comes to under a balance — its own units and
// heads, those it computes for others (at the borrowed cost it has learned), the key and value of
// each group its heads touch (or, lending by point to point, that its lent heads touch), ZERO-resizing's
// overhead and the migration's transfers — and the team's time, block by block (flextp_balancer.h says why).
// The decisions are flextp_balancer.cc's.
#include <algorithm>
#include <vector>

#include "cost/flextp_balancer.h"

namespace motley {
namespace {

double MigrationSeconds(const TeamBalance& b, const FlexTpCosts& c, int r) {
  if (c.broadcast_reduce) {
    int64_t units = 0, heads = 0, blocks = 0;
    for (size_t s = 0; s < b.given.size(); ++s) {
      units += b.given[s], heads += b.given_heads[s];
      blocks += b.given[s] + b.given_heads[s] > 0 ? 1 : 0;
    }
    return c.migrate_s_fixed * static_cast<double>(blocks) +
           c.migrate_s_per_unit * static_cast<double>(units) +
           c.migrate_s_per_head * static_cast<double>(heads);
  }
  // Point to point: a fixed cost for its own block and for each straggler it borrows from.
  int64_t blocks = b.given[r] + b.given_heads[r] > 0 ? 1 : 0;
  std::vector<bool> from(b.given.size(), false);
  for (const UnitMove& m : b.moves)
    if (m.to == r && m.count > 0 && !from[m.from]) from[m.from] = true, ++blocks;
  return c.migrate_s_fixed * static_cast<double>(blocks) +
         c.migrate_s_per_unit * static_cast<double>(b.given[r] + b.received(r, false)) +
         c.migrate_s_per_head * static_cast<double>(b.given_heads[r] + b.received(r, true));
}

// The key/value groups a run of `count` heads from head `begin` touches, `per` heads to a group.
int64_t GroupsTouched(int64_t begin, int64_t count, int64_t per) {
  return count <= 0 ? 0 : (begin + count - 1) / per - begin / per + 1;
}

}  // namespace

double FlexTpBalancer::OwnAttention(const TeamBalance& b, int r) const {
  const int64_t per = std::max<int64_t>(1, costs_.heads_per_group);
  const double heads = static_cast<double>(std::max<int64_t>(costs_.heads, 1));
  const double groups = static_cast<double>(std::max<int64_t>(costs_.heads / per, 1));
  const int64_t kept = costs_.heads - b.given_heads[r];  // its first heads: the groups they reach
  // Lending by point to point, it computes the key and value of the groups its lent heads touch too
  // (and, lending projections, their heads' scores).
  const int64_t lent = costs_.kv_from_owner ? GroupsTouched(kept, b.given_heads[r], per) : 0;
  const double kv = costs_.kv_fraction * static_cast<double>(GroupsTouched(0, kept, per) + lent) / groups;
  if (b.lend_projections)
    return (1 - costs_.kv_fraction - costs_.scores_fraction) * static_cast<double>(kept) / heads +
           costs_.scores_fraction + kv;
  return (1 - costs_.kv_fraction) * static_cast<double>(kept) / heads + kv;
}

double FlexTpBalancer::BorrowedAttention(const TeamBalance& b, int r) const {
  const int64_t per = std::max<int64_t>(1, costs_.heads_per_group);
  const double heads = static_cast<double>(std::max<int64_t>(costs_.heads, 1));
  const double groups = static_cast<double>(std::max<int64_t>(costs_.heads / per, 1));
  // A borrowed head's part: its q and o projections, and its scores unless its owner keeps them.
  const double head = 1 - costs_.kv_fraction - (b.lend_projections ? costs_.scores_fraction : 0);
  double work = 0;
  for (const UnitMove& m : b.moves)
    if (m.attention && m.to == r)
      work += head * static_cast<double>(m.count) / heads +
              (costs_.kv_from_owner
                   ? 0
                   : costs_.kv_fraction * static_cast<double>(GroupsTouched(m.begin, m.count, per)) / groups);
  return work;
}

double FlexTpBalancer::OwnWork(const TeamBalance& b, int r) const {
  const double u = static_cast<double>(costs_.units);
  const double mlp = (u - static_cast<double>(b.given[r])) * (1 - b.prune_ratio[r]) / u;
  const double attention = OwnAttention(b, r) * (1 - b.prune_ratio[r] * costs_.attention_prunable);
  return (costs_.mlp_fraction * mlp + costs_.attention_fraction * attention) /
         (costs_.mlp_fraction + costs_.attention_fraction);
}

double FlexTpBalancer::BorrowedWork(const TeamBalance& b, int r) const {
  const double u = static_cast<double>(costs_.units);
  return (costs_.mlp_fraction * static_cast<double>(b.received(r, false)) / u +
          costs_.attention_fraction * BorrowedAttention(b, r)) /
         (costs_.mlp_fraction + costs_.attention_fraction);
}

// A rank's work under a balance relative to its own nominal share (1 = its own units and heads).
double FlexTpBalancer::Load(const TeamBalance& b, int r) const {
  return fixed_ + (1 - fixed_) * (OwnWork(b, r) + borrowed_ * BorrowedWork(b, r));
}

// ZERO-resizing's own cost for rank r (FlexTpCosts::resize_*), per second of its nominal time.
double FlexTpBalancer::ResizeOverhead(const TeamBalance& b, int r) const {
  const double p = b.prune_ratio[r];
  if (p <= 0) return 0;
  const double u = static_cast<double>(costs_.units);
  const double mlp_share = costs_.mlp_fraction / (costs_.mlp_fraction + costs_.attention_fraction);
  return (1 - fixed_) * mlp_share * (u - static_cast<double>(b.given[r])) / u *
         (costs_.resize_fixed + costs_.resize_per_ratio * p);
}

double FlexTpBalancer::RankTime(const TeamBalance& b, const std::vector<double>& nominal, int r) const {
  return nominal[r] * (Load(b, r) + ResizeOverhead(b, r)) + MigrationSeconds(b, costs_, r);
}

double FlexTpBalancer::TeamTime(const TeamBalance& b, const std::vector<double>& nominal,
                                const std::vector<bool>& skip) const {
  const double u = static_cast<double>(costs_.units);
  const double all = costs_.mlp_fraction + costs_.attention_fraction;
  const double mlp_share = costs_.mlp_fraction / all, attention_share = costs_.attention_fraction / all;
  double attention = 0, mlp = 0, transfers = 0;
  for (int r = 0; r < team_size_; ++r) {
    if (!skip.empty() && skip[r]) continue;
    // Each block's share of the work no unit takes along (its norm, its residual) goes with it.
    const double own_mlp = (u - static_cast<double>(b.given[r])) * (1 - b.prune_ratio[r]) / u;
    const double own_attention = OwnAttention(b, r) * (1 - b.prune_ratio[r] * costs_.attention_prunable);
    mlp = std::max(
        mlp, nominal[r] *
                 (mlp_share *
                      (fixed_ +
                       (1 - fixed_) * (own_mlp + borrowed_ * static_cast<double>(b.received(r, false)) / u)) +
                  ResizeOverhead(b, r)));
    attention = std::max(attention,
                         nominal[r] * attention_share *
                             (fixed_ + (1 - fixed_) * (own_attention + borrowed_ * BorrowedAttention(b, r))));
    transfers = std::max(transfers, MigrationSeconds(b, costs_, r));
  }
  return attention + mlp + transfers;
}

}  // namespace motley
