// Diagnostics: every problem found in one config file, each as one message that names the file,
// line and column, the key, every factor involved and the fix. A file is validated as a whole, so
// a user sees all of its problems at once rather than one per run.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace motley {

struct SourcePos {
  std::string file;  // as the user named it
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;    // 1-based; 0 when unknown

  std::string ToString() const;  // "file:line:column", "file:line" or "file"
};

class Diagnostics {
 public:
  void Error(const SourcePos& pos, std::string message);
  bool has_errors() const { return !errors_.empty(); }
  size_t num_errors() const { return errors_.size(); }
  const std::vector<std::string>& errors() const { return errors_; }

  /// OK when there were no errors; otherwise InvalidArgument with one error per line.
  Status ToStatus() const;

 private:
  std::vector<std::string> errors_;
};

}  // namespace motley
