#include "plan/schedule.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>

#include "core/units.h"

namespace motley {

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kGradNorm:
      return "grad_norm";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kParamOffload:
      return "param_offload";
    case OpKind::kParamPrefetch:
      return "param_prefetch";
    case OpKind::kActOffload:
      return "act_offload";
    case OpKind::kActPrefetch:
      return "act_prefetch";
    case OpKind::kOptimizerStep:
      return "optimizer_step";
    case OpKind::kOuterReduce:
      return "outer_reduce";
    case OpKind::kOuterStep:
      return "outer_step";
  }
  return "?";
}

OpKind TrafficKind(const Collective& c) {
  if (c.kind != OpKind::kOuterReduce) return c.kind;
  return c.gathers ? OpKind::kAllGather : OpKind::kAllReduce;
}

std::string_view BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kParams:
      return "params";
    case BufferKind::kShard:
      return "shard";
    case BufferKind::kMoments:
      return "moments";
    case BufferKind::kGrads:
      return "grads";
    case BufferKind::kGradShard:
      return "grad_shard";
    case BufferKind::kInput:
      return "input";
    case BufferKind::kOutputGrad:
      return "output_grad";
    case BufferKind::kSaved:
      return "saved";
    case BufferKind::kHostSaved:
      return "host_saved";
  }
  return "?";
}

std::string BufferName(const Buffer& b) {
  if (b.microbatch >= 0)
    return fmt::format("{}(ms{}, mb{})", BufferKindName(b.kind), b.ministage, b.microbatch);
  return fmt::format("{}(ms{})", BufferKindName(b.kind), b.ministage);
}

std::string_view StreamName(Stream s) {
  switch (s) {
    case Stream::kCompute:
      return "compute";
    case Stream::kComm:
      return "comm";
    case Stream::kH2D:
      return "h2d";
    case Stream::kD2H:
      return "d2h";
  }
  return "?";
}

int LaneOf(const Op& op) {
  if (op.kind == OpKind::kActPrefetch || op.kind == OpKind::kActOffload)
    return kNumStreams + (op.stream == Stream::kH2D ? 0 : 1);
  return static_cast<int>(op.stream);
}

std::string_view LaneName(int lane) {
  if (lane == kNumStreams) return "h2d activations";
  if (lane == kNumStreams + 1) return "d2h activations";
  return StreamName(static_cast<Stream>(lane));
}

size_t Schedule::num_ops() const {
  size_t n = 0;
  for (const auto& p : programs) n += p.ops.size();
  return n;
}

std::string CheckSchedule(const Schedule& s) {
  // (from, to, tag) -> bytes, for sends and recvs.
  std::map<std::tuple<int, int, int64_t>, double> sends, recvs;
  std::vector<std::map<int, int>> members(s.collectives.size());  // collective -> rank -> ops
  for (const auto& p : s.programs) {
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      for (int32_t d : op.deps)
        if (d < 0 || d >= static_cast<int32_t>(i))
          return fmt::format("rank {} op {} ({}) depends on op {}, which does not come before it", p.rank, i,
                             OpKindName(op.kind), d);
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
        if (op.peer < 0 || op.peer >= static_cast<int>(s.programs.size()) || op.peer == p.rank)
          return fmt::format("rank {} op {} ({}) has peer {}", p.rank, i, OpKindName(op.kind), op.peer);
        auto key = op.kind == OpKind::kSend ? std::make_tuple(p.rank, op.peer, op.tag)
                                            : std::make_tuple(op.peer, p.rank, op.tag);
        auto& table = op.kind == OpKind::kSend ? sends : recvs;
        if (!table.emplace(key, op.bytes).second)
          return fmt::format("rank {} op {}: a second {} with tag {} between ranks {} and {}", p.rank, i,
                             OpKindName(op.kind), op.tag, std::get<0>(key), std::get<1>(key));
      }
      if (IsCollective(op.kind)) {
        if (op.collective < 0 || op.collective >= static_cast<int>(s.collectives.size()))
          return fmt::format("rank {} op {} ({}) names no collective", p.rank, i, OpKindName(op.kind));
        if (s.collectives[op.collective].kind != op.kind)
          return fmt::format("rank {} op {} is a {} but collective {} is a {}", p.rank, i,
                             OpKindName(op.kind), op.collective,
                             OpKindName(s.collectives[op.collective].kind));
        ++members[op.collective][p.rank];
      }
    }
  }
  for (const auto& [key, bytes] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end())
      return fmt::format("send from rank {} to rank {} with tag {} has no matching recv", std::get<0>(key),
                         std::get<1>(key), std::get<2>(key));
    if (it->second != bytes)
      return fmt::format("send from rank {} to rank {} with tag {} sends {} bytes but the recv expects {}",
                         std::get<0>(key), std::get<1>(key), std::get<2>(key), bytes, it->second);
  }
  if (recvs.size() != sends.size()) {
    for (const auto& [key, bytes] : recvs)
      if (!sends.count(key))
        return fmt::format("recv on rank {} from rank {} with tag {} has no matching send", std::get<1>(key),
                           std::get<0>(key), std::get<2>(key));
  }
  for (size_t c = 0; c < s.collectives.size(); ++c) {
    for (int32_t r : s.collectives[c].ranks)
      if (members[c][r] != 1)
        return fmt::format("collective {} ({}) has {} ops on member rank {}", c,
                           OpKindName(s.collectives[c].kind), members[c][r], r);
    if (members[c].size() != s.collectives[c].ranks.size())
      return fmt::format("collective {} has ops on ranks that are not its members", c);
  }
  return "";
}

