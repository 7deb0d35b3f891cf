// Communicator's collectives (communicator.h): all-reduce, all-gather and reduce-scatter (even or
// uneven pieces; Gloo's reduce-scatter as an all-to-all and a local sum), broadcast, reduce and barrier.
#include <fmt/format.h>

#include "core/check.h"
#include "runtime/comm/communicator.h"

namespace motley {

Result<PendingTransfer> Communicator::StartAllReduceSum(CommGroup& g, torch::Tensor& t) {
  MOTLEY_CHECK_GE(g.index, 0);
  if (g.size() == 1) return PendingTransfer();
  return StartBackendAllReduce(g, t);
}

Status Communicator::AllReduceOnBackend(CommGroup& g, torch::Tensor& t) {
  MOTLEY_CHECK_GE(g.index, 0);
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, StartBackendAllReduce(g, t));
  return p.Wait();
}

Result<PendingTransfer> Communicator::StartBackendAllReduce(CommGroup& g, torch::Tensor& t) {
  std::function<void()> back;
  std::vector<torch::Tensor> v = {Stage(g, t, true, &back)};
  const std::string what = fmt::format("all-reduce over {}", g.name);
  MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(g, v[0]));
  try {
    return PendingTransfer(pg->allreduce(v), what, this, back);
  } catch (const std::exception& e) {
    return Failed(what, e);
  }
}

namespace {

// Where each member's piece lies: equal pieces of `each`, or `counts`.
std::vector<int64_t> Offsets(const std::vector<int64_t>& counts, int members, int64_t each) {
  std::vector<int64_t> at(members + 1, 0);
  for (int i = 0; i < members; ++i) at[i + 1] = at[i] + (counts.empty() ? each : counts[i]);
  return at;
}

}  // namespace

Result<PendingTransfer> Communicator::StartAllGather(CommGroup& g, const torch::Tensor& shard,
                                                     torch::Tensor& out, const std::vector<int64_t>& counts) {
  MOTLEY_CHECK_GE(g.index, 0);
  const std::vector<int64_t> offset = Offsets(counts, g.size(), shard.numel());
  MOTLEY_CHECK(counts.empty() || static_cast<int>(counts.size()) == g.size());
  MOTLEY_CHECK_EQ(shard.numel(), offset[g.index + 1] - offset[g.index]);
  MOTLEY_CHECK_EQ(out.numel(), offset.back());
  if (g.size() == 1) {
    if (out.data_ptr() != shard.data_ptr()) out.view(-1).copy_(shard.view(-1));  // else it is the shard
    return PendingTransfer();
  }
  const std::string what = fmt::format("all-gather over {}", g.name);
  std::function<void()> back;
  torch::Tensor into = Stage(g, out, true, &back);
  MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(g, into));
  if (into.is_cuda() && counts.empty()) {  // NCCL gathers equal pieces into one flat buffer
    torch::Tensor in = Stage(g, shard, false, nullptr).contiguous().view(-1), flat = into.view(-1);
    try {
      return PendingTransfer(pg->_allgather_base(flat, in), what, this, back);
    } catch (const std::exception& e) {
      return Failed(what, e);
    }
  }
  // Gloo's allgather gathers into a buffer as large as `out` and copies out of it; a broadcast
  // from each member into its part of `out` gathers in place, with no buffer — and in pieces of
  // any size (uneven state shares, on either backend).
  torch::Tensor flat = into.view(-1);
  torch::Tensor mine = flat.narrow(0, offset[g.index], shard.numel());
  if (mine.data_ptr() != shard.data_ptr()) mine.copy_(shard.reshape(-1));
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    for (int root = 0; root < g.size(); ++root) {
      if (offset[root + 1] == offset[root]) continue;  // an empty piece (every member skips it alike)
      std::vector<torch::Tensor> part = {flat.narrow(0, offset[root], offset[root + 1] - offset[root])};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      works.push_back(pg->broadcast(part, o));
    }
    return PendingTransfer(std::move(works), what, this, back);
  } catch (const std::exception& e) {
    return Failed(what, e);
  }
}

