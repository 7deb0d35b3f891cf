// A plan must describe the job it trains: the same sequence length, global batch, precision,
// gradient clipping and loss scaling. `motley train --plan` checks it once before it launches the
// ranks, and every rank again (a rank may be started by hand or by a launcher).
#pragma once

#include <string>

#include "core/job.h"
#include "core/status.h"
#include "plan/plan.h"

namespace motley {

/// Ok, or one error naming `plan_path`, the job's file, both values and the fix.
Status CheckPlanMatchesJob(const Plan& plan, const JobSpec& job, const std::string& plan_path);

}  // namespace motley
