#include "plan/outer_round.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace motley {
namespace {

// Kept per flop of an outer step: the pseudo-gradient, the momentum and the Nesterov update.
constexpr double kOuterFlopsPerValue = 6;
// Values read and written per value updated: the piece, its anchor, momentum and average read; the
// piece, anchor and momentum written.
constexpr double kOuterValuesMoved = 7;

// What each rank of a step schedule updates: the parameters of each ministage's optimizer steps.
std::vector<std::map<int, double>> UpdatedParams(const Schedule& s) {
  std::vector<std::map<int, double>> out(s.programs.size());
  for (const Program& p : s.programs)
    for (const Op& op : p.ops)
      if (op.kind == OpKind::kOptimizerStep) out[static_cast<size_t>(p.rank)][op.ministage] += op.params;
  return out;
}

Status CheckSameShape(const std::vector<const Schedule*>& islands,
                      const std::vector<std::vector<std::map<int, double>>>& updated) {
  std::map<int, size_t> owner;  // device -> island
  for (size_t i = 0; i < islands.size(); ++i)
    for (const Program& p : islands[i]->programs)
      if (auto [it, added] = owner.try_emplace(p.device, i); !added && it->second != i)
        return Status::InvalidArgument(
            fmt::format("islands {} and {} both use device {}: give each island devices of its own",
                        it->second, i, p.device));
  const Schedule& first = *islands[0];
  for (size_t i = 1; i < islands.size(); ++i) {
    const Schedule& s = *islands[i];
    bool same = s.programs.size() == first.programs.size() &&
                s.ministages.size() == first.ministages.size() &&
                s.sharded_optimizer == first.sharded_optimizer && s.sharded_params == first.sharded_params;
    for (size_t r = 0; same && r < s.programs.size(); ++r) {
      same =
          s.programs[r].dp_size == first.programs[r].dp_size && updated[i][r].size() == updated[0][r].size();
      for (auto a = updated[i][r].begin(), b = updated[0][r].begin(); same && a != updated[i][r].end();
           ++a, ++b)
        same = a->first == b->first;
    }
    if (!same)
      return Status::InvalidArgument(fmt::format(
          "island {}'s plan holds the model differently from island 0's ({} ranks against {}); islands "
          "exchange rank to rank: give every island a plan of the same shape (the same groups, stages "
          "and ZeRO stage; batch sizes and devices may differ)",
          i, s.programs.size(), first.programs.size()));
  }
  return Status::Ok();
}

// The island's replicas of rank r's ministage v that hold the same values (one a tensor-parallel team).
std::vector<int32_t> ReplicaRanks(const Schedule& s, int v, int r, int32_t offset) {
  const ScheduleMinistage& m = s.ministages[static_cast<size_t>(v)];
  const int tp = std::max(1, m.tp_degree);
  const int tp_index = (r - m.first_rank) % tp;
  std::vector<int32_t> out;
  for (int k = 0; k < m.num_ranks / tp; ++k) out.push_back(offset + m.first_rank + k * tp + tp_index);
  return out;
}

class RoundLowering {
 public:
  RoundLowering(const std::vector<const Schedule*>& islands, const OuterRoundOptions& options,
                std::vector<std::vector<std::map<int, double>>> updated)
      : islands_(islands), options_(options), updated_(std::move(updated)) {}

  Schedule Lower() {
    const Schedule& first = *islands_[0];
    const int ranks_each = static_cast<int>(first.programs.size());
    out_.seq_len = first.seq_len;
    out_.ministages = first.ministages;
    out_.sharded_optimizer = first.sharded_optimizer;
    out_.sharded_params = first.sharded_params;
    for (size_t i = 0; i < islands_.size(); ++i)
      for (const Program& p : islands_[i]->programs) {
        Program q;
        q.rank = RoundRank(static_cast<int>(i), p.rank, ranks_each);
        q.device = p.device;
        q.group = p.group;
        q.tp_index = p.tp_index;
        q.dp_index = p.dp_index;
        q.dp_size = p.dp_size;
        out_.programs.push_back(std::move(q));
      }
    for (size_t i = 0; i < islands_.size(); ++i)
      for (int r = 0; r < ranks_each; ++r)
        for (const auto& [v, params] : updated_[i][static_cast<size_t>(r)]) AddPiece(i, r, v);
    return std::move(out_);
  }

 private:
  int ranks_each() const { return static_cast<int>(islands_[0]->programs.size()); }

  // The piece of ministage v that island rank r updates: its shard, or its even part of a ZeRO-0 replica.
  double PieceValues(size_t island, int r, int v) const {
    const double params = updated_[island][static_cast<size_t>(r)].at(v);
    const Schedule& s = *islands_[island];
    return s.sharded_optimizer ? params : params / s.programs[static_cast<size_t>(r)].dp_size;
  }

  int NewCollective(OpKind kind, std::vector<int32_t> ranks, double bytes) {
    Collective c;
    c.kind = kind;
    c.ranks = std::move(ranks);
    c.bytes = bytes;
    out_.collectives.push_back(std::move(c));
    return static_cast<int>(out_.collectives.size()) - 1;
  }

