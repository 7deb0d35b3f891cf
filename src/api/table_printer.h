// Aligned text tables for the CLI's human output.
#pragma once

#include <string>
#include <vector>

namespace motley {

class TablePrinter {
 public:
  explicit TablePrinter(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  /// Columns are left-aligned except those listed here (numbers read better right-aligned).
  void AlignRight(std::vector<size_t> columns) { right_ = std::move(columns); }
  std::string ToString() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> right_;
};

}  // namespace motley
