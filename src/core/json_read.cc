#include "core/json_read.h"

#include <set>
#include <vector>

#include <fmt/format.h>

namespace motley {
namespace {

struct Refused {
  std::string message;
};

std::string LineColumn(std::string_view text, size_t byte) {
  int line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("{}:{}", line, column);
}

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, const std::string& file, int max_depth) {
  std::vector<std::set<std::string>> keys;  // of each object being read
  std::vector<std::string> path;            // the keys leading to it, for messages
  auto check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth > max_depth)
      throw Refused{
          fmt::format("nested more than {} levels deep; no motley file needs that many", max_depth)};
    if (event == Event::object_start) {
      keys.emplace_back();
      path.resize(keys.size());
    } else if (event == Event::object_end && !keys.empty()) {
      keys.pop_back();
      path.resize(keys.size());
    } else if (event == Event::key && !keys.empty()) {
      // path[i] is the key of object i that leads to the next; the last slot is this object's.
      const std::string key = parsed.get<std::string>();
      if (!keys.back().insert(key).second) {
        const std::vector<std::string> leading(path.begin(), path.end() - 1);
        throw Refused{fmt::format(
            "key \"{}\" appears twice in one object{} (the second would silently replace the "
            "first); keep one",
            key, leading.empty() ? "" : fmt::format(" (under \"{}\")", fmt::join(leading, "\" > \"")))};
      }
      path.back() = key;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const Refused& r) {
    return Status::InvalidArgument(fmt::format("{}: error: {}", file, r.message));
  } catch (const nlohmann::json::parse_error& e) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: error: not valid JSON: {}", file, LineColumn(text, e.byte), JsonErrorText(e)));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: error: not valid JSON: {}", file, JsonErrorText(e)));
  }
}

std::string JsonErrorText(const nlohmann::json::exception& e) {
  std::string_view text = e.what();
  if (text.starts_with("[json.exception.")) {
    const size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  if (text.starts_with("parse error at ")) {
    const size_t colon = text.find(": ");
    if (colon != std::string_view::npos) text.remove_prefix(colon + 2);
  }
  // The library's words for a missing key or a value of the wrong kind, in the user's.
  if (text.starts_with("key '") && text.ends_with("' not found"))
    return fmt::format("\"{}\" is missing", text.substr(5, text.size() - 5 - 11));
  if (text.starts_with("cannot use at() with "))
    return fmt::format("an object or a list was expected, not a {}", text.substr(21));
  return std::string(text);
}

std::optional<int64_t> JsonInt64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

}  // namespace motley
