// Any motley config file, whatever its kind: recognising the kind from the content, and validating
// it whole. Used by `motley validate` and the parser fuzzer.
#pragma once

#include <string>
#include <string_view>

#include "core/job_parse.h"
#include "core/status.h"

namespace motley {

enum class ConfigKind { kCluster, kModel, kJob, kOffers };
std::string_view ConfigKindName(ConfigKind kind);

/// A .json file is a Hugging Face model config; a TOML file is a cluster when it has `nodes`, a
/// job when it has `training` or `cluster`, a model when it has `hidden_size` or `base`.
Result<ConfigKind> DetectConfigKind(std::string_view text, const std::string& file);

/// Parses and validates `text` as `kind`; returns a one-line summary of what it describes.
Result<std::string> ValidateConfigText(std::string_view text, const std::string& file, ConfigKind kind,
                                       const JobParseOptions& job_options = {});

}  // namespace motley
