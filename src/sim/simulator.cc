#include "sim/simulator.h"

#include "sim/flextp_prediction.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/units.h"
#include "plan/program_walker.h"
#include "sim/region_traffic.h"

namespace motley {
namespace {

struct OpState {  // 24 bytes: one per op of the schedule (hundreds of thousands)
  double start = 0;
  double end = 0;
  int32_t generation = 0;  // a copy's completion event is current only with this generation
  bool finished = false;
};

// One direction of a device's host link, shared by the copies in flight on it: each of k copies
// moves at 1/k of the link's speed (the runtime's copy engine feeds a parameter copy in pieces, so
// an activation copy on its own lane shares the link with it instead of queueing behind it).
struct HostLink {
  struct Flow {
    int op;
    double left_s;  // time still to go at the link's full speed
  };
  std::vector<Flow> flows;
  double updated_s = 0;

  void Advance(double now) {
    for (Flow& f : flows) f.left_s -= (now - updated_s) / static_cast<double>(flows.size());
    updated_s = now;
  }
};

struct Event {
  double time;
  int64_t seq;
  int rank;
  int op;
  int32_t generation;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

using SendKey = std::tuple<int, int, int64_t>;  // from, to, tag

// Whether the rank's host is inside the op until it ends, as the runtime runs it: the compute
// ops, the gradient norm (summed over ranks before the updates) and a tensor-parallel team's
// all-reduces (run inside the compute). Nothing after such an op is issued before it ends.
bool HoldsTheHost(const Op& op, const Schedule& s) {
  if (IsCompute(op.kind) || op.kind == OpKind::kGradNorm) return true;
  return IsCollective(op.kind) && s.collectives[op.collective].tensor_parallel;
}

class Simulator;

// The simulator's side of ProgramWalker: the walker decides, op by op, what the rank issues and
// which ops in flight it must finish first — the same decisions the runtime's executor gets — and
// the simulator times what is issued.
class SimRunner : public OpRunner {
 public:
  SimRunner(Simulator* sim, int rank) : sim_(sim), rank_(rank) {}
  Result<bool> Start(int op) override;
  bool Done(int op) override;
  Status Finish(int op) override;

 private:
  Simulator* sim_;
  int rank_;
};

struct RankState {
  std::vector<OpState> ops;
  std::unique_ptr<SimRunner> runner;
  std::unique_ptr<ProgramWalker> walker;
  int cursor = 0;                                 // the next op the walker issues
  int holding = -1;                               // an issued op the host is inside (HoldsTheHost)
  std::vector<int> waiting;                       // issued, not started, in program order
  std::vector<int> unnoticed;                     // collectives and sends ended, their memory still held
  std::array<std::deque<int>, kNumLanes> queued;  // issued copies per lane: the head runs
  double link_free_s = 0;                         // the rank's sends take its link one after another
  std::array<HostLink, 2> host_link;              // to the device, to the host
  double memory = 0, peak_memory = 0, host = 0, peak_host = 0;
  double compute_busy = 0, comm_busy = 0;
};

class Simulator {
 public:
  Simulator(const Schedule& s, const Cluster& c, const CostModel& costs, const SimConfig& config)
      : s_(s),
        cluster_(c),
        costs_(costs),
        config_(config),
        flextp_teams_(PredictFlexTpTeams(s, costs, config.tensor_parallel)),
        flextp_factor_(FlexTpComputeFactors(s, flextp_teams_)) {}

  Result<SimResult> Run();

 private:
  friend class SimRunner;
  bool Issue(int rank, int op);
  void Advance(int rank);
  void TryStart(int rank);
  bool DepsDone(int rank, const Op& op) const;
  void Begin(int rank, int op);
  void Finish(int rank, int op, double time);
  void Push(double time, int rank, int op) {
    events_.push({time, seq_++, rank, op, ranks_[rank].ops[op].generation});
  }
  HostLink& LinkOf(int rank, const Op& op) {
    return ranks_[rank].host_link[op.stream == Stream::kH2D ? 0 : 1];
  }
  void Reschedule(int rank, HostLink& link);
  std::string Stuck() const;

