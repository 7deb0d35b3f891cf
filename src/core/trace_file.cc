#include "core/trace_file.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_read.h"
#include "core/toml_reader.h"

namespace motley {

Result<std::vector<TraceSpan>> ParseTraceJson(std::string_view text, const std::string& file) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, file));
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format(
        "{}: error: {}; give a trace `motley train --trace` or `motley simulate --trace` wrote", file, what));
  };
  const nlohmann::json* events = &j;
  if (j.is_object()) {
    auto it = j.find("traceEvents");
    if (it == j.end()) return bad("no \"traceEvents\" list");
    events = &*it;
  }
  if (!events->is_array()) return bad("\"traceEvents\" must be a list of events");
  std::vector<TraceSpan> out;
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    if (!e.is_object()) return bad(fmt::format("event {} is not an object", i));
    auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string() || ph->get<std::string>() != "X") continue;  // only complete spans
    auto field = [&](const char* key) {
      return bad(fmt::format("event {}: \"{}\" is missing or of the wrong type", i, key));
    };
    TraceSpan s;
    auto pid = e.find("pid");
    const std::optional<int64_t> rank = pid == e.end() ? std::nullopt : JsonInt64(*pid);
    if (!rank || *rank < 0 || *rank >= (int64_t{1} << 20)) return field("pid");
    s.rank = static_cast<int>(*rank);
    auto ts = e.find("ts");
    if (ts == e.end() || !ts->is_number() || !std::isfinite(ts->get<double>())) return field("ts");
    s.start_us = ts->get<double>();
    if (auto dur = e.find("dur"); dur != e.end()) {
      if (!dur->is_number() || !std::isfinite(dur->get<double>()) || dur->get<double>() < 0)
        return field("dur");
      s.duration_us = dur->get<double>();
    }
    for (const auto& [key, into] : std::initializer_list<std::pair<const char*, std::string*>>{
             {"cat", &s.category}, {"name", &s.name}}) {
      auto it = e.find(key);
      if (it == e.end()) continue;
      if (!it->is_string()) return field(key);
      *into = it->get<std::string>();
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<TraceSpan>> ReadTraceFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseTraceJson(text, path);
}

}  // namespace motley
