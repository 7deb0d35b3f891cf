#include "plan/outer_round.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/model.h"

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

// Every island's devices its own.
Status CheckDevicesApart(const std::vector<const Schedule*>& islands) {
  std::map<int, size_t> owner;  // device -> island
  for (size_t i = 0; i < islands.size(); ++i)
    for (const Program& p : islands[i]->programs)
      if (auto [it, added] = owner.try_emplace(p.device, i); !added && it->second != i)
        return Status::InvalidArgument(
            fmt::format("islands {} and {} both use device {}: give each island devices of its own",
                        it->second, i, p.device));
  return Status::Ok();
}

// Whether every island holds the model as island 0 does, rank to rank: the same ranks, ministages,
// ZeRO stage, replicas and ministages updated (batch sizes and devices may differ).
bool SameShape(const std::vector<const Schedule*>& islands,
               const std::vector<std::vector<std::map<int, double>>>& updated) {
  const Schedule& first = *islands[0];
  for (size_t i = 1; i < islands.size(); ++i) {
    const Schedule& s = *islands[i];
    bool same = s.programs.size() == first.programs.size() &&
                s.ministages.size() == first.ministages.size() &&
                s.sharded_optimizer == first.sharded_optimizer && s.sharded_params == first.sharded_params;
    for (size_t v = 0; same && v < s.ministages.size(); ++v)
      same = s.ministages[v].layer_begin == first.ministages[v].layer_begin &&
             s.ministages[v].layer_end == first.ministages[v].layer_end &&
             s.ministages[v].tp_degree == first.ministages[v].tp_degree &&
             s.ministages[v].state_shares == first.ministages[v].state_shares;
    for (size_t r = 0; same && r < s.programs.size(); ++r) {
      same =
          s.programs[r].dp_size == first.programs[r].dp_size && updated[i][r].size() == updated[0][r].size();
      for (auto a = updated[i][r].begin(), b = updated[0][r].begin(); same && a != updated[i][r].end();
           ++a, ++b)
        same = a->first == b->first;
    }
    if (!same) return false;
  }
  return true;
}

// A new collective of the round, its index.
int AddCollective(Schedule& round, OpKind kind, std::vector<int32_t> ranks, double bytes) {
  Collective c;
  c.kind = kind;
  c.ranks = std::move(ranks);
  c.bytes = bytes;
  round.collectives.push_back(std::move(c));
  return static_cast<int>(round.collectives.size()) - 1;
}

// The share of ministage `m`'s values in streaming fragment `options.fragment` (its parts' values over
// all of them; 1 without fragments).
double FragmentShare(const ScheduleMinistage& m, const OuterRoundOptions& options) {
  if (options.fragments <= 1) return 1;
  double in = 0, all = 0;
  const auto add = [&](int64_t part, double values) {
    all += values;
    if (part % options.fragments == options.fragment) in += values;
  };
  const double norm = static_cast<double>(options.head_values) -
                      (options.tied_embeddings ? 0 : static_cast<double>(options.embedding_values));
  if (m.embedding) add(0, static_cast<double>(options.embedding_values));
  for (int32_t l = m.layer_begin; l < m.layer_end; ++l) add(l + 1, static_cast<double>(options.layer_values));
  if (m.head) {
    add(options.num_layers + 1, norm);
    if (!options.tied_embeddings) add(options.num_layers + 1, static_cast<double>(options.embedding_values));
    if (options.tied_embeddings && !m.embedding) add(0, static_cast<double>(options.embedding_values));
  }
  return all > 0 ? in / all : 0;
}

