#include "plan/transfer_order.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace motley {
namespace {

bool IsTransfer(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv; }

std::string Describe(const Schedule& s, int r, int i) {
  const Op& op = s.programs[r].ops[i];
  if (op.kind == OpKind::kSend) return fmt::format("op {} (send to rank {}, tag {})", i, op.peer, op.tag);
  if (op.kind == OpKind::kRecv)
    return fmt::format("op {} (receive from rank {}, tag {})", i, op.peer, op.tag);
  if (IsCollective(op.kind)) return fmt::format("op {} ({} #{})", i, OpKindName(op.kind), op.collective);
  return fmt::format("op {} ({})", i, OpKindName(op.kind));
}

// One rank's program sorted onto the streams it runs on under NCCL.
struct RankQueues {
  std::vector<int> queue_of;                  // op -> queue
  std::vector<std::vector<int>> queues;       // queue -> ops, in program order; queue 0 = compute
  std::vector<size_t> head;                   // queue -> next op
  std::vector<int> compute_before;            // op -> compute-queue ops before it in program order
  std::vector<bool> waits_for_compute;        // op -> its stream first waits for the compute stream
  std::vector<int> partner_rank, partner_op;  // send/recv -> the op it meets
  std::vector<bool> started, done;
};

// The check's state: each rank's queues, and the collectives' members and progress.
struct TransferCheck {
  const Schedule& s;
  int num_ranks = 0;
  std::vector<RankQueues> q;
  // Collectives: their group's communicator, by member set.
  std::map<std::vector<int32_t>, int> group_of_members;
  // (rank, collective) -> op; collective -> members that have started it.
  std::vector<std::map<int, int>> collective_op;
  std::vector<int> collective_started;
};

void SortOntoStreams(TransferCheck& c) {
  const Schedule& s = c.s;
  const int num_ranks = c.num_ranks;
  auto& q = c.q;
  auto& group_of_members = c.group_of_members;
  auto& collective_op = c.collective_op;
  // Sort each rank's ops onto streams: compute (with the tensor-parallel all-reduces, which run
  // inside the compute ops, and a group of one's collectives, which are local copies), one per
  // peer for send/recv, one per group for collectives, one per copy direction and lane.
  for (int r = 0; r < num_ranks; ++r) {
    const auto& ops = s.programs[r].ops;
    RankQueues& rq = q[r];
    const size_t n = ops.size();
    rq.queue_of.assign(n, 0);
    rq.compute_before.assign(n, 0);
    rq.waits_for_compute.assign(n, false);
    rq.partner_rank.assign(n, -1);
    rq.partner_op.assign(n, -1);
    rq.started.assign(n, false);
    rq.done.assign(n, false);
    rq.queues.assign(1, {});
    std::map<std::pair<int, int>, int> queue_ids;  // (kind, id) -> queue
    auto queue = [&](int kind, int id) {
      auto [it, inserted] = queue_ids.try_emplace({kind, id}, static_cast<int>(rq.queues.size()));
      if (inserted) rq.queues.emplace_back();
      return it->second;
    };
    int compute_ops = 0;
    for (size_t i = 0; i < n; ++i) {
      const Op& op = ops[i];
      rq.compute_before[i] = compute_ops;
      int queue_index = 0;
      if (IsTransfer(op.kind)) {
        queue_index = queue(op.kind == OpKind::kSend ? 1 : 4, op.peer);
        rq.waits_for_compute[i] = true;
      } else if (IsCollective(op.kind)) {
        const Collective& c = s.collectives.at(op.collective);
        collective_op[op.collective][r] = static_cast<int>(i);
        if (!c.tensor_parallel && c.ranks.size() > 1) {
          std::vector<int32_t> members = c.ranks;
          std::sort(members.begin(), members.end());
          auto [it, inserted] =
              group_of_members.try_emplace(members, static_cast<int>(group_of_members.size()));
          queue_index = queue(2, it->second);
          rq.waits_for_compute[i] = true;
        }
      } else if (IsHostCopy(op.kind)) {
        queue_index = queue(3, LaneOf(op));
        rq.waits_for_compute[i] = op.stream == Stream::kD2H;
      }
      rq.queue_of[i] = queue_index;
      rq.queues[queue_index].push_back(static_cast<int>(i));
      if (queue_index == 0) ++compute_ops;
    }
    rq.head.assign(rq.queues.size(), 0);
  }
}

// Point to point, by order: a's k-th send to b meets b's k-th receive from a. "" when every
// transfer meets its partner, else why not.
std::string MatchTransfers(TransferCheck& c) {
  const Schedule& s = c.s;
  const int num_ranks = c.num_ranks;
  auto& q = c.q;
  for (int a = 0; a < num_ranks; ++a) {
    std::map<int, std::vector<int>> sends;  // peer -> ops
    for (size_t i = 0; i < s.programs[a].ops.size(); ++i)
      if (s.programs[a].ops[i].kind == OpKind::kSend)
        sends[s.programs[a].ops[i].peer].push_back(static_cast<int>(i));
    for (const auto& [b, send_ops] : sends) {
      std::vector<int> recv_ops;
      for (size_t j = 0; j < s.programs[b].ops.size(); ++j)
        if (s.programs[b].ops[j].kind == OpKind::kRecv && s.programs[b].ops[j].peer == a)
          recv_ops.push_back(static_cast<int>(j));
      for (size_t k = 0; k < send_ops.size(); ++k) {
        if (k >= recv_ops.size())
          return fmt::format("rank {} sends {} times to rank {}, which receives from it {} times", a,
                             send_ops.size(), b, recv_ops.size());
        const Op& send = s.programs[a].ops[send_ops[k]];
        const Op& recv = s.programs[b].ops[recv_ops[k]];
        if (send.tag != recv.tag || send.bytes != recv.bytes)
          return fmt::format(
              "matched in order, rank {}'s send #{} to rank {} ({}) would meet rank {}'s receive #{} from it "
              "({}): "
              "the two ranks order their transfers differently",
              a, k + 1, b, Describe(s, a, send_ops[k]), b, k + 1, Describe(s, b, recv_ops[k]));
        q[a].partner_rank[send_ops[k]] = b;
        q[a].partner_op[send_ops[k]] = recv_ops[k];
        q[b].partner_rank[recv_ops[k]] = a;
        q[b].partner_op[recv_ops[k]] = send_ops[k];
      }
    }
  }
  for (int r = 0; r < num_ranks; ++r)
    for (size_t i = 0; i < s.programs[r].ops.size(); ++i)
      if (s.programs[r].ops[i].kind == OpKind::kRecv && q[r].partner_op[i] < 0)
        return fmt::format("rank {}'s {} has no matching send", r, Describe(s, r, static_cast<int>(i)));

  return "";
}

std::string MatchCollectives(const TransferCheck& c) {
  const Schedule& s = c.s;
  const int num_ranks = c.num_ranks;
  const auto& q = c.q;
  const auto& collective_op = c.collective_op;
  // Matching of collectives: each group's members issue its collectives in the same order.
  for (int r = 0; r < num_ranks; ++r) {
    for (size_t qi = 1; qi < q[r].queues.size(); ++qi) {
      const auto& ops = q[r].queues[qi];
      if (ops.empty() || !IsCollective(s.programs[r].ops[ops[0]].kind)) continue;
      std::vector<int> order;
      for (int i : ops) order.push_back(s.programs[r].ops[i].collective);
      for (int member : s.collectives[order[0]].ranks) {
        if (member == r) continue;
        const RankQueues& mq = q[member];
        const auto& mine = mq.queues[mq.queue_of[collective_op[order[0]].at(member)]];
        for (size_t k = 0; k < order.size() && k < mine.size(); ++k) {
          const int theirs = s.programs[member].ops[mine[k]].collective;
          if (theirs != order[k])
            return fmt::format(
                "matched in order, rank {}'s collective #{} over its group ({}) would meet rank {}'s {}: the "
                "members order the group's collectives differently",
                r, k + 1, Describe(s, r, ops[k]), member, Describe(s, member, mine[k]));
        }
      }
    }
  }

  return "";
}

void Replay(TransferCheck& c) {
  const Schedule& s = c.s;
  const int num_ranks = c.num_ranks;
  auto& q = c.q;
  auto& collective_op = c.collective_op;
  auto& collective_started = c.collective_started;
  // Replay: every op takes no time; an op starts when its dependencies are done, the op before it
  // on its stream is done and (for a communication) the compute queued before it is done. A rank
  // is looked at again whenever one of its ops finishes.
  std::deque<int> visit;
  std::vector<bool> to_visit(num_ranks, true);
  for (int r = 0; r < num_ranks; ++r) visit.push_back(r);
  auto finish = [&](int r, int i) {
    q[r].done[i] = true;
    ++q[r].head[q[r].queue_of[i]];
    if (!to_visit[r]) {
      to_visit[r] = true;
      visit.push_back(r);
    }
  };
  auto can_start = [&](int r, int i) {
    const RankQueues& rq = q[r];
    for (int d : s.programs[r].ops[i].deps)
      if (!rq.done[d]) return false;
    return !rq.waits_for_compute[i] || static_cast<int>(rq.head[0]) >= rq.compute_before[i];
  };
  while (!visit.empty()) {
    const int r = visit.front();
    visit.pop_front();
    to_visit[r] = false;
    RankQueues& rq = q[r];
    for (size_t qi = 0; qi < rq.queues.size(); ++qi) {
      while (rq.head[qi] < rq.queues[qi].size()) {
        const int i = rq.queues[qi][rq.head[qi]];
        if (rq.started[i] || !can_start(r, i)) break;
        rq.started[i] = true;
        const Op& op = s.programs[r].ops[i];
        if (IsTransfer(op.kind)) {
          const int pr = rq.partner_rank[i], pi = rq.partner_op[i];
          if (q[pr].started[pi]) {
            finish(r, i);
            finish(pr, pi);
          }
        } else if (IsCollective(op.kind) && s.collectives[op.collective].ranks.size() > 1) {
          const Collective& c = s.collectives[op.collective];
          if (++collective_started[op.collective] == static_cast<int>(c.ranks.size()))
            for (int member : c.ranks) finish(member, collective_op[op.collective].at(member));
        } else {
          finish(r, i);
        }
      }
    }
  }
}

// The ranks whose programs did not finish (the first four: their first op left, and what holds it).
std::string DescribeStuck(const TransferCheck& c) {
  const Schedule& s = c.s;
  const int num_ranks = c.num_ranks;
  const auto& q = c.q;
  std::string stuck;
  int stuck_ranks = 0;
  for (int r = 0; r < num_ranks; ++r) {
    const RankQueues& rq = q[r];
    for (size_t i = 0; i < rq.done.size(); ++i) {
      if (rq.done[i]) continue;
      if (++stuck_ranks <= 4) {
        // The first op this rank cannot finish, and what holds it.
        std::string why;
        if (rq.started[i]) {
          why = IsTransfer(s.programs[r].ops[i].kind) ? fmt::format("waits for rank {}", rq.partner_rank[i])
                                                      : "waits for the group";
        } else {
          const int qi = rq.queue_of[i];
          const int before = rq.queues[qi][rq.head[qi]];
          why = before != static_cast<int>(i) ? fmt::format("queued behind {}", Describe(s, r, before))
                                              : "waits for ops it depends on or the compute before it";
        }
        stuck += fmt::format("\n  rank {}: {} {}", r, Describe(s, r, static_cast<int>(i)), why);
      }
      break;
    }
  }
  if (stuck_ranks == 0) return "";
  return fmt::format("matched in order, {} ranks would wait for each other forever:{}", stuck_ranks, stuck);
}

}  // namespace

std::string CheckTransferOrder(const Schedule& s) {
  TransferCheck c{s, static_cast<int>(s.programs.size()), {}, {}, {}, {}};
  c.q.resize(c.num_ranks);
  c.collective_op.resize(s.collectives.size());
  c.collective_started.assign(s.collectives.size(), 0);
  SortOntoStreams(c);
  if (std::string why = MatchTransfers(c); !why.empty()) return why;
  if (std::string why = MatchCollectives(c); !why.empty()) return why;
  Replay(c);
  return DescribeStuck(c);
}

}  // namespace motley
