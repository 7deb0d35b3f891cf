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
};

}  // namespace motley