namespace {

// FNV-1a (64 bits) over a schedule's fields as they lie, each prefixed by its kind: no text made
// (a schedule of 128 ranks holds ~750k ops; its JSON took 2 GB and most of `motley simulate`).
// Fields go in one 64-bit word at a time (FNV's step on words rather than bytes).
class Fingerprint {
 public:
  template <typename T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void Add(T v) {
    uint64_t word = 0;
    static_assert(sizeof(T) <= sizeof(word));
    std::memcpy(&word, &v, sizeof(T));
    Word(word);
  }
  void Add(std::string_view text) {
    Add(text.size());
    for (size_t at = 0; at < text.size(); at += 8) {
      uint64_t word = 0;
      std::memcpy(&word, text.data() + at, std::min<size_t>(8, text.size() - at));
      Word(word);
    }
  }
  template <typename... T>
  void AddEach(const T&... values) {
    (Add(values), ...);
  }
  template <typename Range>
  void AddAll(const Range& values) {
    Add(static_cast<uint64_t>(std::size(values)));
    for (const auto& v : values) Add(v);
  }
  void Add(const Buffer& b) { AddEach(b.kind, b.ministage, b.microbatch); }
  uint64_t value() const { return h_; }

 private:
  void Word(uint64_t w) {
    h_ ^= w;
    h_ *= 1099511628211ull;
    h_ ^= h_ >> 29;  // (a word's high bytes reach the low ones)
  }
  uint64_t h_ = 14695981039346656037ull;
};

void AddOp(Fingerprint& f, const Op& op) {
  f.AddEach(op.kind, op.stream, op.ministage, op.layer_begin, op.layer_end, op.embedding, op.head,
            op.gradients_complete, op.microbatch, op.sequences, op.tp_degree, op.flops, op.bytes, op.peer,
            op.collective, op.tag, op.params, op.device_alloc_bytes, op.device_free_bytes,
            op.host_alloc_bytes, op.host_free_bytes);
  f.AddAll(op.deps);
  f.AddAll(op.reads);
  f.AddAll(op.writes);
  f.AddAll(op.frees);
}

}  // namespace

