// Passes over the finished programs: gradient clipping's hold of the updates, the deps the
// buffers imply, where gradients are complete, and the state executors start from.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "core/check.h"
#include "plan/evaluate_all.h"
#include "plan/lowerer.h"

namespace motley::lowering {

// Gradient clipping (Plan::gradient_clipping): an update needs the global gradient norm, and the
// norm needs every gradient. On each rank the optimizer steps — and the all-gathers and parameter
// offloads that follow an update of the same ministage — move, in their order, after one
// kGradNorm collective over every rank that waits for the rank's gradient reductions. Ops that
// waited for a held one only to bound memory (a prefetch after another ministage's offload: the
// residency bound) no longer wait: the bound holds until the updates, not through them.
void Lowerer::HoldUpdatesForTheNorm(Program& p, int norm_collective) const {
  if (Represented(p)) return;
  const size_t n = p.ops.size();
  std::vector<bool> held(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = p.ops[i];
    const bool moments = std::any_of(op.writes.begin(), op.writes.end(),
                                     [](const Buffer& b) { return b.kind == BufferKind::kMoments; });
    bool hold = op.kind == OpKind::kOptimizerStep ||
                (op.kind == OpKind::kParamPrefetch && moments && StateReturnsForTheUpdate(op.ministage));
    if (op.kind == OpKind::kAllGather || op.kind == OpKind::kParamOffload)
      for (int d : op.deps) hold = hold || (held[d] && p.ops[d].layer_begin == op.layer_begin);
    held[i] = hold;
  }
  Op norm;
  norm.kind = OpKind::kGradNorm;
  norm.stream = Stream::kComm;
  norm.collective = norm_collective;
  norm.bytes = 2 * sizeof(double);
  for (int v = 0; v < num_ministages_; ++v)  // the reduced gradients of every ministage of the rank
    if (ministages_[v].group == group_of_rank_[p.rank])
      norm.reads.push_back(Buf(plan_.zero_stage == 0 ? BufferKind::kGrads : BufferKind::kGradShard, v));
  for (size_t i = 0; i < n; ++i)
    if (p.ops[i].kind == OpKind::kOptimizerStep)
      for (int d : p.ops[i].deps)
        if (!held[d]) norm.deps.push_back(d);  // the reduced gradients
  std::vector<int> index(n);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (!held[i]) order.push_back(i);
  const int norm_at = static_cast<int>(order.size());
  for (size_t i = 0; i < n; ++i)
    if (held[i]) order.push_back(i);
  for (size_t k = 0; k < order.size(); ++k)
    index[order[k]] = static_cast<int>(k < static_cast<size_t>(norm_at) ? k : k + 1);
  auto remap = [&](const OpDeps& deps, bool keep_held) {
    OpDeps out;
    for (int d : deps)
      if (keep_held || !held[d]) out.push_back(index[d]);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  };
  // In place: the ops before the first held one keep their places (their deps point backwards,
  // at ops that stay); the rest close up, and the norm and the held ops follow them.
  size_t first = 0;
  while (first < n && !held[first]) ++first;
  std::vector<Op> held_ops;
  size_t w = first;
  for (size_t i = 0; i < n; ++i) {
    Op& op = p.ops[i];
    if (i < first) {
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
      continue;
    }
    if (held[i]) {
      held_ops.push_back(std::move(op));
      held_ops.back().deps = remap(held_ops.back().deps, true);
      continue;
    }
    op.deps = remap(op.deps, false);
    if (w != i) p.ops[w] = std::move(op);
    ++w;
  }
  MOTLEY_CHECK_EQ(static_cast<int>(w), norm_at);
  p.ops.resize(w);
  p.ops.reserve(n + 1);
  norm.deps = remap(norm.deps, false);
  p.ops.push_back(std::move(norm));
  for (Op& op : held_ops) {
    // An update, and the state brought back for one, wait for the norm (the simulator starts
    // an op once its lane and deps allow, the runtime in program order: both after the norm).
    if (op.kind == OpKind::kOptimizerStep || op.kind == OpKind::kParamPrefetch) {
      op.deps.push_back(norm_at);
      std::sort(op.deps.begin(), op.deps.end());
    }
    p.ops.push_back(std::move(op));
  }
  std::vector<Op>& ops = p.ops;
  // The state that comes back for the updates: at most two ministages at a time (a prefetch
  // waits until the ministage two updates back has gone to the host again).
  std::vector<int> offloads;
  for (int k = norm_at + 1; k < static_cast<int>(ops.size()); ++k) {
    Op& op = ops[k];
    if (op.kind == OpKind::kParamOffload) offloads.push_back(k);
    if (op.kind == OpKind::kParamPrefetch && offloads.size() >= 2) {
      op.deps.push_back(offloads[offloads.size() - 2]);
      std::sort(op.deps.begin(), op.deps.end());
    }
  }
}

// Per buffer its last writer (or freer) and its readers since. Ops on one lane run in order, so
// of a lane's readers the last one is enough — except sends, which leave their lane when posted
// (the simulator) and are all kept. (Keeps the deps short: a gather after thirty microbatches'
// forwards waits for the last one, not for thirty.)
// Buffers are numbered densely by (kind, ministage, the program's own number for the
// microbatch): a program sees a few of a pipeline's microbatches (a table over all 2,048 of a
// 128-rank pipeline's took 70 MB). One table serves the programs a thread passes over, its touched
// cells reset.
struct Lowerer::BufferUses {
  struct Uses {
    int writer = -1;
    boost::container::small_vector<std::pair<int, int>, 2> readers;  // (lane, op); lane -1: a send
  };
  explicit BufferUses(int64_t num_mb) : local_mb(static_cast<size_t>(num_mb) + 1, -1) {}
  std::vector<int32_t> local_mb;  // microbatch + 1 -> its number here
  std::vector<int32_t> numbered;  // the microbatches numbered
  std::vector<Uses> uses;
  std::vector<size_t> touched;
  size_t per_ministage = 0;
};

void Lowerer::RunPasses() {
  int norm_collective = -1;
  if (plan_.gradient_clipping || plan_.loss_scaled()) {
    std::vector<int> everyone;
    for (size_t r = 0; r < s_.programs.size(); ++r) everyone.push_back(static_cast<int>(r));
    norm_collective = NewCollective(OpKind::kGradNorm, everyone, 2 * sizeof(double));  // loss, norm^2
  }
  // Each program is passed over alone (the passes read the lowering, never another program): the
  // threads take the next program left, each with its own table of buffer uses.
  const size_t n = s_.programs.size();
  const size_t threads = std::min(n, std::max<size_t>(1, options_.threads));
  std::atomic<size_t> next{0};
  ForEachOnEveryCore(
      threads,
      [&](size_t) {
        BufferUses uses(num_mb_);
        for (size_t i = next++; i < n; i = next++) {
          Program& p = s_.programs[i];
          if (norm_collective >= 0) HoldUpdatesForTheNorm(p, norm_collective);
          AddBufferDeps(p, uses);
          IssuePrefetchesEarly(p);
          MarkCompleteGradients(p);
        }
      },
      threads);
}

void Lowerer::AddBufferDeps(Program& p, BufferUses& table) const {
  using Uses = BufferUses::Uses;
  constexpr size_t kKinds = static_cast<size_t>(BufferKind::kHostSaved) + 1;
  std::vector<int32_t>& local_mb = table.local_mb;
  std::vector<int32_t>& numbered = table.numbered;
  std::vector<Uses>& uses = table.uses;
  std::vector<size_t>& touched = table.touched;
  size_t& per_ministage = table.per_ministage;
  const auto index = [&](const Buffer& b) {
    MOTLEY_CHECK(b.ministage >= 0 && b.ministage < num_ministages_ && b.microbatch >= -1 &&
                 b.microbatch < num_mb_);
    return (static_cast<size_t>(b.kind) * static_cast<size_t>(num_ministages_) +
            static_cast<size_t>(b.ministage)) *
               per_ministage +
           static_cast<size_t>(local_mb[static_cast<size_t>(b.microbatch + 1)]);
  };
  for (size_t i : touched) uses[i] = Uses{};
  touched.clear();
  for (int32_t m : numbered) local_mb[static_cast<size_t>(m)] = -1;
  numbered.clear();
  for (const Op& op : p.ops)
    for (const Buffers* list : {&op.reads, &op.writes, &op.frees})
      for (const Buffer& b : *list) {
        const size_t m = static_cast<size_t>(b.microbatch + 1);
        MOTLEY_CHECK(m < local_mb.size());
        if (local_mb[m] < 0) {
          local_mb[m] = static_cast<int32_t>(numbered.size());
          numbered.push_back(static_cast<int32_t>(m));
        }
      }
  if (numbered.size() > per_ministage) {  // a larger table (every cell unused)
    per_ministage = numbered.size();
    uses.assign(kKinds * static_cast<size_t>(num_ministages_) * per_ministage, Uses{});
    touched.clear();
  }
  auto use = [&](const Buffer& b) -> Uses& {
    const size_t i = index(b);
    Uses& u = uses[i];
    if (u.writer < 0 && u.readers.empty()) touched.push_back(i);  // (touched twice is harmless)
    return u;
  };
  auto seen = [&](const Buffer& b) -> const Uses& { return uses[index(b)]; };
  for (int j = 0; j < static_cast<int>(p.ops.size()); ++j) {
    Op& op = p.ops[j];
    const size_t before = op.deps.size();
    for (const Buffer& b : op.reads)
      if (const Uses& u = seen(b); u.writer >= 0) op.deps.push_back(u.writer);
    for (const Buffer& b : op.writes) {
      const Uses& u = seen(b);
      if (u.writer >= 0) op.deps.push_back(u.writer);
      for (const auto& [lane, k] : u.readers) op.deps.push_back(k);
    }
    if (op.deps.size() != before) {
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    }
    const int lane = op.kind == OpKind::kSend ? -1 : LaneOf(op);
    for (const Buffer& b : op.reads) {
      auto& readers = use(b).readers;
      auto same = std::find_if(readers.begin(), readers.end(),
                               [&](const auto& r) { return lane >= 0 && r.first == lane; });
      if (same != readers.end()) {
        same->second = j;
      } else {
        readers.push_back({lane, j});
      }
    }
    for (const Buffer& b : op.writes) {
      Uses& u = use(b);
      u.writer = j;
      u.readers.clear();
    }
    // A buffer is one slot: writing it anew waits for the op that freed it (and its readers).
    for (const Buffer& b : op.frees) use(b).writer = j;
  }
}

// The runtime issues ops in program order and its host is inside a compute op until it ends, so a
// prefetch placed just before the backward that reads it would start only when the backward before
// has ended, and that backward's reader would wait for the copy. Placed right after the last op it
// waits for (its deps: the boundary's offload, the backward two before — the bound of one
// microbatch ahead — and what the buffers imply), it runs beside the backward in between, as the
// lowering meant. Prefetches keep their order on their lane.
void Lowerer::IssuePrefetchesEarly(Program& p) const {
  const int n = static_cast<int>(p.ops.size());
  // Each prefetch goes right after its anchor: the latest op that stays in place among those it
  // waits for (a prefetch it waits for counts by its own anchor), the prefetch before it on its
  // lane, and the compute op two before its reader (so it runs beside one compute op, not
  // during the forwards when its reader is a step's first backward). Prefetches with one anchor
  // keep their order.
  if (std::none_of(p.ops.begin(), p.ops.end(), [](const Op& op) { return op.kind == OpKind::kActPrefetch; }))
    return;
  std::vector<int> anchor(n);
  std::vector<std::pair<int, int>> moved;  // (anchor, prefetch), in program order: anchors never decrease
  int last_on_lane = -1;
  int computes[2] = {-1, -1};  // the last two compute ops so far, the latest first
  for (int i = 0; i < n; ++i) {
    anchor[i] = i;
    if (IsCompute(p.ops[i].kind)) {
      computes[1] = computes[0];
      computes[0] = i;
    }
    if (p.ops[i].kind != OpKind::kActPrefetch) continue;
    int a = std::max(computes[1], last_on_lane >= 0 ? anchor[last_on_lane] : -1);
    for (int d : p.ops[i].deps) a = std::max(a, anchor[d]);
    anchor[i] = a;
    moved.push_back({a, i});
    last_on_lane = i;
  }
  std::vector<int> order;
  order.reserve(n);
  size_t next = 0;
  while (next < moved.size() && moved[next].first < 0) order.push_back(moved[next++].second);
  for (int i = 0; i < n; ++i) {
    if (anchor[i] != i) continue;
    order.push_back(i);
    while (next < moved.size() && moved[next].first == i) order.push_back(moved[next++].second);
  }
  MOTLEY_CHECK_EQ(static_cast<int>(order.size()), n);
  // The ops before the first that moves keep their places and their deps (which point backwards,
  // at ops that stay too); only the rest are moved and renumbered.
  int first = 0;
  while (first < n && order[first] == first) ++first;
  for (int k = 0; k < first; ++k)
    if (!std::is_sorted(p.ops[k].deps.begin(), p.ops[k].deps.end()))
      std::sort(p.ops[k].deps.begin(), p.ops[k].deps.end());
  if (first == n) return;
  std::vector<int> index(n);
  for (int k = 0; k < n; ++k) index[order[k]] = k;
  // In place, a cycle of the permutation at a time (no copy of the moved ops: that was a program's
  // size of memory allocated and freed again for every program).
  std::vector<bool> placed(static_cast<size_t>(n), false);
  for (int k = first; k < n; ++k) {
    if (placed[k] || order[k] == k) continue;
    Op carried = std::move(p.ops[k]);
    int at = k;
    while (order[at] != k) {
      p.ops[at] = std::move(p.ops[order[at]]);
      placed[at] = true;
      at = order[at];
    }
    p.ops[at] = std::move(carried);
    placed[at] = true;
  }
  for (int k = first; k < n; ++k) {
    for (int32_t& d : p.ops[k].deps) d = index[d];
    std::sort(p.ops[k].deps.begin(), p.ops[k].deps.end());
  }
}

void Lowerer::MarkCompleteGradients(Program& p) const {
  // From the end: per ministage, whether what comes next for its gradients is a read (or the end of
  // the step: complete) or another backward adding to them (not complete).
  std::vector<bool> read_next(num_ministages_, true);
  for (size_t i = p.ops.size(); i-- > 0;) {
    Op& op = p.ops[i];
    if (op.kind == OpKind::kBackward) {
      op.gradients_complete = read_next[op.ministage];
      read_next[op.ministage] = false;
    }
    for (const Buffer& b : op.reads)
      if (b.kind == BufferKind::kGrads || b.kind == BufferKind::kGradShard) read_next[b.ministage] = true;
  }
}

namespace {

// An op's fields as the simulator and the passes see them, microbatches numbered by their first
// appearance in the program (alike programs serve other microbatches).
struct OpShape {
  std::vector<int32_t> local_mb;  // global microbatch + 1 -> its number here, or -1
  int32_t next = 0;
  int32_t Local(int32_t microbatch) {
    const auto m = static_cast<size_t>(microbatch + 1);
    if (m >= local_mb.size()) local_mb.resize(m + 1, -1);
    if (local_mb[m] < 0) local_mb[m] = next++;
    return local_mb[m];
  }
};

bool AlikeBuffers(const Buffers& a, const Buffers& b, OpShape& sa, OpShape& sb) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].ministage != b[i].ministage ||
        sa.Local(a[i].microbatch) != sb.Local(b[i].microbatch))
      return false;
  return true;
}

