#include "plan/program_walker.h"

#include <algorithm>
#include <utility>

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

void ProgramWalker::NumberBuffers() {
  ministages_ = 0;
  local_microbatch_.clear();
  microbatch_of_.clear();
  auto number = [&](const Buffer& b) {
    MOTLEY_CHECK(b.ministage >= -1 && b.microbatch >= -1);
    ministages_ = std::max<int32_t>(ministages_, b.ministage + 2);
    const size_t m = static_cast<size_t>(b.microbatch) + 1;
    if (m >= local_microbatch_.size()) local_microbatch_.resize(m + 1, -1);
    if (local_microbatch_[m] < 0) {
      local_microbatch_[m] = static_cast<int32_t>(microbatch_of_.size());
      microbatch_of_.push_back(b.microbatch);
    }
  };
  for (const Buffer& b : program_.resident) number(b);
  for (const Op& op : program_.ops)
    for (const Buffers* list : {&op.reads, &op.writes, &op.frees})
      for (const Buffer& b : *list) number(b);
  held_.assign((static_cast<size_t>(BufferKind::kHostSaved) + 1) * static_cast<size_t>(ministages_) *
                   microbatch_of_.size(),
               0);
  held_count_ = 0;
}

size_t ProgramWalker::Index(const Buffer& b) const {
  return (static_cast<size_t>(b.kind) * static_cast<size_t>(ministages_) +
          static_cast<size_t>(b.ministage + 1)) *
             microbatch_of_.size() +
         static_cast<size_t>(local_microbatch_[static_cast<size_t>(b.microbatch) + 1]);
}

std::vector<Buffer> ProgramWalker::held() const {
  std::vector<Buffer> out;
  const size_t per_kind = static_cast<size_t>(ministages_) * microbatch_of_.size();
  for (size_t i = 0; i < held_.size(); ++i)
    if (held_[i])
      out.push_back({static_cast<BufferKind>(i / per_kind),
                     static_cast<int16_t>(i % per_kind / microbatch_of_.size() - 1),
                     microbatch_of_[i % microbatch_of_.size()]});
  std::sort(out.begin(), out.end());
  return out;
}

void ProgramWalker::Begin() {
  held_.clear();
  held_count_ = 0;
  if (check_buffers_) {
    NumberBuffers();
    for (const Buffer& b : program_.resident)
      if (!std::exchange(held_[Index(b)], 1)) ++held_count_;
  }
  in_flight_.clear();
  queued_.clear();
  running_collective_ = -1;
}

Status ProgramWalker::End() {
  while (!in_flight_.empty()) MOTLEY_RETURN_IF_ERROR(FinishOp(*in_flight_.begin()));
  MOTLEY_CHECK(queued_.empty() && running_collective_ < 0);
  if (!check_buffers_) return Status::Ok();
  std::vector<Buffer> resident(program_.resident.begin(), program_.resident.end());
  std::sort(resident.begin(), resident.end());
  resident.erase(std::unique(resident.begin(), resident.end()), resident.end());
  const bool all_there =
      std::all_of(resident.begin(), resident.end(), [&](const Buffer& b) { return Holds(b); });
  if (!all_there || held_count_ != resident.size()) {
    std::string diff;
    for (const Buffer& b : held())
      if (!std::binary_search(resident.begin(), resident.end(), b))
        diff += fmt::format(" {} left over;", BufferName(b));
    for (const Buffer& b : resident)
      if (!Holds(b)) diff += fmt::format(" {} missing;", BufferName(b));
    return Status::Internal(
        fmt::format("rank {}: the step ended without its resident state:{}", program_.rank, diff));
  }
  return Status::Ok();
}

std::vector<int> ProgramWalker::Blockers(int i) const {
  const Op& op = program_.ops[i];
  std::vector<int> blockers;
  for (int j : in_flight_) {  // in program order (a sorted set)
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
      if (!Holds(b) && !Contains(op.writes, b))
        return Status::Internal(fmt::format("rank {} op {} ({}) reads {}, which the rank does not hold",
                                            program_.rank, i, OpKindName(op.kind), BufferName(b)));
    for (const Buffer& b : op.writes)
      if (!std::exchange(held_[Index(b)], 1)) ++held_count_;
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
    if (check_buffers_ && !std::exchange(held_[Index(b)], 0))
      return Status::Internal(fmt::format("rank {} op {} ({}) frees {}, which the rank does not hold",
                                          program_.rank, i, OpKindName(op.kind), BufferName(b)));
    if (check_buffers_) --held_count_;
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
