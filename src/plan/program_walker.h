// ProgramWalker: the bookkeeping of running one rank's program — the part every executor shares,
// kept apart from what an op does (the way ninja's builder is kept apart from its command runner).
//
// The walker starts ops in program order. Before op i starts it finishes:
//   * the ops in flight that i depends on (Op::deps);
//   * the ops in flight that i would race with on a buffer: one in flight writes (or frees) a
//     buffer i reads or writes, or reads a buffer i writes or frees;
//   * the ops in flight the runner reports done (so what they hold goes as soon as it can);
// A rank's collectives run one at a time, in program order: a collective reached while another is in
// flight is queued, not started (what it allocates is not allocated yet, and the host goes on to
// the ops after it); it starts when the one before it has finished — which the walker learns when
// it next looks (each Step asks the runner which ops are done), or when an op needs it.
// It keeps the set of buffers the rank holds: a step starts from Program::resident, an op may read
// only what is held (or what it writes itself), its writes become held when it starts, its frees
// go when it finishes; the step must end holding exactly Program::resident again. Any breach is
// an error naming the op and the buffer, so a schedule that would make the runtime read freed or
// missing data stops with a clear message instead of computing garbage.
//
// Implementations of OpRunner: the runtime's tensor executor (runtime/executor/executor_step.cc), the
// simulator (sim/simulator.cc: it calls Step op by op from its event loop, once Blockers have
// finished in simulated time) and RecordingOpRunner (program_walker_test.cc), which records what
// would run and checks the order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include <boost/container/flat_set.hpp>

#include "core/status.h"
#include "plan/schedule.h"

namespace motley {

/// What an executor does with an op; ProgramWalker decides when.
class OpRunner {
 public:
  virtual ~OpRunner() = default;
  /// Called before each op is considered (the runner may advance its own background work).
  virtual Status BeforeOp(int /*op*/) { return Status::Ok(); }
  /// Starts op `op`. Returns true when it is finished on return, false when it stays in flight
  /// (a collective, a transfer) until Finish(op).
  virtual Result<bool> Start(int op) = 0;
  /// Whether an op in flight has completed (Finish will not wait). Default: never known.
  virtual bool Done(int /*op*/) { return false; }
  /// Waits for an op in flight and applies what follows it.
  virtual Status Finish(int op) = 0;
  /// A buffer's last use on this rank has finished (Op::frees).
  virtual Status Free(const Buffer& /*buffer*/) { return Status::Ok(); }
};

class ProgramWalker {
 public:
  /// `collectives`: the schedule's (Schedule::collectives), to tell a tensor-parallel team's
  /// all-reduces — run inside the compute op before them, never queued — from the rest.
  ProgramWalker(const Program& program, OpRunner* runner,
                const std::vector<Collective>* collectives = nullptr)
      : program_(program), runner_(runner), collectives_(collectives) {}

  /// Runs every op of the program, then finishes whatever is still in flight, and checks the
  /// rank ends the step holding its resident buffers: Begin, Step for each op, End.
  Status Run();

  // The same, a piece at a time, for a runner that cannot block (the simulator advances a rank
  // when the ops it waits for have finished in simulated time).
  void Begin();
  /// The ops in flight (or queued) that Step(i) finishes before starting op i, in program order:
  /// its deps and those it would race with on a buffer.
  std::vector<int> Blockers(int i) const;
  /// Finishes what the runner reports done and starts the collectives queued behind them (Step
  /// does this first; a runner calls it when it looks between ops without stepping — the
  /// runtime inside a compute op, between layers and while an emulated device waits). With
  /// `may_block` false it starts no queued gradient norm (a blocking all-reduce over every rank,
  /// which the host must not enter from inside a compute op).
  Status Poll(bool may_block = true);
  /// Starts op i: finishes what the runner reports done and Blockers(i), then runner->Start(i).
  Status Step(int i);
  /// Finishes what is still in flight and checks the resident buffers.
  Status End();

  /// Whether to keep and check the buffers the rank holds (on by default). The planner's
  /// simulations turn it off: what the walker decides does not depend on it, and every lowered
  /// schedule's buffers are checked by the tests (CheckScheduleBuffers) and at run time.
  void set_check_buffers(bool check) { check_buffers_ = check; }

  /// Ops in flight now (op indices), for runners and tests.
  const boost::container::flat_set<int>& in_flight() const { return in_flight_; }
  /// The buffers the rank holds now (kept when checked: set_check_buffers), in order.
  std::vector<Buffer> held() const;

 private:
  Status FinishOp(int op, bool may_block = true);
  Status Release(int op);                     // op's frees go
  Status StartQueued(bool may_block = true);  // the queued collectives, while none is running
  Status StartOp(int op);
  bool Queues(int op) const;  // a collective that runs one at a time

  std::deque<int> queued_;  // collectives admitted (in in_flight_), not started yet
  int running_collective_ = -1;

  const Program& program_;
  OpRunner* runner_;
  const std::vector<Collective>* collectives_;
  bool check_buffers_ = true;
  boost::container::flat_set<int> in_flight_;
  // The buffers held: a flag for each buffer the program names, numbered densely by kind,
  // ministage and the program's own number for the microbatch (a rank holds up to thousands at
  // once, taken and let go by the million in a simulation: a std::set took 11% of `motley
  // simulate`'s time, a sorted vector's moves 14%, a hash set 12%).
  void NumberBuffers();
  size_t Index(const Buffer& b) const;
  bool Holds(const Buffer& b) const { return held_[Index(b)] != 0; }
  int32_t ministages_ = 0;                 // the program's largest ministage + 2 (-1 included)
  std::vector<int32_t> local_microbatch_;  // microbatch + 1 -> its number here
  std::vector<int32_t> microbatch_of_;     // ... and back
  std::vector<uint8_t> held_;
  size_t held_count_ = 0;
};

/// Walks every rank's program with a runner that runs each op at once (nothing in flight): the
/// buffer discipline of a whole schedule. Returns "" when sound, else the first problem.
std::string CheckScheduleBuffers(const Schedule& s);

}  // namespace motley
