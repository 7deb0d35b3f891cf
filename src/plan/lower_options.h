// LowerOptions: how a plan is lowered to its schedule (lower.h) — checked or not, and the
// planner's early exit. Its own header, so that the lowering's parts (lowerer.h) need not include
// the lowering's entry point.
#pragma once

#include <functional>

#include "plan/schedule.h"

namespace motley {

/// REQUIRES: nothing; the plan is validated first (ValidatePlan) and lowering-specific limits are
/// reported as errors.
struct LowerOptions {
  // Check the schedule's invariants (CheckSchedule) and stop on a violation. The planner, which
  // lowers hundreds of plans to judge them, turns it off; whatever runs a schedule keeps it on.
  bool check = true;
  // The planner's early exit: called once every op is emitted, before the passes that order them
  // and add their deps (clipping's hold, the buffers', the prefetches'). When it says so, the
  // lowering stops there, sets *stopped and returns an empty schedule (a plan the planner already
  // knows to be slower than one it has: its compute alone takes longer).
  std::function<bool(const Schedule&)> stop_after_emission;
  bool* stopped = nullptr;
  // The planner's judging (without `check`): each device's class — devices of one class cost alike
  // in the simulator (type, speed, host link, memory). Ranks whose emitted programs are alike op for
  // op (no point-to-point transfers, collectives the same) on devices of one class then keep one
  // program between them (Schedule::represented_by): the passes and the simulator walk it once, and
  // the simulator gives each rank of the class its figures — the same step, exactly, as walking
  // every program (sim tests). Empty: every rank keeps its program.
  // In a plan of one group without tensor parallelism, ranks the plan gives alike microbatches and
  // state on devices of one class are known alike before they are emitted: only the first of them
  // emits (the rest of the emission was most of a large group's lowering; the sim tests check each
  // such pair alike as every rank's program is emitted).
  std::vector<int64_t> device_class;
  // The passes over the finished programs (clipping's hold, the buffers' deps, the prefetches'
  // places) take each program alone, on up to this many threads. The planner, which lowers many
  // plans at once on every core, keeps one; a lowering someone waits for alone (motley simulate)
  // may take every core. The schedule is the same either way.
  size_t threads = 1;
};

}  // namespace motley
