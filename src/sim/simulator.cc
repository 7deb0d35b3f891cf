#include "sim/simulator.h"

#include <cstdint>
#include <algorithm>
#include <array>
#include <map>
#include <queue>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/units.h"

namespace motley {
namespace {

struct OpState {
  bool started = false;
  bool finished = false;
  double start = 0;
  double end = 0;
  int64_t generation = 0;  // a copy's completion event is current only with this generation
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

struct RankState {
  std::array<std::vector<int>, kNumLanes> queue;  // op indices per lane, in program order
  std::array<size_t, kNumLanes> head{};
  std::vector<OpState> ops;
  std::array<HostLink, 2> host_link;  // to the device, to the host
  double memory = 0, peak_memory = 0, host = 0, peak_host = 0;
  double compute_busy = 0, comm_busy = 0;
};

struct Event {
  double time;
  int64_t seq;
  int rank;
  int op;
  int64_t generation;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

using SendKey = std::tuple<int, int, int64_t>;  // from, to, tag

class Simulator {
 public:
  Simulator(const Schedule& s, const Cluster& c, const CostModel& costs, const SimConfig& config)
      : s_(s), cluster_(c), costs_(costs), config_(config) {}

  Result<SimResult> Run();

 private:
  void TryStart(int rank, double now);
  bool DepsDone(int rank, const Op& op) const;
  void Begin(int rank, int op, double now);
  void Finish(int rank, int op, double time);
  void Push(double time, int rank, int op) { events_.push({time, seq_++, rank, op, ranks_[rank].ops[op].generation}); }
  HostLink& LinkOf(int rank, const Op& op) { return ranks_[rank].host_link[op.stream == Stream::kH2D ? 0 : 1]; }
  void Reschedule(int rank, HostLink& link, double now);

