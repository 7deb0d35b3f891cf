// Reading and validating a job file (TOML), together with the model and cluster it names.
#pragma once

#include <string>
#include <string_view>

#include "core/job.h"
#include "core/status.h"

namespace motley {

struct JobParseOptions {
  /// Read the model and cluster files the job names (relative to the job file). Off in the fuzzer,
  /// which then resolves only presets and built-in clusters.
  bool resolve_files = true;
};

Result<JobSpec> ParseJobToml(std::string_view text, const std::string& file,
                             const JobParseOptions& options = {});
Result<JobSpec> LoadJobFile(const std::string& path);

}  // namespace motley