// Island rank `p`'s program in the round, as rank `rank`, without ops yet.
Program RoundProgram(const Program& p, int32_t rank) {
  Program q;
  q.rank = rank;
  q.device = p.device;
  q.group = p.group;
  q.tp_index = p.tp_index;
  q.dp_index = p.dp_index;
  q.dp_size = p.dp_size;
  return q;
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
        out_.programs.push_back(RoundProgram(p, RoundRank(static_cast<int>(i), p.rank, ranks_each)));
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
    return AddCollective(out_, kind, std::move(ranks), bytes);
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
      widest = std::max(
          widest,
          FragmentShare(islands_[static_cast<size_t>(i)]->ministages[static_cast<size_t>(v)], options_) *
              PieceValues(static_cast<size_t>(i), r, v));
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
    const double share = FragmentShare(islands_[island]->ministages[static_cast<size_t>(v)], options_);
    if (share <= 0) return;  // none of the fragment
    const double piece = share * PieceValues(island, r, v);
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

// A fragment of the model exchanged whole between islands of unlike shapes.
struct Fragment {
  bool embedding = false, head = false;
  int32_t layer = -1;  // a decoder layer's, else -1
  double values = 0;
};

// The round of islands of unlike shapes (outer_round.h): fragment by fragment through a lead an island.
class FragmentLowering {
 public:
  FragmentLowering(const std::vector<const Schedule*>& islands, const OuterRoundOptions& options,
                   std::vector<std::vector<std::map<int, double>>> updated, OuterRoundLayout& where)
      : islands_(islands), options_(options), updated_(std::move(updated)), where_(where) {}

  Result<Schedule> Lower() {
    for (size_t i = 0; i < islands_.size(); ++i) {
      where_.first_ministage.push_back(static_cast<int32_t>(out_.ministages.size()));
      for (ScheduleMinistage m : islands_[i]->ministages) {
        m.first_rank += where_.first_rank[i];
        out_.ministages.push_back(std::move(m));
      }
      for (const Program& p : islands_[i]->programs) {
        out_.programs.push_back(RoundProgram(p, where_.first_rank[i] + p.rank));
      }
    }
    out_.seq_len = islands_[0]->seq_len;
    std::vector<Fragment> fragments;  // the streaming fragment's parts (every part without fragments)
    const auto streamed = [&](int64_t part) { return part % options_.fragments == options_.fragment; };
    if (streamed(0)) fragments.push_back({true, false, -1, static_cast<double>(options_.embedding_values)});
    for (int32_t l = 0; l < options_.num_layers; ++l)
      if (streamed(l + 1)) fragments.push_back({false, false, l, static_cast<double>(options_.layer_values)});
    if (streamed(options_.num_layers + 1))
      fragments.push_back({false, true, -1, static_cast<double>(options_.head_values)});
    // Each island's holders of each fragment (local rank -> its ministage), and each ministage's last.
    std::vector<std::vector<std::map<int, int>>> holders(fragments.size());
    std::map<std::pair<size_t, int>, size_t> last;  // (island, ministage) -> its last fragment
    for (size_t f = 0; f < fragments.size(); ++f)
      for (size_t i = 0; i < islands_.size(); ++i) {
        holders[f].push_back(Holders(*islands_[i], fragments[f]));
        if (holders[f].back().empty())
          return Status::InvalidArgument(
              fmt::format("island {}'s plan holds no {}: every island holds the whole model", i,
                          fragments[f].embedding ? std::string("embedding")
                          : fragments[f].head    ? std::string("head")
                                                 : fmt::format("layer {}", fragments[f].layer)));
        for (const auto& [r, v] : holders[f].back()) last[{i, v}] = f;
      }
    for (size_t f = 0; f < fragments.size(); ++f) AddFragment(fragments, holders, last, f);
    return std::move(out_);
  }

 private:
  // Island schedule `s`'s ranks that hold fragment `f` (each with the ministage it is in). A tied
  // model's head copy (several ministages) takes the embedding's average: its ranks hold the embedding.
  std::map<int, int> Holders(const Schedule& s, const Fragment& f) const {
    std::map<int, int> out;
    const auto add = [&](size_t v) {
      const ScheduleMinistage& m = s.ministages[v];
      for (int r = m.first_rank; r < m.first_rank + m.num_ranks; ++r) out.try_emplace(r, static_cast<int>(v));
    };
    for (size_t v = 0; v < s.ministages.size(); ++v) {
      const ScheduleMinistage& m = s.ministages[v];
      if (f.embedding ? m.embedding : f.head ? m.head : m.layer_begin <= f.layer && f.layer < m.layer_end)
        add(v);
    }
    if (f.embedding && options_.tied_embeddings && s.ministages.size() > 1)
      for (size_t v = 0; v < s.ministages.size(); ++v)
        if (s.ministages[v].head) add(v);
    return out;
  }

  int NewCollective(OpKind kind, std::vector<int32_t> ranks, double bytes) {
    return AddCollective(out_, kind, std::move(ranks), bytes);
  }

  Op& Append(int32_t rank, OpKind kind, Stream stream, int v, const Fragment& f) {
    std::vector<Op>& ops = out_.programs[static_cast<size_t>(rank)].ops;
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.ministage = static_cast<int16_t>(v);
    op.embedding = f.embedding;
    op.head = f.head;
    op.layer_begin = f.layer >= 0 ? f.layer : f.head ? options_.num_layers : 0;
    op.layer_end = f.layer >= 0 ? f.layer + 1 : op.layer_begin;
    if (!ops.empty()) op.deps.push_back(static_cast<int32_t>(ops.size()) - 1);
    ops.push_back(std::move(op));
    return ops.back();
  }

  // The island's holders sum what they hold of the fragment (in), or take the lead's average (out).
  void AddIslandSum(size_t i, const std::map<int, int>& held, const Fragment& f) {
    if (held.size() < 2) return;
    std::vector<int32_t> ranks;
    for (const auto& [r, v] : held) ranks.push_back(where_.first_rank[i] + r);
    const double bytes = f.values * options_.master_bytes;
    const int c = NewCollective(OpKind::kAllReduce, ranks, bytes);
    for (const auto& [r, v] : held) {
      Op& op = Append(where_.first_rank[i] + r, OpKind::kAllReduce, Stream::kComm,
                      where_.first_ministage[i] + v, f);
      op.collective = c;
      op.bytes = bytes;
    }
  }

  void AddFragment(const std::vector<Fragment>& fragments,
                   const std::vector<std::vector<std::map<int, int>>>& holders,
                   const std::map<std::pair<size_t, int>, size_t>& last, size_t f) {
    const Fragment& frag = fragments[f];
    const double mb = options_.master_bytes, whole = frag.values * mb;
    // Where the fragment's ops begin on each holder: it is held whole from the first to the last.
    std::map<int32_t, size_t> begin;
    for (size_t i = 0; i < islands_.size(); ++i)
      for (const auto& [r, v] : holders[f][i])
        begin[where_.first_rank[i] + r] =
            out_.programs[static_cast<size_t>(where_.first_rank[i] + r)].ops.size();
    for (size_t i = 0; i < islands_.size(); ++i) AddIslandSum(i, holders[f][i], frag);
    std::vector<int32_t> leads;
    std::vector<std::pair<int32_t, int>> lead_ministage;
    for (size_t i = 0; i < islands_.size(); ++i) {
      auto it = holders[f][i].begin();
      std::advance(it, static_cast<long>(f % holders[f][i].size()));  // the leads spread over the holders
      leads.push_back(where_.first_rank[i] + it->first);
      lead_ministage.push_back({leads.back(), where_.first_ministage[i] + it->second});
    }
    const bool gathers = options_.compression != "none";
    const double wire = OuterWireBytesPerValue(options_.compression, mb);
    const int n = static_cast<int>(islands_.size());
    const int reduce = NewCollective(OpKind::kOuterReduce, leads, gathers ? n * frag.values * wire : whole);
    out_.collectives[static_cast<size_t>(reduce)].gathers = gathers;
    for (const auto& [rank, v] : lead_ministage) {
      Op& op = Append(rank, OpKind::kOuterReduce, Stream::kComm, v, frag);
      op.collective = reduce;
      op.params = frag.values;
      op.bytes = out_.collectives[static_cast<size_t>(reduce)].bytes;
      const double received = gathers ? op.bytes : 0;
      op.device_alloc_bytes = received;
      op.device_free_bytes = received;
    }
    for (size_t i = 0; i < islands_.size(); ++i) AddIslandSum(i, holders[f][i], frag);
    for (size_t i = 0; i < islands_.size(); ++i)
      for (const auto& [r, v] : holders[f][i]) {
        std::vector<Op>& ops = out_.programs[static_cast<size_t>(where_.first_rank[i] + r)].ops;
        ops[begin.at(where_.first_rank[i] + r)].device_alloc_bytes += whole;
        ops.back().device_free_bytes += whole;
        if (last.at({i, v}) == f) AddStep(i, r, v, frag);
      }
  }

  // Rank r of island i's outer step on its piece of ministage v, and the replicas' gather.
  void AddStep(size_t i, int r, int v, const Fragment& frag) {
    const auto piece_it = updated_[i][static_cast<size_t>(r)].find(v);
    if (piece_it == updated_[i][static_cast<size_t>(r)].end()) return;
    const Schedule& s = *islands_[i];
    const double piece =
        FragmentShare(s.ministages[static_cast<size_t>(v)], options_) *
        (s.sharded_optimizer ? piece_it->second
                             : piece_it->second / s.programs[static_cast<size_t>(r)].dp_size);
    const double mb = options_.master_bytes;
    const int32_t rank = where_.first_rank[i] + r;
    const int round_v = where_.first_ministage[i] + v;
    out_.programs[static_cast<size_t>(rank)].static_device_bytes += 2 * piece * mb;  // anchor, momentum
    Op& step = Append(rank, OpKind::kOuterStep, Stream::kCompute, round_v, frag);
    step.params = piece;
    step.flops = kOuterFlopsPerValue * piece;
    step.bytes = kOuterValuesMoved * piece * mb;
    step.device_alloc_bytes = piece * mb;  // the piece's pseudo-gradient and average
    step.device_free_bytes = piece * mb;
    if (s.sharded_params) return;
    const std::vector<int32_t> replicas = ReplicaRanks(s, v, r, where_.first_rank[i]);
    if (replicas.size() < 2) return;
    auto [it, added] = gathers_.try_emplace({static_cast<int>(i), v, replicas.front()}, -1);
    if (added) {
      double full = 0;
      for (int32_t m : replicas) {
        const auto p = updated_[i][static_cast<size_t>(m - where_.first_rank[i])].find(v);
        if (p != updated_[i][static_cast<size_t>(m - where_.first_rank[i])].end())
          full += p->second / s.programs[static_cast<size_t>(m - where_.first_rank[i])].dp_size;
      }
      it->second = NewCollective(OpKind::kAllGather, replicas, full * mb);
    }
    Op& g = Append(rank, OpKind::kAllGather, Stream::kComm, round_v, frag);
    g.collective = it->second;
    g.bytes = out_.collectives[static_cast<size_t>(it->second)].bytes;
  }

  const std::vector<const Schedule*>& islands_;
  const OuterRoundOptions& options_;
  std::vector<std::vector<std::map<int, double>>> updated_;
  OuterRoundLayout& where_;
  std::map<std::tuple<int, int, int>, int> gathers_;  // (island, ministage, first replica) -> collective
  Schedule out_;
};

Result<Schedule> LowerFragmentRound(const std::vector<const Schedule*>& islands,
                                    const OuterRoundOptions& options,
                                    std::vector<std::vector<std::map<int, double>>> updated,
                                    OuterRoundLayout& where) {
  if (options.num_layers <= 0 || options.layer_values <= 0 || options.embedding_values <= 0)
    return Status::InvalidArgument(
        "the islands hold the model in unlike shapes, so they exchange it in whole fragments, but the "
        "round was not given the model's sizes (OuterRoundOptions: SetFragmentSizes)");
  for (const Schedule* s : islands)
    if (s->ministages.empty() || s->ministages.back().layer_end != options.num_layers)
      return Status::InvalidArgument(fmt::format(
          "an island's plan holds {} layers but the model has {}: every island holds the whole model",
          s->ministages.empty() ? 0 : s->ministages.back().layer_end, options.num_layers));
  return FragmentLowering(islands, options, std::move(updated), where).Lower();
}

}  // namespace

