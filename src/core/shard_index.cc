#include "core/shard_index.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_read.h"

namespace motley {
namespace {

constexpr const char* kFormat = "motley-shards-1";
constexpr const char* kFix = "the checkpoint is corrupted or not motley's; resume from another one";

const char* TensorSuffix(ShardTensor what) {
  switch (what) {
    case ShardTensor::kValues:
      return "values";
    case ShardTensor::kExpAvg:
      return "exp_avg";
    case ShardTensor::kExpAvgSq:
      return "exp_avg_sq";
    case ShardTensor::kOuterMomentum:
      return "outer_momentum";
  }
  return "values";
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string ShardTensorName(std::string_view param, int tp_index, int64_t begin, ShardTensor what) {
  return fmt::format("{}#{}#{}#{}", param, tp_index, begin, TensorSuffix(what));
}

bool ParseShardTensorName(std::string_view name, std::string* param, int* tp_index, int64_t* begin,
                          ShardTensor* what) {
  const size_t c = name.rfind('#');
  if (c == std::string_view::npos) return false;
  const size_t b = name.rfind('#', c - 1);
  if (b == std::string_view::npos || b == 0) return false;
  const size_t a = name.rfind('#', b - 1);
  if (a == std::string_view::npos || a == 0) return false;
  const std::string_view suffix = name.substr(c + 1);
  bool found = false;
  for (ShardTensor w :
       {ShardTensor::kValues, ShardTensor::kExpAvg, ShardTensor::kExpAvgSq, ShardTensor::kOuterMomentum})
    if (suffix == TensorSuffix(w)) *what = w, found = true;
  if (!found || !ParseNumber(name.substr(a + 1, b - a - 1), tp_index) ||
      !ParseNumber(name.substr(b + 1, c - b - 1), begin) || *tp_index < 0 || *begin < 0)
    return false;
  *param = std::string(name.substr(0, a));
  return true;
}

std::string RankShardFileName(int rank) { return fmt::format("rank-{:05d}.safetensors", rank); }

int64_t SliceElements(const ShardedParameter& p) {
  int64_t n = 1;
  for (size_t i = 0; i < p.shape.size(); ++i) n *= i == 0 && p.padded_rows > 0 ? p.padded_rows : p.shape[i];
  return p.tp_degree > 0 ? n / p.tp_degree : n;
}

Status ValidateShardIndex(const ShardIndex& index, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format("{}: {}", path, why));
  };
  // Per (parameter, slice): its pieces' ranges, sorted, must run from 0 to the slice's end.
  std::map<std::pair<std::string, int>, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (const ShardPiece& p : index.pieces) {
    auto it = index.parameters.find(p.param);
    if (it == index.parameters.end())
      return bad(fmt::format("a piece in {} names \"{}\", not a parameter the index lists", p.file, p.param));
    if (p.tp_index < 0 || p.tp_index >= it->second.tp_degree)
      return bad(fmt::format("a piece of {} in {} is slice {} of {}", p.param, p.file, p.tp_index,
                             it->second.tp_degree));
    if (p.count <= 0 || p.begin < 0)
      return bad(fmt::format("a piece of {} in {} is empty or begins before 0", p.param, p.file));
    ranges[{p.param, p.tp_index}].push_back({p.begin, p.begin + p.count});
  }
  for (const auto& [name, param] : index.parameters) {
    if (param.tp_degree < 1)
      return bad(fmt::format("{}: tp_degree {} (must be >= 1)", name, param.tp_degree));
    if (param.padded_rows != 0 && (param.shape.empty() || param.padded_rows < param.shape[0]))
      return bad(fmt::format("{}: padded_rows {} is fewer than its rows", name, param.padded_rows));
    int64_t numel = 1;
    for (size_t i = 0; i < param.shape.size(); ++i) {
      const int64_t d = i == 0 && param.padded_rows > 0 ? param.padded_rows : param.shape[i];
      if (d < 0 || (d > 0 && numel > std::numeric_limits<int64_t>::max() / d))
        return bad(fmt::format("{}: shape is not a tensor's", name));
      numel *= d;
    }
    if (numel % param.tp_degree != 0)
      return bad(fmt::format("{}: {} elements do not split into {} slices", name, numel, param.tp_degree));
    const int64_t slice = numel / param.tp_degree;
    for (int t = 0; t < param.tp_degree; ++t) {
      auto it = ranges.find({name, t});
      if (slice == 0) continue;
      if (it == ranges.end())
        return bad(fmt::format("no rank file holds {} (slice {} of {})", name, t, param.tp_degree));
      std::vector<std::pair<int64_t, int64_t>>& r = it->second;
      std::sort(r.begin(), r.end());
      int64_t at = 0;
      for (const auto& [b, e] : r) {
        if (b != at)
          return bad(fmt::format("{} (slice {} of {}): elements {} are {}", name, t, param.tp_degree,
                                 b > at ? fmt::format("{}..{}", at, b - 1) : fmt::format("from {}", b),
                                 b > at ? "in no rank file" : "in two rank files"));
        at = e;
      }
      if (at != slice)
        return bad(fmt::format("{} (slice {} of {}): the pieces cover {} of its {} elements", name, t,
                               param.tp_degree, at, slice));
    }
  }
  return Status::Ok();
}

Result<ShardIndex> ParseShardIndex(std::string_view text, const std::string& path) {
  Result<nlohmann::json> parsed = ParseJson(text, path);
  if (!parsed.ok()) return Status::InvalidArgument(fmt::format("{}; {}", parsed.status().message(), kFix));
  const nlohmann::json& j = *parsed;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(fmt::format("{}: {}; {}", path, why, kFix));
  };
  if (!j.is_object()) return bad("expected a JSON object");
  if (!j.contains("format") || j["format"] != kFormat)
    return bad(fmt::format("\"format\" must be \"{}\"", kFormat));
  if (!j.contains("parameters") || !j["parameters"].is_object()) return bad("no \"parameters\" object");
  if (!j.contains("pieces") || !j["pieces"].is_array()) return bad("no \"pieces\" array");
  auto integer = [](const nlohmann::json& v, int64_t min, int64_t max, int64_t* out) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)))
      return false;
    *out = v.get<int64_t>();
    return *out >= min && *out <= max;
  };
  ShardIndex index;
  for (const auto& [name, p] : j["parameters"].items()) {
    ShardedParameter param;
    if (!p.is_object() || !p.contains("shape") || !p["shape"].is_array() || p["shape"].size() > 8)
      return bad(fmt::format("parameters.\"{}\" must be {{\"shape\": [...], \"tp_degree\": n}}", name));
    for (const auto& d : p["shape"]) {
      int64_t v = 0;
      if (!integer(d, 0, std::numeric_limits<int64_t>::max(), &v))
        return bad(fmt::format("parameters.\"{}\".shape: {} is not a size", name, d.dump()));
      param.shape.push_back(v);
    }
    int64_t tp = 1;
    if (p.contains("tp_degree") && !integer(p["tp_degree"], 1, 4096, &tp))
      return bad(fmt::format("parameters.\"{}\".tp_degree must be an integer from 1 to 4096", name));
    param.tp_degree = static_cast<int>(tp);
    if (p.contains("padded_rows") &&
        !integer(p["padded_rows"], 1, std::numeric_limits<int64_t>::max(), &param.padded_rows))
      return bad(fmt::format("parameters.\"{}\".padded_rows must be a positive integer", name));
    index.parameters[name] = param;
  }
  for (size_t i = 0; i < j["pieces"].size(); ++i) {
    const nlohmann::json& p = j["pieces"][i];
    ShardPiece piece;
    int64_t tp_index = 0;
    if (!p.is_object() || !p.contains("file") || !p["file"].is_string() || !p.contains("param") ||
        !p["param"].is_string() || !integer(p.value("tp_index", nlohmann::json(0)), 0, 4095, &tp_index) ||
        !p.contains("begin") || !integer(p["begin"], 0, std::numeric_limits<int64_t>::max(), &piece.begin) ||
        !p.contains("count") ||
        !integer(p["count"], 1, std::numeric_limits<int64_t>::max() - piece.begin, &piece.count))
      return bad(fmt::format(
          "pieces[{}] must be {{\"file\", \"param\", \"tp_index\", \"begin\", \"count\" >= 1}}", i));
    piece.file = p["file"].get<std::string>();
    if (piece.file.empty() || piece.file.find('/') != std::string::npos || piece.file == "." ||
        piece.file == "..")
      return bad(
          fmt::format("pieces[{}].file \"{}\" is not a file name within the checkpoint", i, piece.file));
    piece.param = p["param"].get<std::string>();
    piece.tp_index = static_cast<int>(tp_index);
    index.pieces.push_back(std::move(piece));
  }
  if (Status s = ValidateShardIndex(index, path); !s.ok())
    return Status::InvalidArgument(fmt::format("{}; {}", s.message(), kFix));
  return index;
}

std::string ShardIndexJson(const ShardIndex& index) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, p] : index.parameters) {
    params[name] = {{"shape", p.shape}, {"tp_degree", p.tp_degree}};
    if (p.padded_rows > 0) params[name]["padded_rows"] = p.padded_rows;
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (const ShardPiece& p : index.pieces)
    pieces.push_back({{"file", p.file},
                      {"param", p.param},
                      {"tp_index", p.tp_index},
                      {"begin", p.begin},
                      {"count", p.count}});
  nlohmann::json j = {{"format", kFormat}, {"parameters", params}, {"pieces", pieces}};
  return j.dump(1) + "\n";
}

}  // namespace motley