bool AlikeOps(const Op& a, const Op& b, OpShape& sa, OpShape& sb) {
  return a.kind == b.kind && a.stream == b.stream && a.embedding == b.embedding && a.head == b.head &&
         a.gradients_complete == b.gradients_complete && a.ministage == b.ministage &&
         a.tp_degree == b.tp_degree && a.layer_begin == b.layer_begin && a.layer_end == b.layer_end &&
         sa.Local(a.microbatch) == sb.Local(b.microbatch) && a.collective == b.collective &&
         a.sequences == b.sequences && a.flops == b.flops && a.bytes == b.bytes && a.params == b.params &&
         a.device_alloc_bytes == b.device_alloc_bytes && a.device_free_bytes == b.device_free_bytes &&
         a.host_alloc_bytes == b.host_alloc_bytes && a.host_free_bytes == b.host_free_bytes &&
         std::equal(a.deps.begin(), a.deps.end(), b.deps.begin(), b.deps.end()) &&
         AlikeBuffers(a.reads, b.reads, sa, sb) && AlikeBuffers(a.writes, b.writes, sa, sb) &&
         AlikeBuffers(a.frees, b.frees, sa, sb);
}

bool AlikePrograms(const Program& a, const Program& b) {
  if (a.ops.size() != b.ops.size() || a.static_device_bytes != b.static_device_bytes ||
      a.static_host_bytes != b.static_host_bytes)
    return false;
  OpShape sa, sb;
  for (size_t i = 0; i < a.ops.size(); ++i)
    if (!AlikeOps(a.ops[i], b.ops[i], sa, sb)) return false;
  return true;
}

