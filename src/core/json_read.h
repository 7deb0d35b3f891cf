// Reading a JSON document a person or another program wrote, with the limits every motley reader
// applies: nesting no deeper than a configuration needs (a document nested 50,000 deep is refused
// before anything walks it), each key once per object (a repeated key would silently replace the
// first), and parse errors at file:line:column.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace motley {

/// The deepest nesting any motley JSON file needs is a handful of levels; 64 leaves room.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `text` (from `file`, for messages). Errors: "<file>:<line>:<column>: error: ..." for
/// malformed JSON, "<file>: error: ..." for depth and repeated keys.
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& file,
                                 int max_depth = kMaxJsonDepth);

/// What a JSON library error says, for a user: without nlohmann's "[json.exception.type_error.302] "
/// tag and, for a parse error, without its "parse error at line L, column C: " (messages name the
/// place themselves).
std::string JsonErrorText(const nlohmann::json::exception& e);

/// `v` as an int64 when it is a JSON integer that fits one (an unsigned integer above 2^63 - 1, as
/// 18446744073709551615, does not: nlohmann would read it as a negative number); else nullopt.
/// Messages about the value show `v.dump()`, the number as written.
std::optional<int64_t> JsonInt64(const nlohmann::json& v);

}  // namespace motley
