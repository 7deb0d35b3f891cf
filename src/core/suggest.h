// "Did you mean ...": the nearest valid name to a mistyped one, for config keys, device types,
// presets, subcommands and flags.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace motley {

/// Optimal-string-alignment edit distance (insert, delete, substitute, swap neighbours).
size_t EditDistance(std::string_view a, std::string_view b);

/// The candidate nearest to `typo`, if it is close enough to be a plausible typo (distance at most
/// max(2, len/3), or one is a prefix or suffix of the other).
std::optional<std::string> NearestName(std::string_view typo, std::span<const std::string> candidates);

/// "; did you mean 'x'?" or "" when nothing is close.
std::string DidYouMean(std::string_view typo, std::span<const std::string> candidates);

/// Like DidYouMean, but "." when nothing is close, to end a sentence either way.
std::string DidYouMeanOrPeriod(std::string_view typo, std::span<const std::string> candidates);

/// "a, b, c": for listing the valid names in a message.
std::string JoinNames(std::span<const std::string> names, std::string_view sep = ", ");

}  // namespace motley
