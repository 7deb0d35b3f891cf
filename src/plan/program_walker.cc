#include "plan/program_walker.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {
namespace {

bool Contains(const Buffers& buffers, const Buffer& b) {
  return std::find(buffers.begin(), buffers.end(), b) != buffers.end();
}
bool Overlaps(const Buffers& a, const Buffers& b) {
  return std::any_of(a.begin(), a.end(), [&](const Buffer& x) { return Contains(b, x); });
}

}  // namespace

Status ProgramWalker::Run() {
  Begin();
  for (int i = 0; i < static_cast<int>(program_.ops.size()); ++i) MOTLEY_RETURN_IF_ERROR(Step(i));
  return End();
}

void ProgramWalker::Begin() {
  held_.clear();
  if (check_buffers_) held_.insert(program_.resident.begin(), program_.resident.end());
  in_flight_.clear();
  queued_.clear();
  running_collective_ = -1;
}

Status ProgramWalker::End() {
  while (!in_flight_.empty()) MOTLEY_RETURN_IF_ERROR(FinishOp(*in_flight_.begin()));
  MOTLEY_CHECK(queued_.empty() && running_collective_ < 0);
  if (!check_buffers_) return Status::Ok();
  const std::set<Buffer> resident(program_.resident.begin(), program_.resident.end());
  if (held_ != resident) {
    std::string diff;
    for (const Buffer& b : held_)
      if (!resident.count(b)) diff += fmt::format(" {} left over;", BufferName(b));
    for (const Buffer& b : resident)
      if (!held_.count(b)) diff += fmt::format(" {} missing;", BufferName(b));
    return Status::Internal(
        fmt::format("rank {}: the step ended without its resident state:{}", program_.rank, diff));
  }
  return Status::Ok();
}

std::vector<int> ProgramWalker::Blockers(int i) const {
  const Op& op = program_.ops[i];
  std::vector<int> blockers;
  for (int j : in_flight_) {  // in program order (a std::set)
    const Op& other = program_.ops[j];
    const bool dep = std::find(op.deps.begin(), op.deps.end(), j) != op.deps.end();
    // Read after write, write after read or write, free after use.
    const bool conflict = Overlaps(other.writes, op.reads) || Overlaps(other.writes, op.writes) ||
                          Overlaps(other.frees, op.reads) || Overlaps(other.frees, op.writes) ||
                          Overlaps(other.reads, op.writes) || Overlaps(other.reads, op.frees);
    if (dep || conflict) blockers.push_back(j);
  }
  return blockers;
}

bool ProgramWalker::Queues(int i) const {
  const Op& op = program_.ops[i];
  return IsCollective(op.kind) &&
         !(collectives_ != nullptr && (*collectives_)[op.collective].tensor_parallel);
}

Status ProgramWalker::Poll(bool may_block) {
  std::vector<int> done;
  for (int j : in_flight_)
    if (std::find(queued_.begin(), queued_.end(), j) == queued_.end() && runner_->Done(j)) done.push_back(j);
  for (int j : done) MOTLEY_RETURN_IF_ERROR(FinishOp(j, may_block));
  return StartQueued(may_block);
}

Status ProgramWalker::Step(int i) {
  const Op& op = program_.ops[i];
  MOTLEY_RETURN_IF_ERROR(runner_->BeforeOp(i));
  MOTLEY_RETURN_IF_ERROR(Poll());
  for (int j : Blockers(i)) MOTLEY_RETURN_IF_ERROR(FinishOp(j));
  if (check_buffers_) {
    for (const Buffer& b : op.reads)
      if (!held_.count(b) && !Contains(op.writes, b))
        return Status::Internal(fmt::format("rank {} op {} ({}) reads {}, which the rank does not hold",
                                            program_.rank, i, OpKindName(op.kind), BufferName(b)));
    for (const Buffer& b : op.writes) held_.insert(b);
  }
  if (Queues(i) && (running_collective_ >= 0 || !queued_.empty())) {
    in_flight_.insert(i);
    queued_.push_back(i);
    return Status::Ok();
  }
  return StartOp(i);
}

Status ProgramWalker::StartOp(int i) {
  MOTLEY_ASSIGN_OR_RETURN(bool finished, runner_->Start(i));
  if (finished) {
    in_flight_.erase(i);
    return Release(i);
  }
  in_flight_.insert(i);
  if (Queues(i)) running_collective_ = i;
  return Status::Ok();
}

Status ProgramWalker::StartQueued(bool may_block) {
  while (running_collective_ < 0 && !queued_.empty()) {
    if (!may_block && program_.ops[queued_.front()].kind == OpKind::kGradNorm) break;
    const int j = queued_.front();
    queued_.pop_front();
    MOTLEY_RETURN_IF_ERROR(StartOp(j));
  }
  return Status::Ok();
}

Status ProgramWalker::FinishOp(int i, bool may_block) {
  if (!in_flight_.count(i)) return Status::Ok();
  // A queued collective starts once the ones before it have finished.
  while (std::find(queued_.begin(), queued_.end(), i) != queued_.end()) {
    MOTLEY_CHECK(running_collective_ >= 0);
    MOTLEY_RETURN_IF_ERROR(FinishOp(running_collective_));
  }
  if (!in_flight_.count(i)) return Status::Ok();  // it finished as it started
  in_flight_.erase(i);
  if (i == running_collective_) running_collective_ = -1;
  MOTLEY_RETURN_IF_ERROR(runner_->Finish(i));
  MOTLEY_RETURN_IF_ERROR(Release(i));
  return StartQueued(may_block);
}

Status ProgramWalker::Release(int i) {
  const Op& op = program_.ops[i];
  for (const Buffer& b : op.frees) {
    if (check_buffers_ && !held_.erase(b))
      return Status::Internal(fmt::format("rank {} op {} ({}) frees {}, which the rank does not hold",
                                          program_.rank, i, OpKindName(op.kind), BufferName(b)));
    MOTLEY_RETURN_IF_ERROR(runner_->Free(b));
  }
  return Status::Ok();
}

std::string CheckScheduleBuffers(const Schedule& s) {
  struct AtOnce : OpRunner {
    Result<bool> Start(int) override { return true; }
    Status Finish(int) override { return Status::Ok(); }
  } runner;
  for (const Program& p : s.programs) {
    ProgramWalker walker(p, &runner, &s.collectives);
    if (Status st = walker.Run(); !st.ok()) return st.message();
  }
  return "";
}

}  // namespace motley
