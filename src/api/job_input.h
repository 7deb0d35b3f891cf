// The job a command runs: a job file, or the name of a built-in job ("default").
#pragma once

#include <string>

#include "core/job.h"
#include "core/status.h"

namespace motley {

Result<JobSpec> LoadJobArgument(const std::string& path_or_name);

}  // namespace motley