void SetFragmentSizes(const ModelSpec& model, OuterRoundOptions& options) {
  options.embedding_values = EmbeddingParams(model);
  options.layer_values = ParamsPerLayer(model);
  options.head_values = HeadParams(model);
  options.num_layers = static_cast<int32_t>(model.num_layers);
  options.tied_embeddings = model.tie_embeddings;
}

double OuterWireBytesPerValue(const std::string& compression, double master_bytes) {
  if (compression == "fp16") return 2;
  if (compression == "int8") return 1;
  if (compression == "int4")
    return 0.5 + 4.0 / 128;  // two values a byte, an fp32 scale a 128 (island_exchange.cc)
  return master_bytes;
}

namespace {

// A round that overlaps inner steps: each program's exchanges first, then its outer steps and gathers
// (each op still waiting for the one before it), and the values held through the overlap.
void OrderForOverlap(Schedule& round, const OuterRoundOptions& options) {
  round.outer_overlap_steps = options.overlap_steps;
  for (Program& p : round.programs) {
    std::stable_partition(p.ops.begin(), p.ops.end(), [](const Op& op) {
      return op.kind == OpKind::kOuterReduce || op.kind == OpKind::kAllReduce;
    });
    for (size_t k = 0; k < p.ops.size(); ++k) {
      p.ops[k].deps.clear();
      if (k > 0) p.ops[k].deps.push_back(static_cast<int32_t>(k) - 1);
      if (p.ops[k].kind == OpKind::kOuterStep)  // the pseudo-gradient as sent, the piece's value when sent
        p.static_device_bytes += 2 * p.ops[k].params * options.master_bytes;
    }
  }
}

}  // namespace

