// Reading a JSON document a person or another program wrote, with the limits every motley reader
// applies: nesting no deeper than a configuration needs (a document nested 50,000 deep is refused
// before anything walks it), each key once per object (a repeated key would silently replace the
// first), and parse errors at file:line:column.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace motley {

/// The deepest nesting any motley JSON file needs is a handful of levels; 64 leaves room.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text` (from `file`, for messages). Errors: "<file>:<line>:<column>: error: ..." for
/// malformed JSON, "<file>: error: ..." for depth and repeated keys.
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& file, int max_depth = kMaxJsonDepth);

}  // namespace motley
