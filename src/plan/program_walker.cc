#include "plan/program_walker.h"

#include <algorithm>

#include <fmt/format.h>

namespace motley {
namespace {

bool Contains(const std::vector<Buffer>& buffers, const Buffer& b) {
  return std::find(buffers.begin(), buffers.end(), b) != buffers.end();
}
bool Overlaps(const std::vector<Buffer>& a, const std::vector<Buffer>& b) {
  return std::any_of(a.begin(), a.end(), [&](const Buffer& x) { return Contains(b, x); });
}

}  // namespace

Status ProgramWalker::Run() {
  held_ = std::set<Buffer>(program_.resident.begin(), program_.resident.end());
  in_flight_.clear();
  for (int i = 0; i < static_cast<int>(program_.ops.size()); ++i) MOTLEY_RETURN_IF_ERROR(Step(i));
  while (!in_flight_.empty()) MOTLEY_RETURN_IF_ERROR(FinishOp(*in_flight_.begin()));
  const std::set<Buffer> resident(program_.resident.begin(), program_.resident.end());
  if (held_ != resident) {
    std::string diff;
    for (const Buffer& b : held_)
      if (!resident.count(b)) diff += fmt::format(" {} left over;", BufferName(b));
    for (const Buffer& b : resident)
      if (!held_.count(b)) diff += fmt::format(" {} missing;", BufferName(b));
    return Status::Internal(fmt::format("rank {}: the step ended without its resident state:{}", program_.rank, diff));
  }
  return Status::Ok();
}

Status ProgramWalker::Step(int i) {
  const Op& op = program_.ops[i];
  MOTLEY_RETURN_IF_ERROR(runner_->BeforeOp(i));
  std::vector<int> done;
  for (int j : in_flight_)
    if (runner_->Done(j)) done.push_back(j);
  for (int j : done) MOTLEY_RETURN_IF_ERROR(FinishOp(j));
  for (int d : op.deps)
    if (in_flight_.count(d)) MOTLEY_RETURN_IF_ERROR(FinishOp(d));
  // A rank's collectives run one at a time, in program order, as on the schedule's comm lane in
  // the simulator: one waiting for its slowest member holds the next back (and what the next would
  // allocate), instead of a rank with little to compute posting every reduction of its step at once.
  if (IsCollective(op.kind)) {
    std::vector<int> earlier;
    for (int j : in_flight_)
      if (IsCollective(program_.ops[j].kind)) earlier.push_back(j);
    for (int j : earlier) MOTLEY_RETURN_IF_ERROR(FinishOp(j));
  }
  MOTLEY_RETURN_IF_ERROR(FinishConflicts(i));
  for (const Buffer& b : op.reads)
    if (!held_.count(b) && !Contains(op.writes, b))
      return Status::Internal(fmt::format("rank {} op {} ({}) reads {}, which the rank does not hold", program_.rank,
                                          i, OpKindName(op.kind), BufferName(b)));
  for (const Buffer& b : op.writes) held_.insert(b);
  MOTLEY_ASSIGN_OR_RETURN(bool finished, runner_->Start(i));
  if (!finished) {
    in_flight_.insert(i);
    return Status::Ok();
  }
  for (const Buffer& b : op.frees) {
    if (!held_.erase(b))
      return Status::Internal(fmt::format("rank {} op {} ({}) frees {}, which the rank does not hold", program_.rank,
                                          i, OpKindName(op.kind), BufferName(b)));
    MOTLEY_RETURN_IF_ERROR(runner_->Free(b));
  }
  return Status::Ok();
}

Status ProgramWalker::FinishOp(int i) {
  if (!in_flight_.erase(i)) return Status::Ok();
  MOTLEY_RETURN_IF_ERROR(runner_->Finish(i));
  const Op& op = program_.ops[i];
  for (const Buffer& b : op.frees) {
    if (!held_.erase(b))
      return Status::Internal(fmt::format("rank {} op {} ({}) frees {}, which the rank does not hold", program_.rank,
                                          i, OpKindName(op.kind), BufferName(b)));
    MOTLEY_RETURN_IF_ERROR(runner_->Free(b));
  }
  return Status::Ok();
}

Status ProgramWalker::FinishConflicts(int i) {
  const Op& op = program_.ops[i];
  std::vector<int> conflicts;
  for (int j : in_flight_) {
    const Op& other = program_.ops[j];
    // Read after write, write after read or write, free after use.
    if (Overlaps(other.writes, op.reads) || Overlaps(other.writes, op.writes) || Overlaps(other.frees, op.reads) ||
        Overlaps(other.frees, op.writes) || Overlaps(other.reads, op.writes) || Overlaps(other.reads, op.frees))
      conflicts.push_back(j);
  }
  for (int j : conflicts) MOTLEY_RETURN_IF_ERROR(FinishOp(j));
  return Status::Ok();
}

std::string CheckScheduleBuffers(const Schedule& s) {
  struct AtOnce : OpRunner {
    Result<bool> Start(int) override { return true; }
    Status Finish(int) override { return Status::Ok(); }
  } runner;
  for (const Program& p : s.programs) {
    ProgramWalker walker(p, &runner);
    if (Status st = walker.Run(); !st.ok()) return st.message();
  }
  return "";
}

}  // namespace motley