Result<Schedule> LowerOuterRound(const std::vector<const Schedule*>& islands,
                                 const OuterRoundOptions& options, OuterRoundLayout* layout) {
  if (islands.empty()) return Status::InvalidArgument("an outer round needs at least one island");
  if (options.fragments < 1 || options.fragment < 0 || options.fragment >= options.fragments)
    return Status::InvalidArgument(
        fmt::format("fragment {} of {}: not a streaming fragment", options.fragment, options.fragments));
  if (options.fragments > 1 && (options.num_layers <= 0 || options.layer_values <= 0))
    return Status::InvalidArgument(
        "a streaming fragment's round needs the model's sizes (OuterRoundOptions: SetFragmentSizes)");
  std::vector<std::vector<std::map<int, double>>> updated;
  for (const Schedule* s : islands) updated.push_back(UpdatedParams(*s));
  MOTLEY_RETURN_IF_ERROR(CheckDevicesApart(islands));
  OuterRoundLayout where;
  where.whole_fragments = !SameShape(islands, updated);
  int32_t ranks = 0;
  for (const Schedule* s : islands) {
    where.first_rank.push_back(ranks);
    ranks += static_cast<int32_t>(s->programs.size());
  }
  Schedule round;
  if (where.whole_fragments) {
    MOTLEY_ASSIGN_OR_RETURN(round, LowerFragmentRound(islands, options, std::move(updated), where));
  } else {
    round = RoundLowering(islands, options, std::move(updated)).Lower();
    where.first_ministage.assign(islands.size(), 0);
  }
  if (options.overlap_steps > 0) OrderForOverlap(round, options);
  round.outer_fragments = options.fragments;
  round.outer_fragment = options.fragment;
  if (layout != nullptr) *layout = where;
  if (std::string problem = CheckSchedule(round); !problem.empty())
    return Status::Internal("the outer round's schedule is unsound: " + problem);
  return round;
}

Result<std::vector<Schedule>> LowerOuterRounds(const std::vector<const Schedule*>& islands,
                                               const OuterRoundOptions& options, OuterRoundLayout* layout) {
  std::vector<Schedule> out;
  for (int32_t k = 0; k < std::max(1, options.fragments); ++k) {
    OuterRoundOptions one = options;
    one.fragment = k;
    MOTLEY_ASSIGN_OR_RETURN(Schedule round, LowerOuterRound(islands, one, layout));
    out.push_back(std::move(round));
  }
  return out;
}

}  // namespace motley
