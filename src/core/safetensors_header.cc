#include "core/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_read.h"

namespace motley {
namespace {

struct DtypeSize {
  const char* name;
  int bytes;
};
constexpr DtypeSize kDtypes[] = {{"F64", 8}, {"F32", 4}, {"BF16", 2}, {"F16", 2},
                                 {"I64", 8}, {"I32", 4}, {"U8", 1},   {"BOOL", 1}};

int ElementBytes(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

}  // namespace

Result<int64_t> SafetensorsHeaderLength(const uint8_t (&prefix)[8], int64_t file_bytes,
                                        const std::string& path) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (file_bytes < 8 || n > static_cast<uint64_t>(file_bytes - 8) ||
      n > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes))
    return Status::InvalidArgument(fmt::format(
        "{}: not a safetensors file (header length {} in a file of {} bytes): truncated or not safetensors",
        path, n, file_bytes));
  return static_cast<int64_t>(n);
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header_json, int64_t file_bytes,
                                                 const std::string& path) {
  Result<nlohmann::json> parsed = ParseJson(header_json, path + " (its header)");
  if (!parsed.ok())
    return Status::InvalidArgument(fmt::format("not a safetensors file: {}", parsed.status().message()));
  const nlohmann::json& header = *parsed;
  if (!header.is_object())
    return Status::InvalidArgument(
        fmt::format("{}: not a safetensors file (the header is not a JSON object)", path));
  SafetensorsHeader h;
  h.data_start = 8 + static_cast<int64_t>(header_json.size());
  const int64_t data_size = file_bytes - h.data_start;
  if (data_size < 0)
    return Status::InvalidArgument(
        fmt::format("{}: the header runs past the file's {} bytes", path, file_bytes));
  for (const auto& item : header.items()) {
    const std::string& name = item.key();  // (not a structured binding: clang's lambdas cannot capture one)
    const nlohmann::json& value = item.value();
    if (name == "__metadata__") {
      if (value.is_object())
        for (const auto& [k, v] : value.items())
          if (v.is_string()) h.metadata[k] = v.get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("{}: tensor {}: {}", path, name, why));
    };
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets"))
      return bad("needs dtype, shape and data_offsets");
    SafetensorsEntry e;
    if (!value["dtype"].is_string()) return bad("dtype must be a string");
    e.dtype = value["dtype"].get<std::string>();
    e.element_bytes = ElementBytes(e.dtype);
    if (e.element_bytes == 0) return bad(fmt::format("unsupported dtype {}", e.dtype));
    if (!value["shape"].is_array() || value["shape"].size() > 16)
      return bad("shape must be a list of at most 16 sizes");
    // No tensor holds more elements than the file has bytes: checked as the shape is read, so the
    // product never overflows.
    int64_t numel = 1;
    for (const auto& s : value["shape"]) {
      if (!s.is_number_integer() || (s.is_number_unsigned() && s.get<uint64_t>() > INT64_MAX) ||
          s.get<int64_t>() < 0)
        return bad("shape must hold non-negative integers");
      e.shape.push_back(s.get<int64_t>());
      if (e.shape.back() > 0 && numel > data_size / e.shape.back())
        return bad(fmt::format("shape {} holds more elements than the file's {} data bytes",
                               value["shape"].dump(), data_size));
      numel *= e.shape.back();
    }
    const auto& off = value["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer() ||
        (off[0].is_number_unsigned() && off[0].get<uint64_t>() > INT64_MAX) ||
        (off[1].is_number_unsigned() && off[1].get<uint64_t>() > INT64_MAX))
      return bad("data_offsets must be [begin, end]");
    e.begin = off[0].get<int64_t>();
    e.end = off[1].get<int64_t>();
    if (e.begin < 0 || e.end < e.begin || e.end > data_size || numel > data_size / e.element_bytes ||
        e.end - e.begin != numel * e.element_bytes)
      return bad(
          fmt::format("data_offsets [{}, {}] do not hold {} x {} bytes within the file's {} data bytes "
                      "(truncated?)",
                      e.begin, e.end, numel, e.element_bytes, data_size));
    h.entries[name] = std::move(e);
  }
  // Every tensor its own bytes: two whose ranges overlap would each read the other's (the format
  // lays them out one after another).
  std::vector<std::pair<std::pair<int64_t, int64_t>, const std::string*>> ranges;
  for (const auto& [name, e] : h.entries)
    if (e.end > e.begin) ranges.push_back({{e.begin, e.end}, &name});
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first.first < ranges[i - 1].first.second)
      return Status::InvalidArgument(
          fmt::format("{}: tensors {} (bytes {}-{}) and {} (bytes {}-{}) overlap: each tensor must have "
                      "bytes of its own; the "
                      "file is damaged or not written by a safetensors writer",
                      path, *ranges[i - 1].second, ranges[i - 1].first.first, ranges[i - 1].first.second,
                      *ranges[i].second, ranges[i].first.first, ranges[i].first.second));
  return h;
}

Result<SafetensorsHeader> ParseSafetensorsBytes(std::string_view file, const std::string& path) {
  uint8_t prefix[8] = {};
  std::memcpy(prefix, file.data(), std::min<size_t>(8, file.size()));
  MOTLEY_ASSIGN_OR_RETURN(int64_t n,
                          SafetensorsHeaderLength(prefix, static_cast<int64_t>(file.size()), path));
  return ParseSafetensorsHeader(file.substr(8, static_cast<size_t>(n)), static_cast<int64_t>(file.size()),
                                path);
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open the safetensors file", path));
  in.seekg(0, std::ios::end);
  const auto file_bytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  uint8_t prefix[8] = {};
  in.read(reinterpret_cast<char*>(prefix), 8);
  MOTLEY_ASSIGN_OR_RETURN(int64_t n, SafetensorsHeaderLength(prefix, file_bytes, path));
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in) return Status::IoError(fmt::format("{}: cannot read the header", path));
  return ParseSafetensorsHeader(text, file_bytes, path);
}

}  // namespace motley
