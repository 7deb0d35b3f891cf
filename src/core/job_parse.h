// Reading and validating a job file (TOML), together with the model and cluster it names.
#pragma once

#include <optional>
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

/// Starts `job` from the Hugging Face folder `dir` ([model] init_from, `motley train --init-from`):
/// its config.json becomes the job's model — a shape the job gives too (`shape`, or the model the
/// job named) must agree, else one error naming both and what differs — and its tokenizer.json the
/// run's tokenizer unless [data] names one.
Status ApplyInitFrom(JobSpec* job, const std::string& dir,
                     const std::optional<std::string>& shape = std::nullopt);

/// The fields that change the math where two models differ ("hidden_size 32 vs 64, ..."), "" when none.
std::string ModelMathDifference(const ModelSpec& a, const ModelSpec& b);

}  // namespace motley