Result<PendingTransfer> Communicator::StartReduceScatterSum(CommGroup& g, const torch::Tensor& in,
                                                            torch::Tensor& out,
                                                            const std::vector<int64_t>& counts) {
  MOTLEY_CHECK_GE(g.index, 0);
  const std::vector<int64_t> offset = Offsets(counts, g.size(), out.numel());
  MOTLEY_CHECK(counts.empty() || static_cast<int>(counts.size()) == g.size());
  MOTLEY_CHECK_EQ(out.numel(), offset[g.index + 1] - offset[g.index]);
  MOTLEY_CHECK_EQ(in.numel(), offset.back());
  if (g.size() == 1) {
    if (out.data_ptr() != in.data_ptr()) out.view(-1).copy_(in.view(-1));
    return PendingTransfer();
  }
  const std::string what = fmt::format("reduce-scatter over {}", g.name);
  std::function<void()> back;
  torch::Tensor staged_in = Stage(g, in, false, nullptr), staged_out = Stage(g, out, true, &back);
  MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(g, staged_in));
  if (staged_in.is_cuda() && counts.empty()) {  // NCCL has a reduce-scatter of its own (equal pieces)
    torch::Tensor send = staged_in.contiguous().view(-1), into = staged_out.view(-1);
    try {
      return PendingTransfer(pg->_reduce_scatter_base(into, send), what, this, back);
    } catch (const std::exception& e) {
      return Failed(what, e);
    }
  }
  // Gloo has no reduce-scatter (nor NCCL one of uneven pieces): all-to-all sends chunk j to member
  // j, then each sums what it got.
  torch::Tensor send = staged_in.contiguous().view(-1);
  const int64_t members = g.size(), mine = out.numel();
  torch::Tensor received = torch::empty({members * mine}, send.options());
  std::vector<int64_t> send_counts = counts, receive_counts;  // empty: equal splits
  if (!counts.empty()) receive_counts.assign(members, mine);
  try {
    return PendingTransfer(pg->alltoall_base(received, send, receive_counts, send_counts), what, this,
                           [received, staged_out, members, back]() mutable {
                             torch::Tensor into = staged_out.view(-1);
                             at::sum_out(into, received.view({members, -1}), {0});  // no temporary
                             if (back) back();
                           });
  } catch (const std::exception& e) {
    return Failed(what, e);
  }
}

Status Communicator::AllReduceSum(CommGroup& g, torch::Tensor& t) {
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, StartAllReduceSum(g, t));
  return p.Wait();
}

Status Communicator::AllGather(CommGroup& g, const torch::Tensor& shard, torch::Tensor& out,
                               const std::vector<int64_t>& counts) {
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, StartAllGather(g, shard, out, counts));
  return p.Wait();
}

Status Communicator::ReduceScatterSum(CommGroup& g, const torch::Tensor& in, torch::Tensor& out,
                                      const std::vector<int64_t>& counts) {
  MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, StartReduceScatterSum(g, in, out, counts));
  return p.Wait();
}

Status Communicator::Broadcast(CommGroup& g, torch::Tensor& t, int root_index) {
  MOTLEY_CHECK_GE(g.index, 0);
  if (g.size() == 1) return Status::Ok();
  std::function<void()> back;
  std::vector<torch::Tensor> v = {Stage(g, t, true, &back)};
  c10d::BroadcastOptions o;
  o.rootRank = root_index;
  MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(g, v[0]));
  MOTLEY_RETURN_IF_ERROR(Run(fmt::format("broadcast over {}", g.name), [&] { return pg->broadcast(v, o); }));
  if (back) back();
  return Status::Ok();
}

Status Communicator::ReduceSum(CommGroup& g, torch::Tensor& t, int root_index) {
  MOTLEY_CHECK_GE(g.index, 0);
  if (g.size() == 1) return Status::Ok();
  std::function<void()> back;
  std::vector<torch::Tensor> v = {Stage(g, t, true, &back)};
  c10d::ReduceOptions o;
  o.rootRank = root_index;
  o.reduceOp = c10d::ReduceOp::SUM;
  MOTLEY_ASSIGN_OR_RETURN(CommBackend * pg, For(g, v[0]));
  MOTLEY_RETURN_IF_ERROR(Run(fmt::format("reduce over {}", g.name), [&] { return pg->reduce(v, o); }));
  if (back) back();
  return Status::Ok();
}

Status Communicator::Barrier(CommGroup& g) {
  MOTLEY_CHECK_GE(g.index, 0);
  if (g.size() == 1) return Status::Ok();
  if (!g.pg) {  // NCCL only: an all-reduce of one number is a barrier
    torch::Tensor one = torch::ones({1});
    return AllReduceSum(g, one);
  }
  return Run(fmt::format("barrier over {}", g.name), [&] { return g.pg->barrier(); });
}

}  // namespace motley