  const Schedule& s_;
  const Cluster& cluster_;
  const CostModel& costs_;
  const SimConfig& config_;
  std::vector<RankState> ranks_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t seq_ = 0;
  std::map<SendKey, double> arrivals_;                    // posted sends: when their data arrives
  std::map<SendKey, std::pair<int, int>> waiting_recvs_;  // recvs posted before their send: (rank, op)
  std::vector<std::vector<std::pair<int, int>>> collective_arrivals_;  // per collective: (rank, op) so far
  std::vector<int> device_of_rank_;
  int64_t finished_at_once_ = 0;  // ops that finished as they started (collectives of one rank)
};

bool Simulator::DepsDone(int rank, const Op& op) const {
  for (int32_t d : op.deps)
    if (!ranks_[rank].ops[d].finished) return false;
  return true;
}

void Simulator::Begin(int rank, int i, double now) {
  RankState& r = ranks_[rank];
  const Op& op = s_.programs[rank].ops[i];
  r.ops[i].started = true;
  r.ops[i].start = now;
  r.memory += op.device_alloc_bytes;
  r.peak_memory = std::max(r.peak_memory, r.memory);
  r.host += op.host_alloc_bytes;
  r.peak_host = std::max(r.peak_host, r.host);
}

void Simulator::Reschedule(int rank, HostLink& link, double now) {
  const double sharers = static_cast<double>(link.flows.size());
  for (const HostLink::Flow& f : link.flows) {
    ++ranks_[rank].ops[f.op].generation;  // its earlier completion event is stale now
    Push(now + std::max(0.0, f.left_s) * sharers, rank, f.op);
  }
}

void Simulator::TryStart(int rank, double now) {
  RankState& r = ranks_[rank];
  const int device = device_of_rank_[rank];
  // The ops that can start now start in program order, as the runtime issues them (a lane is busy
  // while its head op runs or waits); a collective of one rank has nothing to exchange and
  // finishes at once, before the ops after it start.
  while (true) {
    int s = -1;
    for (int lane = 0; lane < kNumLanes; ++lane) {
      if (r.head[lane] >= r.queue[lane].size()) continue;
      const int i = r.queue[lane][r.head[lane]];
      if (r.ops[i].started || !DepsDone(rank, s_.programs[rank].ops[i])) continue;
      if (s < 0 || i < r.queue[s][r.head[s]]) s = lane;
    }
    if (s < 0) return;
    {
      const int i = r.queue[s][r.head[s]];
      const Op& op = s_.programs[rank].ops[i];
      Begin(rank, i, now);
      switch (op.kind) {
        case OpKind::kForward:
        case OpKind::kBackward:
        case OpKind::kOptimizerStep: {
          const double d = costs_.ComputeS(device, op);
          r.compute_busy += d;
          Push(now + d, rank, i);
          break;
        }
        case OpKind::kParamPrefetch:
        case OpKind::kParamOffload:
        case OpKind::kActPrefetch:
        case OpKind::kActOffload: {
          HostLink& link = LinkOf(rank, op);
          link.Advance(now);
          link.flows.push_back({i, costs_.CopyS(device, op.bytes)});
          Reschedule(rank, link, now);
          break;
        }
        case OpKind::kSend: {
          const double arrival = now + costs_.TransferS(device, device_of_rank_[op.peer], op.bytes);
          const SendKey key{rank, op.peer, op.tag};
          arrivals_[key] = arrival;
          Push(arrival, rank, i);
          if (auto w = waiting_recvs_.find(key); w != waiting_recvs_.end()) {
            const auto [peer, recv] = w->second;
            Push(std::max(arrival, ranks_[peer].ops[recv].start), peer, recv);
            waiting_recvs_.erase(w);
          }
          ++r.head[s];  // non-blocking: the stream moves on
          break;
        }
        case OpKind::kRecv: {
          // A receive holds the comm lane until its data arrives. (The runtime posts receives and
          // moves on; posting them off the lane here lets the lane run ahead of the CPU runtime's
          // program order and count receive buffers earlier than it allocates them — tried in
          // session 12 and kept as is.)
          const SendKey key{op.peer, rank, op.tag};
          if (auto a = arrivals_.find(key); a != arrivals_.end()) {
            Push(std::max(now, a->second), rank, i);
          } else {
            waiting_recvs_[key] = {rank, i};
          }
          break;
        }
        case OpKind::kAllGather:
        case OpKind::kReduceScatter:
        case OpKind::kAllReduce:
        case OpKind::kGradNorm: {
          const Collective& c = s_.collectives[op.collective];
          // Everyone starts when the last member arrives (each member has exactly one op naming it).
          if (c.ranks.size() == 1) {
            Finish(rank, i, now);
            ++finished_at_once_;
            break;
          }
          auto& arrived = collective_arrivals_[op.collective];
          arrived.push_back({rank, i});
          if (arrived.size() == c.ranks.size()) {
            std::vector<int> devices;
            for (int m : c.ranks) devices.push_back(device_of_rank_[m]);
            const double end = now + c.calls * costs_.CollectiveS(c.kind, devices, c.bytes / c.calls);
            for (const auto& [m, j] : arrived) Push(end, m, j);
          }
          break;
        }
      }
    }
  }
}

void Simulator::Finish(int rank, int i, double time) {
  RankState& r = ranks_[rank];
  const Op& op = s_.programs[rank].ops[i];
  OpState& st = r.ops[i];
  st.finished = true;
  st.end = time;
  r.memory -= op.device_free_bytes;
  r.host -= op.host_free_bytes;
  if (op.stream == Stream::kComm) r.comm_busy += time - st.start;
  if (IsHostCopy(op.kind)) {
    HostLink& link = LinkOf(rank, op);
    link.Advance(time);
    std::erase_if(link.flows, [i](const HostLink::Flow& f) { return f.op == i; });
    Reschedule(rank, link, time);
  }
  const int s = LaneOf(op);
  if (op.kind != OpKind::kSend) {
    MOTLEY_CHECK_EQ(r.queue[s][r.head[s]], i);
    ++r.head[s];
  }
}

Result<SimResult> Simulator::Run() {
  const int n = static_cast<int>(s_.programs.size());
  ranks_.resize(n);
  collective_arrivals_.assign(s_.collectives.size(), {});
  for (int rank = 0; rank < n; ++rank) {
    const Program& p = s_.programs[rank];
    device_of_rank_.push_back(p.device);
    RankState& r = ranks_[rank];
    r.ops.resize(p.ops.size());
    for (size_t i = 0; i < p.ops.size(); ++i)
      r.queue[LaneOf(p.ops[i])].push_back(static_cast<int>(i));
    r.memory = r.peak_memory = p.static_device_bytes;
    r.host = r.peak_host = p.static_host_bytes;
  }
  for (int rank = 0; rank < n; ++rank) TryStart(rank, 0);
  SimResult result;
  while (!events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    if (e.generation != ranks_[e.rank].ops[e.op].generation) continue;  // a copy's link share changed since
    ++result.num_events;
    Finish(e.rank, e.op, e.time);
    result.step_time_s = std::max(result.step_time_s, e.time);
    TryStart(e.rank, e.time);
  }
  result.num_events += finished_at_once_;

  // Every op must have finished; otherwise say where each rank is stuck.
  std::string stuck;
  for (int rank = 0; rank < n; ++rank) {
    const RankState& r = ranks_[rank];
    for (int s = 0; s < kNumLanes; ++s) {
      if (r.head[s] >= r.queue[s].size()) continue;
      const int i = r.queue[s][r.head[s]];
      const Op& op = s_.programs[rank].ops[i];
      stuck += fmt::format("\n  rank {} {} stream waits at op {} ({}{})", rank, LaneName(s), i,
                           OpKindName(op.kind), op.peer >= 0 ? fmt::format(" with rank {}", op.peer) : "");
      break;
    }
  }
  if (!stuck.empty()) return Status::Internal("the schedule cannot finish (deadlock):" + stuck);

  double peak_flops = 0;
  for (int rank = 0; rank < n; ++rank) {
    const RankState& r = ranks_[rank];
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
    d.capacity_bytes = cluster_.memory_bytes(device);
    d.out_of_memory = r.peak_memory > d.capacity_bytes;
    d.peak_host_bytes = r.peak_host;
    d.end_memory_bytes = r.memory;
    d.end_host_bytes = r.host;
    if (d.out_of_memory) {
      result.fits_memory = false;
      result.oom_message += fmt::format("{}device {} ({}, rank {}) needs {} of {}",
                                        result.oom_message.empty() ? "" : "; ", device, d.device_type, rank,
                                        FormatBytes(d.peak_memory_bytes), FormatBytes(d.capacity_bytes));
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
