// TomlTable: strict, typed reading of one TOML table, reporting every problem to Diagnostics.
//
// Each getter declares its key as valid at this place, whether or not the key is present; Finish()
// then reports every key that no getter asked for, with "did you mean" and the list of valid keys.
// So a parser that reads all its keys and calls Finish() rejects unknown keys for free.
//
// Getters return std::nullopt when the key is absent or wrong (the error is already recorded);
// callers keep the default from their config struct in that case.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/diagnostics.h"
#include "core/status.h"
#include "core/toml_include.h"

namespace motley {

enum class Need { kOptional, kRequired };

class TomlTable {
 public:
  /// REQUIRES: `table` and `diag` outlive this object.
  /// `path` names this table in messages ("" for the root, "nodes[2]", "optimizer").
  TomlTable(const toml::table& table, std::string path, std::string file, Diagnostics* diag);

  std::optional<std::string> String(std::string_view key, Need need = Need::kOptional);
  /// One of `choices`; anything else is an error listing them (with "did you mean").
  std::optional<std::string> Choice(std::string_view key, const std::vector<std::string>& choices,
                                    Need need = Need::kOptional);
  std::optional<int64_t> Int(std::string_view key, int64_t min, int64_t max, Need need = Need::kOptional);
  /// Integer or float, within [min, max]; `min_exclusive` makes the lower bound strict.
  std::optional<double> Number(std::string_view key, double min, double max, Need need = Need::kOptional,
                               bool min_exclusive = false);
  std::optional<bool> Bool(std::string_view key, Need need = Need::kOptional);

  /// Quantities written as strings with units; all must be > 0.
  std::optional<double> Bytes(std::string_view key, Need need = Need::kOptional);
  std::optional<double> Bandwidth(std::string_view key, Need need = Need::kOptional);
  std::optional<double> Flops(std::string_view key, Need need = Need::kOptional);
  std::optional<double> Duration(std::string_view key, Need need = Need::kOptional);
  /// Prices in US dollars, zero allowed: "2.99 USD/h" -> dollars an hour, "0.02 USD/GB" -> dollars a GB.
  std::optional<double> UsdPerHour(std::string_view key, Need need = Need::kOptional);
  std::optional<double> UsdPerGb(std::string_view key, Need need = Need::kOptional);

  std::optional<TomlTable> Table(std::string_view key, Need need = Need::kOptional);
  /// An array of tables ([[key]]). A single table is accepted as an array of one when
  /// `allow_single` is set.
  std::vector<TomlTable> TableArray(std::string_view key, Need need = Need::kOptional,
                                    bool allow_single = false);
  /// Any array (its elements are the caller's to check).
  const toml::array* Array(std::string_view key, Need need = Need::kOptional);
  /// An array of integers, each within [min, max].
  std::optional<std::vector<int64_t>> IntArray(std::string_view key, int64_t min, int64_t max,
                                               Need need = Need::kOptional);
  /// An array of strings.
  std::optional<std::vector<std::string>> StringArray(std::string_view key, Need need = Need::kOptional);

  /// Every entry of this table as a named sub-table ([device_types.NAME] style). All keys are
  /// valid here; an entry that is not a table is an error.
  std::vector<std::pair<std::string, TomlTable>> NamedTables();

  /// Declares `key` valid without reading it (for keys read another way).
  void Allow(std::string_view key);
  bool Has(std::string_view key) const;

  /// Reports an error at `key`'s value (or at the table when the key is absent).
  void Error(std::string_view key, const std::string& message);
  /// Reports an error at the table itself.
  void ErrorHere(const std::string& message);
  SourcePos PosOf(std::string_view key) const;
  SourcePos Pos() const;
  /// "nodes[2].count", or "count" at the root.
  std::string KeyPath(std::string_view key) const;
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  Diagnostics* diagnostics() const { return diag_; }

  /// Reports every key of this table that no getter declared.
  void Finish();

 private:
  const toml::node* Find(std::string_view key, Need need);
  void TypeError(std::string_view key, const toml::node& node, std::string_view expected,
                 std::string_view example);
  std::optional<double> Quantity(std::string_view key, Need need, std::string_view what,
                                 Result<double> (*parse)(std::string_view), std::string_view example,
                                 bool allow_zero = false);

  const toml::table* table_;
  std::string path_;
  std::string file_;
  Diagnostics* diag_;
  std::vector<std::string> known_;
};

/// Parses TOML text; a syntax error becomes one diagnostic with its position.
/// Returns nullptr on a syntax error.
std::unique_ptr<toml::table> ParseTomlText(std::string_view text, const std::string& file, Diagnostics* diag);

/// The largest text input motley reads whole (a configuration, a profile, a metrics file, a trace).
inline constexpr uintmax_t kMaxTextFileBytes = uintmax_t{1} << 30;

/// Reads a whole file into a string; NotFound / IoError with the path on failure, and one error for
/// what is not a regular file (a device, a pipe, a folder) or is larger than kMaxTextFileBytes.
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace motley