std::string ScheduleHash(const Schedule& s) {
  Fingerprint f;
  f.AddEach(s.seq_len, s.global_batch_tokens);
  f.AddAll(s.microbatch_sequences);
  f.Add(s.ministages.size());
  for (const ScheduleMinistage& m : s.ministages) {
    f.AddEach(m.group, m.index, m.layer_begin, m.layer_end, m.embedding, m.head, m.first_rank, m.num_ranks,
              m.tp_degree);
    f.AddAll(m.state_shares);
  }
  f.AddEach(s.sharded_optimizer, s.sharded_params, s.activation_checkpointing, s.loss_scaling,
            s.model_flops_per_step, s.hardware_flops_per_step);
  f.Add(std::string_view(s.flextp_mode));
  if (s.outer_overlap_steps != 0) f.Add(s.outer_overlap_steps);  // (older schedules' hashes unchanged)
  if (s.outer_fragments != 1) f.AddEach(s.outer_fragments, s.outer_fragment);
  f.Add(s.programs.size());
  for (const Program& p : s.programs) {
    f.AddEach(p.rank, p.device, p.group, p.tp_index, p.dp_index, p.dp_size, p.static_device_bytes,
              p.static_host_bytes);
    f.AddAll(p.resident);
    f.Add(p.ops.size());
    for (const Op& op : p.ops) AddOp(f, op);
  }
  f.Add(s.collectives.size());
  for (const Collective& c : s.collectives) {
    f.AddEach(c.kind, c.bytes, c.tensor_parallel, c.calls, c.uneven_factor, c.tied_embedding, c.gathers);
    f.AddAll(c.ranks);
  }
  return fmt::format("{:016x}", f.value());
}

std::string SchedulesHash(const std::vector<Schedule>& schedules) {
  if (schedules.size() == 1) return ScheduleHash(schedules[0]);
  Fingerprint f;
  f.Add(schedules.size());
  for (const Schedule& s : schedules) f.Add(std::string_view(ScheduleHash(s)));
  return fmt::format("{:016x}", f.value());
}

namespace {

template <typename Range>
nlohmann::json BuffersToJson(const Range& buffers) {
  nlohmann::json out = nlohmann::json::array();
  for (const Buffer& b : buffers) out.push_back(BufferName(b));
  return out;
}

}  // namespace

nlohmann::json ScheduleToJson(const Schedule& s) {
  nlohmann::json programs = nlohmann::json::array();
  for (const auto& p : s.programs) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : p.ops) {
      nlohmann::json o = {{"kind", OpKindName(op.kind)}, {"stream", StreamName(op.stream)}};
      if (op.ministage >= 0) o["ministage"] = op.ministage;
      if (op.layer_end > op.layer_begin) o["layers"] = {op.layer_begin, op.layer_end};
      if (op.embedding) o["embedding"] = true;
      if (op.head) o["head"] = true;
      if (op.microbatch >= 0) o["microbatch"] = op.microbatch;
      if (op.sequences > 0) o["sequences"] = op.sequences;
      if (op.tp_degree > 1) o["tp_degree"] = op.tp_degree;
      if (op.flops > 0) o["flops"] = op.flops;
      if (op.bytes > 0) o["bytes"] = op.bytes;
      if (op.peer >= 0) o["peer"] = op.peer;
      if (op.collective >= 0) o["collective"] = op.collective;
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) o["tag"] = op.tag;
      if (!op.deps.empty()) o["deps"] = std::vector<int32_t>(op.deps.begin(), op.deps.end());
      if (op.device_alloc_bytes > 0) o["device_alloc_bytes"] = op.device_alloc_bytes;
      if (op.device_free_bytes > 0) o["device_free_bytes"] = op.device_free_bytes;
      if (op.host_alloc_bytes > 0) o["host_alloc_bytes"] = op.host_alloc_bytes;
      if (op.host_free_bytes > 0) o["host_free_bytes"] = op.host_free_bytes;
      if (op.params > 0) o["params"] = op.params;
      if (!op.reads.empty()) o["reads"] = BuffersToJson(op.reads);
      if (!op.writes.empty()) o["writes"] = BuffersToJson(op.writes);
      if (!op.frees.empty()) o["frees"] = BuffersToJson(op.frees);
      if (op.gradients_complete) o["gradients_complete"] = true;
      ops.push_back(std::move(o));
    }
    programs.push_back({{"rank", p.rank},
                        {"device", p.device},
                        {"group", p.group},
                        {"tp_index", p.tp_index},
                        {"dp_index", p.dp_index},
                        {"dp_size", p.dp_size},
                        {"static_device_bytes", p.static_device_bytes},
                        {"static_host_bytes", p.static_host_bytes},
                        {"resident", BuffersToJson(p.resident)},
                        {"ops", std::move(ops)}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const auto& c : s.collectives) {
    nlohmann::json j = {{"kind", OpKindName(c.kind)}, {"ranks", c.ranks}, {"bytes", c.bytes}};
    if (c.tensor_parallel) j["tensor_parallel"] = true;
    if (c.calls != 1) j["calls"] = c.calls;
    if (c.uneven_factor != 1) j["uneven_factor"] = c.uneven_factor;
    if (c.tied_embedding) j["tied_embedding"] = true;
    if (c.gathers) j["gathers"] = true;
    collectives.push_back(std::move(j));
  }
  nlohmann::json ministages = nlohmann::json::array();
  for (const auto& m : s.ministages) {
    ministages.push_back({{"group", m.group},
                          {"index", m.index},
                          {"layers", {m.layer_begin, m.layer_end}},
                          {"embedding", m.embedding},
                          {"head", m.head},
                          {"ranks", {m.first_rank, m.first_rank + m.num_ranks}},
                          {"tp_degree", m.tp_degree}});
    if (!m.state_shares.empty()) ministages.back()["state_shares"] = m.state_shares;
  }
  nlohmann::json out = {{"seq_len", s.seq_len},
                        {"global_batch_tokens", s.global_batch_tokens},
                        {"microbatch_sequences", s.microbatch_sequences},
                        {"ministages", std::move(ministages)},
                        {"sharded_optimizer", s.sharded_optimizer},
                        {"sharded_params", s.sharded_params},
                        {"activation_checkpointing", s.activation_checkpointing},
                        {"model_flops_per_step", s.model_flops_per_step},
                        {"hardware_flops_per_step", s.hardware_flops_per_step},
                        {"programs", std::move(programs)},
                        {"collectives", std::move(collectives)}};
  if (s.flextp_mode != "off") out["flextp_mode"] = s.flextp_mode;  // (older schedules' hashes unchanged)
  if (s.outer_overlap_steps != 0) out["outer_overlap_steps"] = s.outer_overlap_steps;
  if (s.outer_fragments != 1) {
    out["outer_fragments"] = s.outer_fragments;
    out["outer_fragment"] = s.outer_fragment;
  }
  return out;
}