// A program that exchanges only through collectives (a transfer names its peer, a team's compute its
// partners), and a hash of what AlikePrograms compares (microbatches aside).
std::optional<size_t> ShapeHash(const Program& p) {
  uint64_t h = p.ops.size();
  auto mix = [&h](double x) { h = (h ^ std::bit_cast<uint64_t>(x)) * 0x100000001b3ULL; };
  for (const Op& op : p.ops) {
    if (op.peer >= 0 || op.tp_degree > 1) return std::nullopt;
    mix(static_cast<double>(op.kind));
    mix(op.collective);
    mix(op.flops + op.bytes);
    mix(op.device_alloc_bytes - op.device_free_bytes);
  }
  return static_cast<size_t>(h);
}

}  // namespace

// The planner's judging (LowerOptions::device_class): ranks whose programs are alike op for op, on
// devices of one class, keep the first one's program between them; the others' are emptied before
// the passes, which then order and complete one program a class.
void Lowerer::KeepOneProgramPerClass() {
  const size_t n = s_.programs.size();
  s_.represented_by.resize(n);
  std::map<std::pair<int64_t, size_t>, std::vector<int32_t>> firsts;  // (class, hash) -> ranks keeping theirs
  for (size_t r = 0; r < n; ++r) {
    Program& p = s_.programs[r];
    s_.represented_by[r] = static_cast<int32_t>(r);
    if (Dropped(static_cast<int>(r))) {  // PredictAlikeRanks: its ops were never kept
      // (its stand-in, an earlier rank, may itself be alike to one before it)
      s_.represented_by[r] = s_.represented_by[static_cast<size_t>(stands_for_[r])];
      p.ops = {};
      continue;
    }
    const std::optional<size_t> hash = ShapeHash(p);
    if (!hash) continue;
    auto& same = firsts[{options_.device_class.at(static_cast<size_t>(p.device)), *hash}];
    const auto alike = std::find_if(same.begin(), same.end(), [&](int32_t q) {
      return AlikePrograms(s_.programs[static_cast<size_t>(q)], p);
    });
    if (alike == same.end()) {
      same.push_back(static_cast<int32_t>(r));
      continue;
    }
    s_.represented_by[r] = *alike;
    p.ops.clear();
    p.ops.shrink_to_fit();
  }
}