  const Schedule& s_;
  const Cluster& cluster_;
  const CostModel& costs_;
  const SimConfig& config_;
  std::vector<FlexTpTeamPrediction> flextp_teams_;  // FlexTP's balance in each team (flextp_prediction.h)
  std::vector<double> flextp_factor_;               // each rank's compute under it
  double now_ = 0;
  Status error_ = Status::Ok();  // the first breach a walker found
  std::vector<RankState> ranks_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  struct PostedSend {
    int rank, op;
    double arrival_s;  // when its data is there
  };
  std::map<SendKey, PostedSend> posted_sends_;           // sends waiting for their receive
  std::map<SendKey, std::pair<int, int>> posted_recvs_;  // receives posted before their send: (rank, op)
  std::vector<std::vector<std::pair<int, int>>> collective_arrivals_;  // per collective: (rank, op) so far
  std::vector<size_t> collective_members_;  // ... and the members with a program (Schedule::represented_by)
  std::vector<int> device_of_rank_;
};

Result<bool> SimRunner::Start(int op) { return sim_->Issue(rank_, op); }
bool SimRunner::Done(int op) { return sim_->ranks_[rank_].ops[op].finished; }
Status SimRunner::Finish(int op) {
  // The simulator steps a walker only once the ops it would wait for have finished.
  RankState& r = sim_->ranks_[rank_];
  MOTLEY_CHECK(r.ops[op].finished);
  if (auto it = std::find(r.unnoticed.begin(), r.unnoticed.end(), op); it != r.unnoticed.end()) {
    const Op& o = sim_->s_.programs[rank_].ops[op];
    r.memory -= o.device_free_bytes;
    r.host -= o.host_free_bytes;
    r.unnoticed.erase(it);
  }
  return Status::Ok();
}

bool Simulator::DepsDone(int rank, const Op& op) const {
  for (int32_t d : op.deps)
    if (!ranks_[rank].ops[d].finished) return false;
  return true;
}

// The walker issues op i: it starts once its inputs are there (TryStart). Returns whether the
// walker may count it finished now, as the runtime's executor says: all but the collectives it
// leaves in flight (copies, sends and receives run in the background without the walker's help).
bool Simulator::Issue(int rank, int i) {
  RankState& r = ranks_[rank];
  const Op& op = s_.programs[rank].ops[i];
  r.waiting.push_back(i);
  if (IsHostCopy(op.kind)) r.queued[LaneOf(op)].push_back(i);
  if (HoldsTheHost(op, s_)) {
    r.holding = i;
    return true;
  }
  return !IsCollective(op.kind);
}

void Simulator::Begin(int rank, int i) {
  RankState& r = ranks_[rank];
  const Op& op = s_.programs[rank].ops[i];
  r.ops[i].start = now_;
  r.memory += op.device_alloc_bytes;
  r.peak_memory = std::max(r.peak_memory, r.memory);
  r.host += op.host_alloc_bytes;
  r.peak_host = std::max(r.peak_host, r.host);
}

void Simulator::Reschedule(int rank, HostLink& link) {
  const double sharers = static_cast<double>(link.flows.size());
  for (const HostLink::Flow& f : link.flows) {
    ++ranks_[rank].ops[f.op].generation;  // its earlier completion event is stale now
    Push(now_ + std::max(0.0, f.left_s) * sharers, rank, f.op);
  }
}

// The rank issues ops in program order, as the runtime does: up to an op the host is inside
// until it ends, or one whose walker must first finish ops still running.
void Simulator::Advance(int rank) {
  RankState& r = ranks_[rank];
  const Program& p = s_.programs[rank];
  while (error_.ok()) {
    // The host looks at its communication whenever one of the rank's ops ends. Between ops what
    // the collectives and sends that ended held goes. From inside a compute op (the runtime looks
    // while an emulated device's compute is stretched, after the op's layers) the walker finishes
    // the collectives that are done — what each held goes as it finishes (SimRunner::Finish) —
    // and starts those queued behind them, not the gradient norm (it would block the host); a
    // delivered send's tensor counts until the op ends, as the op's layers ran with it.
    const bool inside = r.holding >= 0 && !r.ops[r.holding].finished;
    if (!inside) {
      for (int j : r.unnoticed) {
        r.memory -= p.ops[j].device_free_bytes;
        r.host -= p.ops[j].host_free_bytes;
      }
      r.unnoticed.clear();
    }
    if (Status st = r.walker->Poll(/*may_block=*/!inside); !st.ok()) {
      error_ = st;
      return;
    }
    TryStart(rank);
    if (r.holding >= 0 && !r.ops[r.holding].finished) return;
    r.holding = -1;
    if (r.cursor == static_cast<int>(p.ops.size())) return;
    for (int j : r.walker->Blockers(r.cursor))
      if (!r.ops[j].finished) return;  // its end resumes the rank
    if (Status st = r.walker->Step(r.cursor); !st.ok()) {
      error_ = st;
      return;
    }
    ++r.cursor;
  }
}

// Starts the issued ops whose inputs are there, in program order (a copy behind the one before it
// on its lane).
void Simulator::TryStart(int rank) {
  RankState& r = ranks_[rank];
  const int device = device_of_rank_[rank];
  size_t kept = 0;  // r.waiting is compacted in place: the ops that cannot start yet stay
  for (size_t w = 0; w < r.waiting.size(); ++w) {
    const int i = r.waiting[w];
    const Op& op = s_.programs[rank].ops[i];
    if (!DepsDone(rank, op) || (IsHostCopy(op.kind) && r.queued[LaneOf(op)].front() != i)) {
      r.waiting[kept++] = i;
      continue;
    }
    Begin(rank, i);
    switch (op.kind) {
      case OpKind::kForward:
      case OpKind::kBackward:
      case OpKind::kOptimizerStep:
      case OpKind::kOuterStep: {
        double d = costs_.ComputeS(device, op);
        if (op.tp_degree > 1 && op.kind != OpKind::kOptimizerStep) d *= flextp_factor_[rank];
        r.compute_busy += d;
        Push(now_ + d, rank, i);
        break;
      }
      case OpKind::kParamPrefetch:
      case OpKind::kParamOffload:
      case OpKind::kActPrefetch:
      case OpKind::kActOffload: {
        HostLink& link = LinkOf(rank, op);
        link.Advance(now_);
        link.flows.push_back({i, costs_.CopyS(device, op.bytes)});
        Reschedule(rank, link);
        break;
      }
      case OpKind::kSend: {
        // The data is there after the link's time, behind the rank's sends before it; the transfer
        // completes, for both ends, once it has arrived and the receive is posted (a rendezvous,
        // as Gloo's and NCCL's are).
        const double arrival =
            std::max(now_, r.link_free_s) + costs_.TransferS(device, device_of_rank_[op.peer], op.bytes);
        r.link_free_s = arrival;
        const SendKey key{rank, op.peer, op.tag};
        if (auto w = posted_recvs_.find(key); w != posted_recvs_.end()) {
          const auto [peer, recv] = w->second;
          Push(arrival, rank, i);
          Push(arrival, peer, recv);
          posted_recvs_.erase(w);
        } else {
          posted_sends_[key] = {rank, i, arrival};
        }
        break;
      }
      case OpKind::kRecv: {
        // Posted when issued; its buffer is held from then until the data has arrived and been used.
        const SendKey key{op.peer, rank, op.tag};
        if (auto a = posted_sends_.find(key); a != posted_sends_.end()) {
          const PostedSend& send = a->second;
          const double end = std::max(now_, send.arrival_s);
          Push(end, send.rank, send.op);
          Push(end, rank, i);
          posted_sends_.erase(a);
        } else {
          posted_recvs_[key] = {rank, i};
        }
        break;
      }
      case OpKind::kAllGather:
      case OpKind::kReduceScatter:
      case OpKind::kAllReduce:
      case OpKind::kGradNorm:
      case OpKind::kOuterReduce: {
        const Collective& c = s_.collectives[op.collective];
        // Everyone starts when the last member arrives (each member has exactly one op naming it);
        // a collective of one rank has nothing to exchange and ends as it starts.
        auto& arrived = collective_arrivals_[op.collective];
        arrived.push_back({rank, i});
        if (arrived.size() == collective_members_[op.collective]) {
          std::vector<int> devices;
          for (int m : c.ranks) devices.push_back(device_of_rank_[m]);
          // Uneven state shares: paced by the largest piece (plan/state_shares.h).
          const double bytes = c.bytes * c.uneven_factor / c.calls;
          const double end = c.ranks.size() == 1
                                 ? now_
                                 : now_ + c.calls * costs_.CollectiveS(TrafficKind(c), devices, bytes);
          for (const auto& [m, j] : arrived) Push(end, m, j);
        }
        break;
      }
    }
  }
  r.waiting.resize(kept);
}

void Simulator::Finish(int rank, int i, double time) {
  RankState& r = ranks_[rank];
  const Op& op = s_.programs[rank].ops[i];
  OpState& st = r.ops[i];
  st.finished = true;
  st.end = time;
  if (IsCollective(op.kind) || op.kind == OpKind::kSend) {
    r.unnoticed.push_back(i);  // what it held goes when the host looks (Advance, SimRunner::Finish)
  } else {
    r.memory -= op.device_free_bytes;
    r.host -= op.host_free_bytes;
  }
  if (op.stream == Stream::kComm) r.comm_busy += time - st.start;
  if (IsHostCopy(op.kind)) {
    HostLink& link = LinkOf(rank, op);
    link.Advance(time);
    std::erase_if(link.flows, [i](const HostLink::Flow& f) { return f.op == i; });
    Reschedule(rank, link);
  }
  if (IsHostCopy(op.kind)) {
    std::deque<int>& lane = r.queued[LaneOf(op)];
    MOTLEY_CHECK(!lane.empty() && lane.front() == i);
    lane.pop_front();
  }
}

// Where each rank that did not finish waits: the op its host is inside, else the first op issued
// and not finished, else the op its walker cannot issue yet.
std::string Simulator::Stuck() const {
  std::string stuck;
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    const RankState& r = ranks_[rank];
    const Program& p = s_.programs[rank];
    int at = -1;
    if (r.holding >= 0 && !r.ops[r.holding].finished) at = r.holding;
    for (int i = 0; at < 0 && i < r.cursor; ++i)
      if (!r.ops[i].finished) at = i;
    if (at < 0 && r.cursor < static_cast<int>(p.ops.size())) at = r.cursor;
    if (at < 0) continue;
    const Op& op = p.ops[at];
    stuck += fmt::format("\n  rank {} waits at op {} ({}{})", rank, at, OpKindName(op.kind),
                         op.peer >= 0 ? fmt::format(" with rank {}", op.peer) : "");
  }
  return stuck;
}

Result<SimResult> Simulator::Run() {
  const int n = static_cast<int>(s_.programs.size());
  ranks_.resize(n);
  collective_arrivals_.assign(s_.collectives.size(), {});
  MOTLEY_CHECK(s_.represented_by.empty() || (s_.represented_by.size() == static_cast<size_t>(n) &&
                                             !config_.record_trace && !config_.check_buffers));
  auto represented_by = [&](int rank) { return s_.represented_by.empty() ? rank : s_.represented_by[rank]; };
  for (const Collective& c : s_.collectives)
    collective_members_.push_back(static_cast<size_t>(
        std::count_if(c.ranks.begin(), c.ranks.end(), [&](int m) { return represented_by(m) == m; })));
  for (int rank = 0; rank < n; ++rank) {
    const Program& p = s_.programs[rank];
    device_of_rank_.push_back(p.device);
    RankState& r = ranks_[rank];
    r.ops.resize(p.ops.size());
    r.runner = std::make_unique<SimRunner>(this, rank);
    r.walker = std::make_unique<ProgramWalker>(p, r.runner.get(), &s_.collectives);
    r.walker->set_check_buffers(config_.check_buffers);
    r.walker->Begin();
    r.memory = r.peak_memory = p.static_device_bytes;
    r.host = r.peak_host = p.static_host_bytes;
  }
  for (int rank = 0; rank < n; ++rank) Advance(rank);
  SimResult result;
  result.flextp_teams = flextp_teams_;
  while (!events_.empty() && error_.ok()) {
    const Event e = events_.top();
    events_.pop();
    if (e.generation != ranks_[e.rank].ops[e.op].generation) continue;  // a copy's link share changed since
    if (e.time > config_.stop_after_s) {
      result.stopped = true;
      result.step_time_s = e.time;
      break;
    }
    ++result.num_events;
    now_ = e.time;
    Finish(e.rank, e.op, e.time);
    result.step_time_s = std::max(result.step_time_s, e.time);
    Advance(e.rank);
  }
  MOTLEY_RETURN_IF_ERROR(error_);

  // Every op must have finished; otherwise say where each rank is stuck.
  if (!result.stopped) {
    if (std::string stuck = Stuck(); !stuck.empty())
      return Status::Internal("the schedule cannot finish (deadlock):" + stuck);
    for (RankState& r : ranks_) MOTLEY_RETURN_IF_ERROR(r.walker->End());
    // Whatever crosses between two regions shares the one link between them, where the events above
    // give each transfer and collective a link of its own: the step takes at least those bytes over it.
    if (cluster_.regions.size() > 1) {
      result.region_link_bound_s = RegionLinkBoundS(RegionTraffic(s_, cluster_), cluster_, costs_);
      result.step_time_s = std::max(result.step_time_s, result.region_link_bound_s);
    }
  }

  double peak_flops = 0;
  for (int rank = 0; rank < n; ++rank) {
    const RankState& r = ranks_[represented_by(rank)];  // alike ranks' figures are its own
    const int device = device_of_rank_[rank];
    DeviceSimReport d;
    d.rank = rank;
    d.device = device;
    d.device_type = cluster_.spec(device).name;
    d.compute_source = costs_.ComputeSource(device);
    d.compute_busy_s = r.compute_busy;
    d.comm_busy_s = r.comm_busy;
    d.busy_fraction = result.step_time_s > 0 ? r.compute_busy / result.step_time_s : 0;
    d.idle_fraction = 1 - d.busy_fraction;
    d.peak_memory_bytes = r.peak_memory;
    d.capacity_bytes = cluster_.usable_memory_bytes(device);
    d.out_of_memory = r.peak_memory > d.capacity_bytes;
    d.peak_host_bytes = r.peak_host;
    d.end_memory_bytes = r.memory;
    d.end_host_bytes = r.host;
    if (d.out_of_memory) {
      result.fits_memory = false;
      const double reserve = cluster_.reserve_bytes(device);
      result.oom_message += fmt::format(
          "{}device {} ({}, rank {}) needs {} of {}{}", result.oom_message.empty() ? "" : "; ", device,
          d.device_type, rank, FormatBytes(d.peak_memory_bytes), FormatBytes(d.capacity_bytes),
          reserve > 0 ? fmt::format(" (its {} less the {} CUDA, NCCL and the allocator keep)",
                                    FormatBytes(cluster_.memory_bytes(device)), FormatBytes(reserve))
                      : "");
    }
    peak_flops += costs_.PeakFlops(device);
    result.devices.push_back(d);
  }
  if (result.step_time_s > 0) {
    result.tokens_per_s = s_.global_batch_tokens / result.step_time_s;
    result.tflops = s_.hardware_flops_per_step / result.step_time_s / 1e12;
    result.hfu = s_.hardware_flops_per_step / result.step_time_s / peak_flops;
    result.mfu = s_.model_flops_per_step / result.step_time_s / peak_flops;
  }
  if (config_.record_trace) {
    for (int rank = 0; rank < n; ++rank)
      for (size_t i = 0; i < ranks_[rank].ops.size(); ++i)
        result.trace.push_back(
            {rank, static_cast<int>(i), ranks_[rank].ops[i].start, ranks_[rank].ops[i].end});
  }
  return result;
}

}  // namespace

Result<SimResult> Simulate(const Schedule& schedule, const Cluster& cluster, const CostModel& costs,
                           const SimConfig& config) {
  return Simulator(schedule, cluster, costs, config).Run();
}

std::string ChromeTraceJson(const Schedule& schedule, const Cluster& cluster, const SimResult& result) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& p : schedule.programs) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", p.rank},
                      {"args",
                       {{"name", fmt::format("rank {} (device {}, {})", p.rank, p.device,
                                             cluster.spec(p.device).name)}}}});
    for (int s = 0; s < kNumLanes; ++s)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", p.rank},
                        {"tid", s},
                        {"args", {{"name", LaneName(s)}}}});
  }
  for (const auto& t : result.trace) {
    const Op& op = schedule.programs[t.rank].ops[t.op];
    std::string name(OpKindName(op.kind));
    if (op.ministage >= 0) name += fmt::format(" ms{}", schedule.ministages.at(op.ministage).index);
    if (op.microbatch >= 0) name += fmt::format(" mb{}", op.microbatch);
    nlohmann::json args = {{"op", t.op}};
    if (op.layer_end > op.layer_begin) args["layers"] = {op.layer_begin, op.layer_end};
    if (op.bytes > 0) args["bytes"] = op.bytes;
    if (op.flops > 0) args["flops"] = op.flops;
    if (op.peer >= 0) args["peer"] = op.peer;
    if (t.host_start_s >= 0) args["host_ms"] = {t.host_start_s * 1e3, t.host_end_s * 1e3};
    events.push_back({{"name", name},
                      {"cat", OpKindName(op.kind)},
                      {"ph", "X"},
                      {"pid", t.rank},
                      {"tid", LaneOf(op)},
                      {"ts", t.start_s * 1e6},
                      {"dur", (t.end_s - t.start_s) * 1e6},
                      {"args", args}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace motley