std::string ScheduleListing(const Schedule& s) {
  std::string out;
  for (const auto& p : s.programs) {
    out += fmt::format("rank {} (device {}): {} ops; static {} on device, {} on host\n", p.rank, p.device,
                       p.ops.size(), FormatBytes(p.static_device_bytes), FormatBytes(p.static_host_bytes));
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      std::string what;
      if (op.ministage >= 0) what += fmt::format(" ms{}", s.ministages.at(op.ministage).index);
      if (op.layer_end > op.layer_begin) what += fmt::format(" L{}-{}", op.layer_begin, op.layer_end - 1);
      if (op.embedding) what += " +emb";
      if (op.head) what += " +head";
      if (op.microbatch >= 0) what += fmt::format(" mb{}", op.microbatch);
      if (op.sequences > 0) what += fmt::format(" x{}", op.sequences);
      if (op.tp_degree > 1) what += fmt::format(" /tp{}", op.tp_degree);
      if (op.peer >= 0) what += fmt::format(" {} rank {}", op.kind == OpKind::kSend ? "to" : "from", op.peer);
      if (op.collective >= 0)
        what += fmt::format(" over {} ranks{}", s.collectives[op.collective].ranks.size(),
                            s.collectives[op.collective].tied_embedding ? " (tied embedding)" : "");
      if (op.flops > 0) what += fmt::format(" {:.3g} FLOP", op.flops);
      if (op.bytes > 0) what += " " + FormatBytes(op.bytes);
      std::string deps;
      for (int32_t d : op.deps) deps += (deps.empty() ? " after " : ",") + std::to_string(d);
      out += fmt::format("  {:>4}  {:<7} {:<14}{}{}\n", i, StreamName(op.stream), OpKindName(op.kind), what,
                         deps);
    }
  }
  return out;
}

}  // namespace motley