void Lowerer::DescribeState() {
  s_.microbatch_sequences = sequences_;
  s_.sharded_optimizer = plan_.zero_stage >= 1;
  s_.sharded_params = plan_.zero_stage == 3 || plan_.offload_params;
  s_.activation_checkpointing = plan_.activation_checkpointing;
  s_.flextp_mode = plan_.flextp_mode.empty() ? "off" : plan_.flextp_mode;
  for (int v = 0; v < num_ministages_; ++v) {
    const int g = ministages_[v].group;
    ScheduleMinistage m;
    m.group = g;
    m.index = ministages_[v].index;
    m.layer_begin = ministages_[v].layers.begin;
    m.layer_end = ministages_[v].layers.end;
    m.embedding = m.layer_begin == 0;
    m.head = m.layer_end == model_.num_layers;
    m.first_rank = group_ranks_[g].front();
    m.num_ranks = static_cast<int32_t>(group_ranks_[g].size());
    m.tp_degree = Tp(g);
    m.state_shares = state_shares_[g];
    s_.ministages.push_back(m);
  }
  for (Program& p : s_.programs) {
    const int g = group_of_rank_[p.rank];
    const int at = p.rank - group_ranks_[g].front();
    p.group = g;
    p.tp_index = at % Tp(g);
    p.dp_index = at / Tp(g);
    p.dp_size = DpDegree(g);
    for (int v = 0; v < num_ministages_; ++v) {
      if (ministages_[v].group != g) continue;
      const bool on_host = policy_.offload_params && !Resident(v);  // between visits
      if (!s_.sharded_params) p.resident.push_back(Buf(BufferKind::kParams, v));
      if (plan_.zero_stage >= 1 && !on_host) p.resident.push_back(Buf(BufferKind::kShard, v));
      if (!on_host) p.resident.push_back(Buf(BufferKind::kMoments, v));
      if (plan_.zero_stage <= 1) p.resident.push_back(Buf(BufferKind::kGrads, v));
      if (plan_.zero_stage >= 1 && !policy_.offload_params)
        p.resident.push_back(Buf(BufferKind::kGradShard, v));
    }
  }
}

}  // namespace motley::lowering

namespace motley {
bool AlikePrograms(const Program& a, const Program& b) { return lowering::AlikePrograms(a, b); }
}  // namespace motley
