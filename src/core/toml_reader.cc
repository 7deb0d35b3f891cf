#include "core/toml_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/suggest.h"
#include "core/units.h"

namespace motley {
namespace {

SourcePos ToPos(const std::string& file, const toml::source_region& region) {
  return SourcePos{file, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
}

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

std::string Shorten(std::string s) {
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

}  // namespace

TomlTable::TomlTable(const toml::table& table, std::string path, std::string file, Diagnostics* diag)
    : table_(&table), path_(std::move(path)), file_(std::move(file)), diag_(diag) {}

std::string TomlTable::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void TomlTable::Allow(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
}

bool TomlTable::Has(std::string_view key) const { return table_->get(key) != nullptr; }

SourcePos TomlTable::Pos() const { return ToPos(file_, table_->source()); }

SourcePos TomlTable::PosOf(std::string_view key) const {
  const toml::node* node = table_->get(key);
  if (node == nullptr || node->source().begin.line == 0) return Pos();
  return ToPos(file_, node->source());
}

void TomlTable::Error(std::string_view key, const std::string& message) {
  diag_->Error(PosOf(key), fmt::format("{}: {}", KeyPath(key), message));
}

void TomlTable::ErrorHere(const std::string& message) {
  diag_->Error(Pos(), path_.empty() ? message : fmt::format("[{}]: {}", path_, message));
}

const toml::node* TomlTable::Find(std::string_view key, Need need) {
  Allow(key);
  const toml::node* node = table_->get(key);
  if (node == nullptr && need == Need::kRequired) {
    diag_->Error(Pos(), fmt::format("missing required key '{}'{}; add it", KeyPath(key),
                                    path_.empty() ? "" : fmt::format(" in [{}]", path_)));
  }
  return node;
}

void TomlTable::TypeError(std::string_view key, const toml::node& node, std::string_view expected,
                          std::string_view example) {
  std::string got(TypeName(node));
  if (auto s = node.value<std::string>()) got += fmt::format(" (\"{}\")", Shorten(*s));
  Error(key, fmt::format("expected {}, got {}; write it like {} = {}", expected, got, key, example));
}

std::optional<std::string> TomlTable::String(std::string_view key, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (auto s = node->value<std::string>(); s && node->is_string()) {
    if (s->empty()) {
      Error(key, "must not be empty");
      return std::nullopt;
    }
    return *s;
  }
  TypeError(key, *node, "a string", "\"...\"");
  return std::nullopt;
}

std::optional<std::string> TomlTable::Choice(std::string_view key, const std::vector<std::string>& choices,
                                             Need need) {
  auto s = String(key, need);
  if (!s) return std::nullopt;
  if (std::find(choices.begin(), choices.end(), *s) != choices.end()) return s;
  Error(key,
        fmt::format("\"{}\" is not one of {}{}", Shorten(*s), JoinNames(choices), DidYouMean(*s, choices)));
  return std::nullopt;
}

std::optional<int64_t> TomlTable::Int(std::string_view key, int64_t min, int64_t max, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (!node->is_integer()) {
    TypeError(key, *node, "an integer", std::to_string(std::max<int64_t>(min, 1)));
    return std::nullopt;
  }
  int64_t v = *node->value<int64_t>();
  if (v < min || v > max) {
    Error(key, fmt::format("{} is out of range; it must be between {} and {}", v, min, max));
    return std::nullopt;
  }
  return v;
}

std::optional<double> TomlTable::Number(std::string_view key, double min, double max, Need need,
                                        bool min_exclusive) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (!node->is_number()) {
    TypeError(key, *node, "a number", "1.0");
    return std::nullopt;
  }
  double v = *node->value<double>();
  bool below = min_exclusive ? !(v > min) : !(v >= min);
  if (!std::isfinite(v) || below || v > max) {
    Error(key, fmt::format("{} is out of range; it must be {} {} and <= {}", v,
                           min_exclusive ? ">" : ">=", min, max));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> TomlTable::Bool(std::string_view key, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (!node->is_boolean()) {
    TypeError(key, *node, "a boolean", "true");
    return std::nullopt;
  }
  return *node->value<bool>();
}

std::optional<double> TomlTable::Quantity(std::string_view key, Need need, std::string_view what,
                                          Result<double> (*parse)(std::string_view), std::string_view example,
                                          bool allow_zero) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (!node->is_string()) {
    if (node->is_number())
      Error(key, fmt::format("{} needs a unit; write it as a string like {} = \"{}\"", what, key, example));
    else
      TypeError(key, *node, fmt::format("{} as a string", what), fmt::format("\"{}\"", example));
    return std::nullopt;
  }
  Result<double> v = parse(*node->value<std::string>());
  if (!v.ok()) {
    Error(key, v.status().message());
    return std::nullopt;
  }
  if (!(*v > 0) && !(allow_zero && *v == 0)) {
    Error(key, fmt::format("{} must be greater than zero, got \"{}\"", what, *node->value<std::string>()));
    return std::nullopt;
  }
  return *v;
}

std::optional<double> TomlTable::Bytes(std::string_view key, Need need) {
  return Quantity(key, need, "a size", &ParseBytes, "80GiB");
}
std::optional<double> TomlTable::Bandwidth(std::string_view key, Need need) {
  return Quantity(key, need, "a bandwidth", &ParseBandwidth, "50Gbps");
}
std::optional<double> TomlTable::Flops(std::string_view key, Need need) {
  return Quantity(key, need, "a FLOP rate", &ParseFlops, "312TFLOPS");
}
std::optional<double> TomlTable::Duration(std::string_view key, Need need) {
  return Quantity(key, need, "a duration", &ParseDuration, "5us");
}

std::optional<double> TomlTable::UsdPerHour(std::string_view key, Need need) {
  return Quantity(key, need, "a price per hour", &ParseUsdPerHour, "2.99 USD/h", /*allow_zero=*/true);
}
std::optional<double> TomlTable::UsdPerGb(std::string_view key, Need need) {
  return Quantity(key, need, "a price per GB", &ParseUsdPerGb, "0.02 USD/GB", /*allow_zero=*/true);
}

std::optional<TomlTable> TomlTable::Table(std::string_view key, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  if (const toml::table* t = node->as_table()) return TomlTable(*t, KeyPath(key), file_, diag_);
  TypeError(key, *node, "a table", "{ ... } or a [section]");
  return std::nullopt;
}

std::vector<TomlTable> TomlTable::TableArray(std::string_view key, Need need, bool allow_single) {
  std::vector<TomlTable> out;
  const toml::node* node = Find(key, need);
  if (node == nullptr) return out;
  if (allow_single) {
    if (const toml::table* t = node->as_table()) {
      out.emplace_back(*t, KeyPath(key), file_, diag_);
      return out;
    }
  }
  const toml::array* arr = node->as_array();
  if (arr == nullptr) {
    TypeError(key, *node, "an array of tables", fmt::format("[[{}]] sections", key));
    return out;
  }
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    if (t == nullptr) {
      diag_->Error(ToPos(file_, (*arr)[i].source()),
                   fmt::format("{}[{}]: expected a table, got {}; write [[{}]] sections", KeyPath(key), i,
                               TypeName((*arr)[i]), key));
      continue;
    }
    out.emplace_back(*t, fmt::format("{}[{}]", KeyPath(key), i), file_, diag_);
  }
  return out;
}

const toml::array* TomlTable::Array(std::string_view key, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return nullptr;
  if (const toml::array* arr = node->as_array()) return arr;
  TypeError(key, *node, "an array", "[1, 2, 3]");
  return nullptr;
}

std::optional<std::vector<int64_t>> TomlTable::IntArray(std::string_view key, int64_t min, int64_t max,
                                                        Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  const toml::array* values = node->as_array();
  bool ok = values != nullptr;
  for (size_t i = 0; ok && i < values->size(); ++i) {
    const toml::node& n = *values->get(i);
    ok = n.is_integer() && *n.value<int64_t>() >= min && *n.value<int64_t>() <= max;
  }
  if (!ok) {
    Error(key, fmt::format("expected an array of integers between {} and {}", min, max));
    return std::nullopt;
  }
  std::vector<int64_t> out;
  for (const toml::node& n : *values) out.push_back(*n.value<int64_t>());
  return out;
}

std::optional<std::vector<std::string>> TomlTable::StringArray(std::string_view key, Need need) {
  const toml::node* node = Find(key, need);
  if (node == nullptr) return std::nullopt;
  const toml::array* arr = node->as_array();
  if (arr == nullptr) {
    TypeError(key, *node, "an array of strings", "[\"a\", \"b\"]");
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const auto& elem : *arr) {
    auto s = elem.value<std::string>();
    if (!s || !elem.is_string()) {
      Error(key, fmt::format("expected an array of strings, found {} in it", TypeName(elem)));
      return std::nullopt;
    }
    out.push_back(*s);
  }
  return out;
}

std::vector<std::pair<std::string, TomlTable>> TomlTable::NamedTables() {
  std::vector<std::pair<std::string, TomlTable>> out;
  for (auto&& [k, v] : *table_) {
    std::string name(k.str());
    Allow(name);
    if (const toml::table* t = v.as_table()) {
      out.emplace_back(name, TomlTable(*t, KeyPath(name), file_, diag_));
    } else {
      TypeError(name, v, "a table", "{ ... } or a [section]");
    }
  }
  return out;
}

void TomlTable::Finish() {
  for (auto&& [k, v] : *table_) {
    std::string_view name = k.str();
    if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
    SourcePos pos = k.source().begin.line > 0 ? ToPos(file_, k.source()) : PosOf(name);
    std::vector<std::string> sorted = known_;
    std::sort(sorted.begin(), sorted.end());
    std::string hint = DidYouMean(name, known_);
    diag_->Error(pos, fmt::format("unknown key '{}'{}{} Valid keys here: {}", Shorten(std::string(name)),
                                  path_.empty() ? " at the top level" : fmt::format(" in [{}]", path_),
                                  hint.empty() ? "." : hint, JoinNames(sorted)));
  }
}

std::unique_ptr<toml::table> ParseTomlText(std::string_view text, const std::string& file,
                                           Diagnostics* diag) {
  try {
    return std::make_unique<toml::table>(toml::parse(text, file));
  } catch (const toml::parse_error& e) {
    diag->Error(ToPos(file, e.source()), fmt::format("TOML syntax: {}", e.description()));
    return nullptr;
  }
}

Result<std::string> ReadTextFile(const std::string& path) {
  // Only a regular file, and one of a size an input of motley has: `--profile /dev/zero` would
  // otherwise be read until the host runs out of memory.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    return Status::InvalidArgument(
        fmt::format("{}: is not a regular file ({}); give the file itself", path,
                    std::filesystem::is_directory(st) ? "a folder" : "a device, a pipe or a socket"));
  if (!ec && std::filesystem::exists(st)) {
    const uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (!ec && bytes > kMaxTextFileBytes)
      return Status::InvalidArgument(
          fmt::format("{}: is {} MiB; motley reads inputs of this kind up to {} MiB — is it "
                      "the right file?",
                      path, bytes >> 20, kMaxTextFileBytes >> 20));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open the file (does it exist?)", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("{}: read failed", path));
  return ss.str();
}

}  // namespace motley