  // The exchange of island rank r's piece of ministage v with the other islands'.
  int ReduceOf(int r, int v) {
    auto [it, added] = reduces_.try_emplace({r, v}, -1);
    if (!added) return it->second;
    const int n = static_cast<int>(islands_.size());
    const double wire = OuterWireBytesPerValue(options_.compression, options_.master_bytes);
    const bool gathers = options_.compression != "none";
    std::vector<int32_t> across;
    double widest = 0;
    for (int i = 0; i < n; ++i) {
      across.push_back(RoundRank(i, r, ranks_each()));
      widest = std::max(widest, PieceValues(static_cast<size_t>(i), r, v));
    }
    // An all-reduce's payload is a piece (the largest: the members' must be alike); an all-gather's
    // every member's compressed piece.
    it->second = NewCollective(OpKind::kOuterReduce, across,
                               gathers ? n * widest * wire : widest * options_.master_bytes);
    out_.collectives[static_cast<size_t>(it->second)].gathers = gathers;
    return it->second;
  }

  // The island's replicas of ministage v that hold island rank r's values, when they keep the full
  // parameters between steps and are more than one: their gather of the new pieces; else -1.
  int GatherOf(size_t island, int r, int v) {
    const Schedule& s = *islands_[island];
    if (s.sharded_params) return -1;
    const std::vector<int32_t> replicas = ReplicaRanks(s, v, r, 0);
    if (replicas.size() < 2) return -1;
    auto [it, added] = gathers_.try_emplace({static_cast<int>(island), v, replicas.front()}, -1);
    if (!added) return it->second;
    std::vector<int32_t> group;
    double full = 0, largest = 0;
    for (int32_t m : replicas) {
      group.push_back(RoundRank(static_cast<int>(island), m, ranks_each()));
      full += PieceValues(island, m, v);
      largest = std::max(largest, PieceValues(island, m, v));
    }
    it->second = NewCollective(OpKind::kAllGather, group, full * options_.master_bytes);
    if (full > 0)
      out_.collectives[static_cast<size_t>(it->second)].uneven_factor = largest * group.size() / full;
    return it->second;
  }

  Op& Append(int32_t rank, OpKind kind, Stream stream, int v) {
    std::vector<Op>& ops = out_.programs[static_cast<size_t>(rank)].ops;
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.ministage = static_cast<int16_t>(v);
    if (!ops.empty()) op.deps.push_back(static_cast<int32_t>(ops.size()) - 1);
    ops.push_back(std::move(op));
    return ops.back();
  }

  void AddPiece(size_t island, int r, int v) {
    const double mb = options_.master_bytes;
    const double piece = PieceValues(island, r, v);
    const int32_t rank = RoundRank(static_cast<int>(island), r, ranks_each());
    out_.programs[static_cast<size_t>(rank)].static_device_bytes += 2 * piece * mb;  // anchor, momentum
    const int reduce = ReduceOf(r, v);
    const Collective& c = out_.collectives[static_cast<size_t>(reduce)];
    const double received = c.gathers ? c.bytes : 0;
    Op& red = Append(rank, OpKind::kOuterReduce, Stream::kComm, v);
    red.collective = reduce;
    red.params = piece;
    red.bytes = c.bytes;
    red.device_alloc_bytes = piece * mb + received;  // the pseudo-gradient, and what arrives
    red.device_free_bytes = received;
    Op& step = Append(rank, OpKind::kOuterStep, Stream::kCompute, v);
    step.params = piece;
    step.flops = kOuterFlopsPerValue * piece;
    step.bytes = kOuterValuesMoved * piece * mb;
    step.device_free_bytes = piece * mb;
    if (const int gather = GatherOf(island, r, v); gather >= 0) {
      Op& g = Append(rank, OpKind::kAllGather, Stream::kComm, v);
      g.collective = gather;
      g.bytes = out_.collectives[static_cast<size_t>(gather)].bytes;
    }
  }

  const std::vector<const Schedule*>& islands_;
  const OuterRoundOptions& options_;
  std::vector<std::vector<std::map<int, double>>> updated_;
  std::map<std::pair<int, int>, int> reduces_;        // (island rank, ministage) -> collective
  std::map<std::tuple<int, int, int>, int> gathers_;  // (island, ministage, first replica) -> collective
  Schedule out_;
};

}  // namespace

double OuterWireBytesPerValue(const std::string& compression, double master_bytes) {
  if (compression == "fp16") return 2;
  if (compression == "int8") return 1;
  return master_bytes;
}

Result<Schedule> LowerOuterRound(const std::vector<const Schedule*>& islands,
                                 const OuterRoundOptions& options) {
  if (islands.empty()) return Status::InvalidArgument("an outer round needs at least one island");
  std::vector<std::vector<std::map<int, double>>> updated;
  for (const Schedule* s : islands) updated.push_back(UpdatedParams(*s));
  MOTLEY_RETURN_IF_ERROR(CheckSameShape(islands, updated));
  Schedule round = RoundLowering(islands, options, std::move(updated)).Lower();
  if (std::string problem = CheckSchedule(round); !problem.empty())
    return Status::Internal("the outer round's schedule is unsound: " + problem);
  return round;
}

}  // namespace motley
